"""The qualification gate (``docs/gates.md``): carry a QUALIFIED admission at commit Q to HEAD.

PASS only if the admission receipt says QUALIFIED for Q, every carried file and every
file under a carried prefix is byte-identical between Q and HEAD, and every carried unit
(``path.py:Qualified.name``) is AST-identical (``ast.dump(node, include_attributes=False)``:
comments and formatting may change, code may not). Git is read with plumbing only
(``rev-parse``, ``ls-tree``, ``cat-file``). Evidence lists every file and unit with both
digests (SHA-256 of the file bytes / of the unit's AST dump).
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.errors import ExternalError, FormatError

from ..plan.model import Carry
from ..vocabulary import GateVerdict
from .gate import Finding
from .receipts import AdmissionReceipt, read_admission_receipt

if TYPE_CHECKING:
    from ledger.store import Ledger

    from ..plan.model import Plan

__all__ = ["Git", "QualificationGate", "QualificationResult", "qualify", "unit_dump"]

Verdict = GateVerdict


class Git:
    """Read-only git plumbing on one repository."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        if not repo.is_dir():
            raise FormatError(f"repository {repo} is not a directory")

    def _run(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(["git", "-C", str(self.repo), *args], capture_output=True, timeout=60, check=False)
        except FileNotFoundError:
            raise ExternalError("git is not installed") from None
        except subprocess.TimeoutExpired:
            raise ExternalError(f"git {args[0]} timed out in {self.repo}") from None

    def resolve(self, ref: str) -> str:
        """The full commit id of ``ref``; ``FormatError`` (exit 2) if there is no such commit."""
        if not ref or ref.startswith("-"):
            raise FormatError(f"{ref!r} is not a commit")
        done = self._run("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
        if done.returncode != 0:
            probe = self._run("rev-parse", "--git-dir")
            if probe.returncode != 0:
                raise FormatError(f"{self.repo} is not a git repository")
            raise FormatError(f"commit {ref} is not in {self.repo}")
        return done.stdout.decode().strip()

    def tree(self, commit: str, paths: list[str], recursive: bool) -> dict[str, tuple[str, str]]:
        """path -> (object type, object id) for entries of ``commit`` under ``paths``."""
        args = ["ls-tree", "-z", "--full-tree"] + (["-r"] if recursive else []) + [commit, "--", *paths]
        done = self._run(*args)
        if done.returncode != 0:
            raise ExternalError(f"git ls-tree failed: {done.stderr.decode(errors='replace').strip()}")
        out = {}
        for record in done.stdout.split(b"\0"):
            if not record:
                continue
            meta, _, name = record.partition(b"\t")
            _mode, kind, oid = meta.decode().split()
            out[name.decode("utf-8", errors="surrogateescape")] = (kind, oid)
        return out

    def blob(self, oid: str) -> bytes:
        done = self._run("cat-file", "blob", oid)
        if done.returncode != 0:
            raise ExternalError(f"git cat-file blob {oid} failed")
        return done.stdout


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _defines(stmt: ast.stmt, name: str) -> bool:
    """Does ``stmt`` bind ``name`` (class, function, or a plain/annotated assignment)?"""
    if isinstance(stmt, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return stmt.name == name
    if isinstance(stmt, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
    if isinstance(stmt, ast.AnnAssign):
        return isinstance(stmt.target, ast.Name) and stmt.target.id == name
    return False


def unit_dump(source: bytes, qualified: str) -> str | None:
    """``ast.dump`` (no positions) of the class/function/assignment named ``qualified``, or None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    body: list[ast.stmt] = tree.body
    node: ast.AST | None = None
    for part in qualified.split("."):
        found: ast.AST | None = None
        for stmt in body:
            if _defines(stmt, part):
                found = stmt
        if found is None:
            return None
        node = found
        body = found.body if isinstance(found, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) else []
    return None if node is None else ast.dump(node, include_attributes=False)


@dataclass(frozen=True)
class QualificationResult:
    verdict: Verdict
    qualified_commit: str
    head: str
    evidence: dict[str, Any]
    failures: tuple[str, ...]

    @property
    def summary(self) -> str:
        files = self.evidence["files"]
        units = self.evidence["units"]
        head = (f"{len(files)} file(s) and {len(units)} unit(s) carried from {self.qualified_commit[:12]} "
                f"to {self.head[:12]}")
        return f"{self.verdict}: {head}" + (f"; {'; '.join(self.failures)}" if self.failures else "")


def qualify(repo: Path, qualified: str, head: str, carry: Carry, admission: AdmissionReceipt) -> QualificationResult:
    """Check that the admission at ``qualified`` carries to ``head`` for ``carry``."""
    git = Git(repo)
    q = git.resolve(qualified)
    h = git.resolve(head)
    if not (carry.files or carry.prefixes or carry.units):
        raise FormatError("nothing to carry: give files, prefixes or units (in the plan or as options)")
    failures: list[str] = []
    if admission.verdict != "QUALIFIED":
        failures.append(f"admission receipt says {admission.verdict}, not QUALIFIED")
    if admission.commit != q:
        failures.append(f"admission receipt is for {admission.commit[:12]}, not the qualified commit {q[:12]}")

    files: list[dict[str, Any]] = []
    unit_files = sorted({unit.split(":", 1)[0] for unit in carry.units})
    wanted = sorted(set(carry.files) | set(unit_files))
    q_files = git.tree(q, wanted, recursive=False) if wanted else {}
    h_files = git.tree(h, wanted, recursive=False) if wanted else {}
    q_pref = git.tree(q, list(carry.prefixes), recursive=True) if carry.prefixes else {}
    h_pref = git.tree(h, list(carry.prefixes), recursive=True) if carry.prefixes else {}
    blob_cache: dict[str, bytes] = {}

    def content(entry: tuple[str, str] | None) -> bytes | None:
        if entry is None or entry[0] != "blob":
            return None
        if entry[1] not in blob_cache:
            blob_cache[entry[1]] = git.blob(entry[1])
        return blob_cache[entry[1]]

    def compare(path: str, source: str, qe: tuple[str, str] | None, he: tuple[str, str] | None) -> None:
        qd, hd = content(qe), content(he)
        identical = qd is not None and hd is not None and qd == hd
        files.append({"path": path, "carried_by": source,
                      "qualified_sha256": None if qd is None else _sha(qd),
                      "head_sha256": None if hd is None else _sha(hd), "identical": identical})
        if not identical:
            if qd is None or hd is None:
                where = "qualified commit" if qd is None else "HEAD"
                kind = "a directory" if (qe if qd is None else he) is not None else "missing"
                failures.append(f"{path}: {kind} at the {where}")
            else:
                failures.append(f"{path}: changed between {q[:12]} and {h[:12]}")

    for path in carry.files:
        compare(path, "file", q_files.get(path), h_files.get(path))
    for prefix in carry.prefixes:
        under = sorted({p for p in q_pref if p.startswith(prefix)} | {p for p in h_pref if p.startswith(prefix)})
        if not under:
            failures.append(f"prefix {prefix}: no files at either commit")
        for path in under:
            compare(path, f"prefix:{prefix}", q_pref.get(path), h_pref.get(path))

    units: list[dict[str, Any]] = []
    for unit in carry.units:
        path, name = unit.split(":", 1)
        qd, hd = content(q_files.get(path)), content(h_files.get(path))
        q_dump = None if qd is None else unit_dump(qd, name)
        h_dump = None if hd is None else unit_dump(hd, name)
        identical = q_dump is not None and q_dump == h_dump
        units.append({"unit": unit,
                      "qualified_sha256": None if q_dump is None else _sha(q_dump.encode()),
                      "head_sha256": None if h_dump is None else _sha(h_dump.encode()),
                      "identical": identical})
        if q_dump is None or h_dump is None:
            where = "qualified commit" if q_dump is None else "HEAD"
            failures.append(f"{unit}: not found (or not parseable) at the {where}")
        elif not identical:
            failures.append(f"{unit}: AST differs between {q[:12]} and {h[:12]}")

    verdict: Verdict = "FAIL" if failures else "PASS"
    evidence = {
        "repo": str(repo),
        "qualified_commit": q,
        "head": h,
        "admission": admission.to_json(),
        "carry": carry.to_json(),
        "files": files,
        "units": units,
        "failures": failures,
    }
    return QualificationResult(verdict, q, h, evidence, tuple(failures))


@dataclass(frozen=True)
class QualificationGate:
    """The gate: the admission receipt at ``qualified_commit`` carried to HEAD (the plan's commit unless ``head``),
    for the plan's ``[qualification]`` unless ``carry`` is given; HEAD must be the plan's commit."""

    repo: Path
    qualified_commit: str
    admission: Path
    head: str | None = None
    carry: Carry | None = None

    def check(self, ledger: Ledger, plan: Plan) -> Finding:
        result = qualify(self.repo, self.qualified_commit, self.head or plan.commit, self.carry or plan.qualification,
                         read_admission_receipt(self.admission))
        failures = list(result.failures)
        evidence = dict(result.evidence)
        if result.head != plan.commit:
            failures.append(f"HEAD {result.head[:12]} is not the plan's commit {plan.commit[:12]}")
            evidence["failures"] = failures
        verdict: GateVerdict = "FAIL" if failures else "PASS"
        summary = result.summary if verdict == result.verdict else f"FAIL: {'; '.join(failures)}"
        return Finding("qualification", verdict, summary, evidence, commit=result.head)
