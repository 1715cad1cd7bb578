"""One-way layering, checked on every import (relative, inside functions, under TYPE_CHECKING).

``cli -> runner -> ledger``; the ledger never imports runner or cli. Inside runner the
packages form layers (``docs/architecture.md``)::

    foundation   runner.vocabulary, runner.fields          import only ledger
    leaves       runner.sim, runner.measure, runner.drivers   ledger, foundation, each other
    stack        events < plan < state < decide < gates < report < audit < execution < demo

A stack layer may import ledger, the foundation, the leaves and the layers below it,
never one above. No module graph may have a cycle. The checks run on the repository
and on planted sources that break each rule.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
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


# ---------------------------------------------------------------------- the repository


def test_repository_has_no_import_cycle() -> None:
    assert cycles(import_graph(sources_of(REPO))) == []


def test_repository_keeps_its_layers() -> None:
    assert layering_violations(import_graph(sources_of(REPO))) == []


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


# ---------------------------------------------------------------------- planted breaches


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
