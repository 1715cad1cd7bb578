"""One-way layering, checked on every import (relative, inside functions, under TYPE_CHECKING).

``cli -> runner -> ledger``; the ledger never imports runner or cli. Inside runner the
packages form layers (``docs/architecture.md``)::

    foundation   runner.vocabulary, runner.fields          import only ledger
    leaves       runner.sim, runner.measure, runner.drivers   ledger, foundation, each other
    stack        events < plan < state < decide < rehearsal < smoke < gates < promotion < report
                 < audit < execution < demo < app

A stack layer may import ledger, the foundation, the leaves and the layers below it,
never one above. No module graph may have a cycle. Every package has a face (its
``__init__``'s ``__all__``): from outside a runner package only the names its face
exports may be imported (from the face, from the module that defines them, or from a
submodule the face exports whole), and no ``_private`` name or module of another
package at all; the CLI imports package faces only (``ledger``, ``runner.app``, and a
face's types for annotations). Outside ``runner/events`` and ``runner/state`` nothing reads
a stored event's payload as a dict (``event.payload[...]``): readers read typed events
(``runner.events.payloads`` through the catalogue, or the folded state); the dict reads
not yet converted (``.payload.get(...)``, a payload bound to a name or collected by a
comprehension to be read later) are counted per module, and the count may only go down. The checks run on the repository and on planted sources that break each
rule.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("ledger", "runner", "cli")
FOUNDATION = ("runner.vocabulary", "runner.fields")
LEAVES = ("runner.sim", "runner.measure", "runner.drivers")
STACK = ("runner.events", "runner.plan", "runner.state", "runner.decide", "runner.rehearsal", "runner.smoke",
         "runner.gates", "runner.promotion", "runner.report", "runner.audit", "runner.execution", "runner.demo",
         "runner.app")


def _module_name(rel: str) -> str:
    parts = list(Path(rel).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def sources_of(root: Path) -> dict[str, str]:
    """Relative path -> source text of every module of the three packages under ``root``."""
    return {str(path.relative_to(root)): path.read_text() for package in PACKAGES
            for path in sorted((root / package).rglob("*.py"))}


def import_graph(sources: Mapping[str, str]) -> dict[str, set[str]]:
    """Module -> the modules of these packages it imports, anywhere in its body."""
    modules = {_module_name(rel): rel for rel in sources}

    def known(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    graph: dict[str, set[str]] = {}
    for name, rel in modules.items():
        is_package = rel.endswith("__init__.py")
        found: set[str] = set()
        for node in ast.walk(ast.parse(sources[rel], filename=rel)):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                # ``from . import x``: x is a submodule when one exists, else a name in the package.
                subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in modules]
                targets = subs if len(subs) == len(node.names) else [module, *subs]
            for target in targets:
                resolved = known(target)
                if resolved is not None and resolved != name:
                    found.add(resolved)
        graph[name] = found
    return graph


def _group(module: str) -> str | None:
    for group in (*FOUNDATION, *LEAVES, *STACK):
        if module == group or module.startswith(group + "."):
            return group
    return None


def layering_violations(graph: Mapping[str, set[str]]) -> list[str]:
    out = []
    for module, deps in sorted(graph.items()):
        top = module.split(".")[0]
        for dep in sorted(deps):
            dep_top = dep.split(".")[0]
            if top == "ledger" and dep_top != "ledger":
                out.append(f"{module} imports {dep}: the ledger knows nothing of runner or cli")
            elif top == "runner" and dep_top == "cli":
                out.append(f"{module} imports {dep}: runner never imports cli")
            if top != "runner" or dep_top != "runner":
                continue
            mine, theirs = _group(module), _group(dep)
            if mine is None or theirs is None or mine == theirs:
                if mine is None and module != "runner":
                    out.append(f"{module} belongs to no layer (see docs/architecture.md)")
                continue
            if mine in FOUNDATION:
                out.append(f"{module} imports {dep}: a foundation module imports only ledger")
            elif mine in LEAVES and theirs not in LEAVES + FOUNDATION:
                out.append(f"{module} imports {dep}: {mine} is a leaf (ledger, foundation and leaves only)")
            elif mine in STACK and theirs in STACK and STACK.index(theirs) > STACK.index(mine):
                out.append(f"{module} imports {dep}: {theirs} is above {mine}")
    return out


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@dataclass(frozen=True)
class Import:
    """One imported thing: ``module`` (as resolved) and the ``name`` taken from it (``None``: the module)."""

    importer: str
    module: str
    name: str | None


def imports_of(sources: Mapping[str, str]) -> list[Import]:
    """Every import of a module of these packages, name by name (``from m import a, b`` is two)."""
    modules = {_module_name(rel): rel for rel in sources}
    found: list[Import] = []
    for name, rel in modules.items():
        is_package = rel.endswith("__init__.py")
        for node in ast.walk(ast.parse(sources[rel], filename=rel)):
            if isinstance(node, ast.Import):
                found += [Import(name, alias.name, None) for alias in node.names
                          if alias.name.split(".")[0] in PACKAGES]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                if module.split(".")[0] not in PACKAGES:
                    continue
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    found.append(Import(name, sub, None) if sub in modules else Import(name, module, alias.name))
    return found


def faces_of(sources: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """Package -> the names its face exports (its ``__init__``'s ``__all__``; empty when it has none)."""
    faces: dict[str, tuple[str, ...]] = {}
    for rel, text in sources.items():
        if not rel.endswith("__init__.py"):
            continue
        exported: tuple[str, ...] = ()
        for node in ast.parse(text, filename=rel).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) and node.value is not None else []
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                assert isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None
                exported = tuple(ast.literal_eval(node.value))
        faces[_module_name(rel)] = exported
    return faces


def _package(module: str) -> str:
    """The package whose face speaks for ``module``: ``runner.<package>``, else the top package."""
    parts = module.split(".")
    if parts[0] == "runner" and len(parts) > 1 and f"runner.{parts[1]}" not in FOUNDATION:
        return f"runner.{parts[1]}"
    return module if parts[0] == "runner" else parts[0]


def face_violations(found: list[Import], faces: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Imports that reach behind another package's face, and CLI imports of anything but a face."""
    out = []
    for imp in found:
        mine, theirs = _package(imp.importer), _package(imp.module)
        if mine == theirs or imp.importer.split(".")[0] == imp.module.split(".")[0] == "ledger":
            continue
        what = imp.module if imp.name is None else f"{imp.module}.{imp.name}"
        inner = imp.module[len(theirs):].lstrip(".").split(".") if imp.module != theirs else []
        if any(part.startswith("_") for part in [*inner, imp.name or ""]):
            out.append(f"{imp.importer} imports {what}: private to {theirs}")
            continue
        if imp.importer.startswith("cli.") and imp.module != theirs:
            out.append(f"{imp.importer} imports {what}: the CLI imports package faces only")
            continue
        if not theirs.startswith("runner.") or theirs not in faces:
            continue
        exported = faces[theirs]
        public_module = len(inner) == 1 and inner[0] in exported   # a submodule the face exports whole
        on_face = public_module or (imp.module == theirs if imp.name is None else imp.name in exported)
        if not on_face:
            out.append(f"{imp.importer} imports {what}: not on the face of {theirs}")
    return sorted(set(out))


# ---------------------------------------------------------------------- the repository


def test_repository_has_no_import_cycle() -> None:
    assert cycles(import_graph(sources_of(REPO))) == []


def test_repository_keeps_its_layers() -> None:
    assert layering_violations(import_graph(sources_of(REPO))) == []


def test_repository_keeps_to_the_faces() -> None:
    sources = sources_of(REPO)
    assert face_violations(imports_of(sources), faces_of(sources)) == []


def test_every_runner_package_has_a_face() -> None:
    faces = faces_of(sources_of(REPO))
    packages = sorted(p.parent.name for p in (REPO / "runner").glob("*/__init__.py"))
    assert [p for p in packages if not faces.get(f"runner.{p}")] == []


def test_runner_has_at_most_two_loose_modules() -> None:
    loose = sorted(p.name for p in (REPO / "runner").glob("*.py") if p.name != "__init__.py")
    assert loose == ["fields.py", "vocabulary.py"]


def test_no_update_or_delete_of_events_outside_migrations() -> None:
    offenders = []
    for package in ("ledger", "runner", "cli"):
        for path in sorted((REPO / package).rglob("*.py")):
            text = path.read_text().lower()
            for needle in ("update events", "delete from events", "_events.update(", "_events.delete("):
                if needle in text and path.name != "ledger_tour.py":
                    offenders.append(f"{path.relative_to(REPO)}: {needle}")
    assert offenders == []


PAYLOAD_HOMES = ("runner/events/", "runner/state/")
# The dict reads of payloads left, per module (to be converted to typed events; never more).
PAYLOAD_GETS_LEFT: dict[str, int] = {
    "runner/execution/recorder.py": 2,   # appended NewEvents' payloads, and the snapshots a restore is given
    "runner/gates/power.py": 8,          # waves and archive rows handed to the power figures as dicts
    "runner/promotion/check.py": 19,     # a presented receipt's and bundle's events: hostile input, checked member
    "runner/promotion/looks.py": 2,      # by member (a typed read would turn a failed check into exit 2);
    "runner/app/promotion.py": 2,        # promotion.registered is not a window event (no payload class)
}


def _is_payload(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "payload"


def payload_reads(sources: Mapping[str, str]) -> tuple[list[str], dict[str, int]]:
    """``<x>.payload[...]`` outside the payloads' homes (``path:line`` each), and per module the other dict reads:
    ``<x>.payload.get(...)``, ``name = <x>.payload``, ``[<x>.payload for ...]``."""
    subscripts: list[str] = []
    gets: dict[str, int] = {}
    for rel, text in sorted(sources.items()):
        if rel.startswith(PAYLOAD_HOMES) or not rel.startswith(("runner/", "cli/")):
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "payload":
                subscripts.append(f"{rel}:{node.lineno}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                    and _is_payload(node.func.value)) \
                    or (isinstance(node, ast.Assign | ast.AnnAssign) and _is_payload(node.value)) \
                    or (isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp) and _is_payload(node.elt)):
                gets[rel] = gets.get(rel, 0) + 1
    return subscripts, gets


def test_no_payload_is_read_as_a_dict_outside_events_and_state() -> None:
    subscripts, gets = payload_reads(sources_of(REPO))
    assert subscripts == []
    grown = {rel: n for rel, n in gets.items() if n > PAYLOAD_GETS_LEFT.get(rel, 0)}
    assert grown == {}, "read the typed payload (runner.events.payloads) instead"
    assert gets == PAYLOAD_GETS_LEFT, "a module converted to typed reads: lower its count in PAYLOAD_GETS_LEFT"


# ---------------------------------------------------------------------- planted breaches


def test_a_planted_payload_read_is_found() -> None:
    planted = {"runner/report/x.py": "def f(event):\n    return event.payload['seq']\n",
               "cli/y.py": "def g(e):\n    p = e.payload\n    return e.payload.get('start'), [x.payload for x in e]\n",
               "runner/state/z.py": "def h(e):\n    return e.payload['start'], e.payload.get('cell')\n",
               "ledger/w.py": "def k(e):\n    return e.payload['origin']\n"}
    subscripts, gets = payload_reads(planted)
    assert subscripts == ["runner/report/x.py:2"]   # the fold's home and the ledger may read payloads
    assert gets == {"cli/y.py": 3}


BASE = {"runner/__init__.py": "", "runner/events/__init__.py": "", "runner/plan/__init__.py": "",
        "runner/state/__init__.py": "", "runner/measure/__init__.py": "", "ledger/__init__.py": "",
        "runner/fields.py": "from ledger import errors\n", "ledger/errors.py": "", "cli/__init__.py": ""}


def _planted(extra: Mapping[str, str]) -> dict[str, set[str]]:
    return import_graph({**BASE, **extra})


def test_a_planted_cycle_inside_functions_is_found() -> None:
    graph = _planted({
        "runner/plan/a.py": "def f():\n    from .b import g\n",
        "runner/plan/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n",
    })
    assert cycles(graph) == [["runner.plan.a", "runner.plan.b"]]


def test_a_planted_upward_import_is_found() -> None:
    graph = _planted({"runner/events/x.py": "def f():\n    from ..state.y import z\n", "runner/state/y.py": ""})
    assert layering_violations(graph) == ["runner.events.x imports runner.state.y: runner.state is above runner.events"]


def test_a_leaf_importing_the_stack_is_found() -> None:
    graph = _planted({"runner/measure/m.py": "from runner.plan import p\n", "runner/plan/p.py": ""})
    assert any("is a leaf" in v for v in layering_violations(graph))


def test_the_ledger_importing_runner_is_found() -> None:
    graph = _planted({"ledger/x.py": "import runner.fields\n"})
    assert any("knows nothing of runner" in v for v in layering_violations(graph))


def test_a_module_outside_every_layer_is_found() -> None:
    graph = _planted({"runner/loose.py": "from .fields import x\n"})
    assert "runner.loose belongs to no layer (see docs/architecture.md)" in layering_violations(graph)


def _face_breaches(extra: Mapping[str, str]) -> list[str]:
    sources = {**BASE, "runner/state/__init__.py": 'from .fold import State\n__all__ = ["State"]\n',
               "runner/state/fold.py": "State = 1\nthing = 2\n_cache = 3\n", "runner/state/_cached.py": "x = 1\n",
               "runner/events/__init__.py": 'from . import payloads\n__all__ = ["payloads"]\n',
               "runner/events/payloads.py": "Hold = 1\n", "runner/execution/__init__.py": "",
               "ledger/keys.py": "_secret = 1\nSigner = 2\n", **extra}
    return face_violations(imports_of(sources), faces_of(sources))


def test_a_planted_cli_import_behind_a_runner_face_is_found() -> None:
    assert _face_breaches({"cli/x.py": "def f():\n    from runner.state.fold import State\n"}) == [
        "cli.x imports runner.state.fold.State: the CLI imports package faces only"]


def test_a_planted_cli_import_of_a_ledger_module_is_found() -> None:
    assert _face_breaches({"cli/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                       "    from ledger.keys import Signer\n"}) == [
        "cli.x imports ledger.keys.Signer: the CLI imports package faces only"]


def test_a_planted_import_of_a_name_off_the_face_is_found() -> None:
    assert _face_breaches({"runner/execution/x.py": "from ..state.fold import thing\n"}) == [
        "runner.execution.x imports runner.state.fold.thing: not on the face of runner.state"]
    assert _face_breaches({"runner/execution/x.py": "from ..state import fold\n"}) == [
        "runner.execution.x imports runner.state.fold: not on the face of runner.state"]


def test_a_planted_import_of_a_private_module_or_name_is_found() -> None:
    assert _face_breaches({"runner/execution/x.py": "from ..state._cached import x\n"}) == [
        "runner.execution.x imports runner.state._cached.x: private to runner.state"]
    assert _face_breaches({"runner/execution/x.py": "from ..state.fold import _cache\n"}) == [
        "runner.execution.x imports runner.state.fold._cache: private to runner.state"]
    assert _face_breaches({"runner/execution/x.py": "def f():\n    from ledger.keys import _secret\n"}) == [
        "runner.execution.x imports ledger.keys._secret: private to ledger"]


def test_what_a_face_exports_may_be_imported_from_its_module_or_its_face() -> None:
    assert _face_breaches({
        "runner/execution/x.py": "from ..state.fold import State\nfrom ..state import State as S\n"
                                 "from ..events import payloads\nfrom ..events.payloads import Hold\n",
        "runner/state/y.py": "from ._cached import x\nfrom .fold import _cache\n",   # inside its own package
        "cli/x.py": "from runner.state import State\nfrom ledger import FormatError\n",
    }) == []


@pytest.mark.parametrize("text", ["from . import b\n", "from .b import thing\n", "import runner.plan.b\n"])
def test_every_import_form_is_resolved(text: str) -> None:
    graph = _planted({"runner/plan/a.py": text, "runner/plan/b.py": ""})
    assert graph["runner.plan.a"] == {"runner.plan.b"}


CITATION = re.compile(r"\bSPEC \d|\bSPEC section|\bissue \d+|\bissues \d+ and|\.notes/|CONTRACTS\.md|"
                      r"\b\d{3}_[0-9a-f]{16}\.txt")


def test_code_and_docs_stand_on_their_own() -> None:
    """No comment, docstring or doc cites the design notes tally was built from: docs/ anchors only."""
    offenders = []
    paths = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md", *sorted((REPO / "examples").rglob("*.toml"))]
    for package in (*PACKAGES, "bench", "tests"):
        paths += [p for p in sorted((REPO / package).rglob("*.py")) if p != Path(__file__).resolve()]
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if CITATION.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:80]}")
    assert offenders == []
