"""The code base stays lint-clean (ruff) and type-clean (mypy), both configured in pyproject.toml."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_ruff():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "agentenv", "tests", "bench"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy():
    # The files to check, the pydantic plugin and the strict modules (the contracts) come from
    # [tool.mypy] in pyproject.toml. No cache: a stale one must not hide an error.
    done = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--no-incremental",
                           "--cache-dir", "/dev/null"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# `spec/` is the bottom layer: the models of everything declared, imported by the workflow. It may use
# itself and `agentenv.errors`, nothing above (checks that need step types, apps, bundles or the gateway
# belong in `agentenv.planning`). Function-local imports count: they are imports all the same.
SPEC_MAY_IMPORT = ("agentenv.spec", "agentenv.errors")


def _agentenv_imports(path: Path) -> list[tuple[int, str]]:
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                                                     if node.module == "agentenv"]
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return [(line, name) for line, name in found if name == "agentenv" or name.startswith(("agentenv.", "."))]


def test_spec_imports_nothing_above_it():
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {name}"
             for path in sorted((ROOT / "agentenv" / "spec").rglob("*.py"))
             for line, name in _agentenv_imports(path)
             if name.startswith(".") or not (name in SPEC_MAY_IMPORT or name.startswith(tuple(m + "." for m in SPEC_MAY_IMPORT)))]
    assert not wrong, ("spec/ is the bottom layer; move what needs these into agentenv.planning (or move a "
                       "plain constant down into spec):\n  " + "\n  ".join(wrong))
