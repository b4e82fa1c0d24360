"""The layout: each package is one side of the wire, and no module imports itself back.

* ``coordinator`` (the server process) never imports ``agents``;
* ``agents`` (everything in an agent's or operator's process) imports ``coordinator`` in
  exactly one place, lazily: the ``serve`` verb;
* ``protocol`` (what both sides need) imports neither side, nor ``probes`` or ``ledger``;
* no import cycle between modules, counting imports inside functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "coordinator", "agents", "probes", "ledger")
SERVE_VERB = "agents.cli.serve"  # where `lockstep serve` starts the server


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The most specific project module an imported dotted name refers to."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(module: str) -> list[tuple[str, bool]]:
    """(imported module, at module level?) for every import statement in ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    top_level = {id(node) for node in tree.body}
    found: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names] if base else []
        for name in names:
            target = _resolve(name)
            if target is not None and target != module:
                found.append((target, id(node) in top_level))
    return found


GRAPH = {module: _imports(module) for module in MODULES}


def test_the_layout_finds_every_package():
    assert {m.split(".")[0] for m in MODULES} == set(PACKAGES)
    assert "coordinator.core" in MODULES and "agents.cli.serve" in MODULES


def test_coordinator_never_imports_agents():
    offenders = [(m, t) for m, targets in GRAPH.items() if m.startswith("coordinator") for t, _ in targets if t.startswith("agents")]
    assert offenders == []


def test_agents_import_the_coordinator_only_lazily_in_the_serve_verb():
    offenders = []
    for module, targets in GRAPH.items():
        if not module.startswith("agents"):
            continue
        for target, at_top in targets:
            if target.startswith("coordinator") and (module != SERVE_VERB or at_top):
                offenders.append((module, target))
    assert offenders == []


def test_protocol_imports_no_side():
    offenders = [(m, t) for m, targets in GRAPH.items() if m.startswith("protocol") for t, _ in targets if not t.startswith("protocol")]
    assert offenders == []


def find_cycles(edges: dict[str, set[str]], packages: set[str] = frozenset()) -> list[list[str]]:
    """Every back edge of a depth-first walk, as the cycle it closes.  A package's
    ``__init__`` (named in ``packages``) importing its own submodules is how a package is
    built, not a cycle."""
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(module: str, stack: list[str]) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(edges.get(module, ())):
            if module in packages and target.rpartition(".")[0] == module:
                continue
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target, stack)
        stack.pop()
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
    return cycles


def test_no_import_cycles():
    edges = {module: {target for target, _ in targets} for module, targets in GRAPH.items()}
    packages = {m for m, path in MODULES.items() if path.name == "__init__.py"}
    assert find_cycles(edges, packages) == []


def test_the_cycle_finder_sees_a_cycle():
    assert find_cycles({"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}}) == [["p.a", "p.b", "p.c", "p.a"]]
    assert find_cycles({"p.a": {"p.b"}, "p.b": set()}) == []
