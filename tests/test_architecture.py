"""The structure of the package, held by tests: the layer map of docs/architecture.md and the ratchet.

Every import of the package by itself is read (function-local ones too; `TYPE_CHECKING` blocks aside, they are
types only). An import from a room to a room of a higher layer is an arrow against the map; rooms that import
each other, however indirectly, are a cycle. tests/ratchet.toml records how many of each there are, with the
other counts that must only fall: a change that raises one fails here naming what it added; a change that lowers
one fails too, asking to record the new, lower value, so the ratchet never slips back.
"""

from __future__ import annotations

import ast
import json
import re
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
from docs_examples import skipped_examples, stub_pages

ROOT = Path(__file__).parent.parent
PACKAGE = ROOT / "agent_env"
RATCHET = Path(__file__).parent / "ratchet.toml"
# `Name = dict[str, Any]`: a name for free-form JSON. Its uses do not count as dict[str, Any], so the names are
# counted instead: a new one must say why a TypedDict or a model cannot be the shape.
ANY_DICT_ALIAS = re.compile(r"^\s*[A-Za-z_]\w*(?:: TypeAlias)? = dict\[str, Any\]", re.M)
pytestmark = pytest.mark.unit


def layer_map() -> dict[str, int]:
    """room -> its layer, from the ```layers block of docs/architecture.md."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```layers block (the layer map)"
    layers: dict[str, int] = {}
    for line in block.group(1).splitlines():
        level, *rooms = line.split()
        for room in rooms:
            assert room not in layers, f"room {room!r} is in two layers of the map"
            layers[room] = int(level)
    return layers


def room_of(module: str) -> str:
    """`agent_env.gateway.embedded` -> `gateway`; the package itself (its lazy names, its version) -> ``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def source_files() -> list[Path]:
    """The package's own code: what a bundle ships (its apps and agents) runs elsewhere and is not counted."""
    bundles = PACKAGE / "bundles"
    return sorted(p for p in PACKAGE.rglob("*.py") if p.parent == bundles or bundles not in p.parents)


@dataclass
class Import:
    path: Path
    line: int
    module: str
    local: bool  # inside a function: imported when called


@dataclass
class Facts:
    imports: list[Import] = field(default_factory=list)
    any_dicts: int = 0
    any_dict_aliases: int = 0  # names given to dict[str, Any] (each hides its uses from the count above)
    module_lines: dict[str, int] = field(default_factory=dict)
    class_lines: dict[str, int] = field(default_factory=dict)
    class_homes: dict[str, list[str]] = field(default_factory=dict)  # public module-level class name -> modules


def _is_room(name: str) -> bool:
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


def _internal_imports(path: Path, tree: ast.Module) -> list[Import]:
    skip: set[int] = set()
    local: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for n in ast.walk(node)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local |= {id(n) for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module == "agent_env":  # `from agent_env import gateway` imports that room (not __version__)
                names = [f"agent_env.{a.name}" if _is_room(a.name) else "agent_env" for a in node.names]
        else:
            continue
        found += [
            Import(path, node.lineno, name, id(node) in local)
            for name in names
            if name == "agent_env" or name.startswith("agent_env.")
        ]
    return found


@cache
def facts() -> Facts:
    out = Facts()
    for path in source_files():
        text = path.read_text()
        tree = ast.parse(text, str(path))
        rel = str(path.relative_to(ROOT))
        out.imports += _internal_imports(path, tree)
        out.any_dicts += text.count("dict[str, Any]")
        out.any_dict_aliases += len(ANY_DICT_ALIAS.findall(text))
        out.module_lines[rel] = len(text.splitlines())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                out.class_lines[f"{rel}:{node.name}"] = (node.end_lineno or node.lineno) - node.lineno + 1
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                out.class_homes.setdefault(node.name, []).append(rel)
    return out


def own_room(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def arrows_against_the_map(imports: list[Import]) -> list[str]:
    layers = layer_map()
    wrong = []
    for imp in imports:
        source, target = own_room(imp.path), room_of(imp.module)
        if target and target != source and layers[target] > layers[source]:
            wrong.append(
                f"{imp.path.relative_to(ROOT)}:{imp.line} ({source}, layer {layers[source]}) imports "
                f"{imp.module} ({target}, layer {layers[target]})"
            )
    return wrong


def rooms_in_cycles(imports: list[Import]) -> list[list[str]]:
    """The strongly connected groups of rooms (Tarjan's algorithm, iteratively), those of more than one room."""
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in imports:
        source, target = own_room(imp.path), room_of(imp.module)
        if target and target != source:
            edges[source].add(target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(set(edges) | {t for ts in edges.values() for t in ts}):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def measured() -> dict[str, int]:
    f = facts()
    return {
        "arrows_against_the_map": len(arrows_against_the_map(f.imports)),
        "rooms_in_cycles": sum(len(group) for group in rooms_in_cycles(f.imports)),
        "imports_of_cli_outside_cli": sum(
            1
            for i in f.imports
            if room_of(i.module) in ("cli", "__main__") and own_room(i.path) not in ("cli", "__main__")
        ),
        "function_local_imports_outside_cli": sum(1 for i in f.imports if i.local and own_room(i.path) != "cli"),
        "dict_str_any": f.any_dicts,
        "dict_str_any_aliases": f.any_dict_aliases,
        "largest_module_lines": max(f.module_lines.values()),
        "largest_class_lines": max(f.class_lines.values()),
        "class_names_shared": len(shared_class_names(f)),
        "framework_fields_refused": len(framework_fields_refused()),
        "docs_stub_pages": stub_pages(),
        "docs_examples_skipped": skipped_examples(),
    }


def framework_fields_refused() -> list[str]:
    """The framework's step fields (tests/fixtures/framework_step_fields.json) a step type of ours refuses (issue 32:
    the vocabulary is the framework's, with its fields): each one built lowers the count."""
    from agent_env.step_types import catalog

    table = json.loads((Path(__file__).parent / "fixtures" / "framework_step_fields.json").read_text())
    return [
        f"{step}.{field}"
        for step, fields in sorted(table["steps"].items())
        for field in fields
        if field in getattr(catalog.get(step).config, "refused_fields", {})
    ]


def shared_class_names(f: Facts) -> dict[str, list[str]]:
    """Public classes of the same name in two modules: one name, two meanings (a reader must check which)."""
    return {name: homes for name, homes in f.class_homes.items() if len(homes) > 1}


def test_every_room_of_the_package_is_on_the_map():
    rooms = {own_room(p) for p in source_files()} - {"__init__"}
    missing = sorted(rooms - set(layer_map()))
    assert not missing, f"rooms not on the layer map of docs/architecture.md: {missing}: give each a layer"
    gone = sorted(set(layer_map()) - rooms)
    assert not gone, f"the layer map names rooms that do not exist: {gone}"


# Held in tests/ratchet.toml but measured by the CI's test run, not here: scripts/coverage-by-room fails below it.
MEASURED_BY_CI = {"coverage_percent_floor"}


def test_the_ratchet_only_falls():
    recorded = tomllib.loads(RATCHET.read_text())
    assert MEASURED_BY_CI <= set(recorded), f"tests/ratchet.toml should hold {sorted(MEASURED_BY_CI)} (the CI's floors)"
    recorded = {name: value for name, value in recorded.items() if name not in MEASURED_BY_CI}
    now = measured()
    assert set(recorded) == set(now), f"tests/ratchet.toml should hold exactly {sorted(set(now) | MEASURED_BY_CI)}"
    risen = {name: (recorded[name], value) for name, value in now.items() if value > recorded[name]}
    fallen = {name: (recorded[name], value) for name, value in now.items() if value < recorded[name]}
    detail = []
    if "arrows_against_the_map" in risen:
        detail += ["arrows against the layer map:", *arrows_against_the_map(facts().imports)]
    if "rooms_in_cycles" in risen:
        detail += [f"rooms that import each other: {group}" for group in rooms_in_cycles(facts().imports)]
    if "class_names_shared" in risen:
        detail += [f"class {name} in {homes}" for name, homes in shared_class_names(facts()).items()]
    if "largest_module_lines" in risen or "largest_class_lines" in risen:
        f = facts()
        detail += [
            f"largest module: {max(f.module_lines, key=f.module_lines.__getitem__)}",
            f"largest class: {max(f.class_lines, key=f.class_lines.__getitem__)}",
        ]
    assert not risen, (
        "counts that must only fall have risen (recorded -> now): "
        + ", ".join(f"{k} {a} -> {b}" for k, (a, b) in risen.items())
        + "\n  "
        + "\n  ".join(detail)
    )
    assert not fallen, "well done: lower these in tests/ratchet.toml so they stay down: " + ", ".join(
        f"{k} = {b} (was {a})" for k, (a, b) in fallen.items()
    )


def test_the_map_check_sees_an_arrow_and_a_cycle():
    """The checks themselves: an import against the map and a cycle between two rooms are found."""
    added = [
        Import(PACKAGE / "errors.py", 1, "agent_env.cli.commands", False),
        Import(PACKAGE / "tls.py", 1, "agent_env.waiting", True),
        Import(PACKAGE / "waiting.py", 1, "agent_env.tls", False),
    ]
    imports = facts().imports + added
    assert any(
        "errors.py:1 (errors, layer 0) imports agent_env.cli.commands" in a for a in arrows_against_the_map(imports)
    )
    assert ["tls", "waiting"] in rooms_in_cycles(imports)
    assert ["tls", "waiting"] not in rooms_in_cycles(facts().imports)


# The reference protocol's subpackages that only its extras can import (`agent`: regex, a2a-sdk<0.4, mcp<2; and
# `computer`): pins that conflict with ours, so a fresh install of ours lacks them. Read them, model their shapes.
EXTRA_ONLY = ("agentenv_protocol.a2a_agent", "agentenv_protocol.computer")


def extra_only_imports(tree: ast.Module) -> list[str]:
    """Every import of an extra-only subpackage in `tree`, wherever it stands (in a function too)."""
    found = []
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        if any(n == p or n.startswith(p + ".") for n in names for p in EXTRA_ONLY):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_imports_the_reference_protocols_extra_only_subpackages():
    offending = [
        f"{path.relative_to(ROOT)} {hit}"
        for path in source_files()
        for hit in extra_only_imports(ast.parse(path.read_text(), str(path)))
    ]
    assert not offending, (
        "agent_env imports a subpackage of agentenv_protocol that needs the reference's extras (absent from a "
        "fresh install of ours): " + "; ".join(offending) + " — model the shapes in our own code (see "
        "agent_env/agents/transfer_wire.py) and import only the base package (transfers, types, client, ...)"
    )


def test_the_extra_only_check_sees_a_function_local_import():
    tree = ast.parse(
        "from agentenv_protocol import a2a_agent\n"
        "def f():\n    from agentenv_protocol.a2a_agent.extensions import SNAPSHOT_V1\n"
        "def g():\n    import agentenv_protocol.computer\n"
        "from agentenv_protocol.transfers import ReadObject\n"
    )
    assert [hit.split(":")[0] for hit in extra_only_imports(tree)] == ["line 1", "line 3", "line 5"]
