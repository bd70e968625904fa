"""The layering of docs/architecture.md, checked on the source: every import (module level or inside a function) points down the
table, and the module graph has no import circle, lazy imports included."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAY_IMPORT = {"traces": set(), "policies": {"traces"}, "oracle": {"traces", "policies"},
              "simulator": {"traces", "policies"}, "calibration": {"traces", "policies", "simulator"},
              "experiments": {"traces", "policies", "oracle", "simulator", "calibration"}}


def _modules() -> dict[str, Path]:
    out = {}
    for folder in MAY_IMPORT:
        for p in (ROOT / folder).rglob("*.py"):
            parts = p.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _graph(mods: dict[str, Path]) -> dict[str, set[str]]:
    """module -> our modules it imports anywhere in its body (`from a import b` counts a.b when it is a module)."""
    def ours(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = defaultdict(set)
    for m, p in mods.items():
        package = m if p.name == "__init__.py" else m.rpartition(".")[0]
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            graph[m].update(t for t in map(ours, names) if t is not None and t != m)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def test_the_circle_finder_finds_a_known_circle_and_nothing_in_a_chain():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}}) == []


def test_every_import_points_down_the_table():
    graph = _graph(_modules())
    assert len(graph) > 50  # the walk found the code
    up = sorted((m, t) for m, ts in graph.items() for t in ts
                if t.split(".")[0] != m.split(".")[0] and t.split(".")[0] not in MAY_IMPORT[m.split(".")[0]])
    assert up == [], f"imports that run up the layering of docs/architecture.md: {up[:10]}"


def test_no_import_circles_lazy_imports_included():
    assert circles(_graph(_modules())) == []


def test_no_import_by_string_points_up_the_table():
    """`importlib` strings and `module:attr` defaults count as imports too."""
    import re

    pattern = re.compile(r"[\"'](oracle|calibration|experiments)\.[a-z_.]+(:[A-Za-z_]+)?[\"']")
    hits = [f"{p.relative_to(ROOT)}:{i}" for folder in ("traces", "policies", "simulator")
            for p in (ROOT / folder).rglob("*.py")
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert hits == []


GROUND_FLOORS = ("calibration.models",)  # packages that import nothing else of their top-level folder


def test_a_ground_floor_imports_nothing_else_of_its_folder():
    """calibration/models/ (real models and drafters) is what live/, vllm_steps/ and the calibration commands build
    on; it imports none of them (docs/architecture.md)."""
    def within(name: str, package: str) -> bool:
        return name == package or name.startswith(package + ".")

    graph = _graph(_modules())
    up = sorted((m, t) for floor in GROUND_FLOORS for m, ts in graph.items() if within(m, floor)
                for t in ts if within(t, floor.split(".")[0]) and not within(t, floor))
    assert up == [], f"imports from a ground floor up its folder: {up[:10]}"
