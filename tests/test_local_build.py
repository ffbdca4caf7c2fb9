"""The local provider's reading of a build context's Dockerfile (providers/local_build.py): its pip installs into a
virtualenv made once per content, ENV, CMD after ENTRYPOINT; what it passes over is listed, never run."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from agent_env.providers.base import SandboxFailed
from agent_env.providers.local_build import read_dockerfile, virtualenv


def context(tmp_path: Path, dockerfile: str, **files: str) -> Path:
    folder = tmp_path / "ctx"
    folder.mkdir(exist_ok=True)
    (folder / "Dockerfile").write_text(textwrap.dedent(dockerfile))
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_it_reads_what_a_process_can_take_and_lists_the_rest(tmp_path):
    build = read_dockerfile(
        context(
            tmp_path,
            """\
            # a comment
            FROM python:3.11-slim
            WORKDIR /app
            COPY requirements.txt .
            RUN pip install --no-cache-dir \\
                -r requirements.txt
            RUN python3 -m pip install tiny==1.0
            RUN apt-get update && apt-get install -y curl
            RUN pip install x && rm -rf /root/.cache
            ENV A=1 B="two words"
            ENV OLD style value
            USER appuser
            ENTRYPOINT ["python"]
            CMD ["server.py", "--port", "8000"]
            """,
        )
    )
    assert build.installs == [["--no-cache-dir", "-r", "requirements.txt"], ["tiny==1.0"]]
    assert build.env == {"A": "1", "B": "two words", "OLD": "style value"}
    assert build.command == ["python", "server.py", "--port", "8000"]
    assert build.passed_over == [
        "RUN apt-get update && apt-get install -y curl",
        "RUN pip install x && rm -rf /root/.cache",  # a pip line that does more is not run in part
        "USER appuser",
    ]


def test_shell_form_and_no_dockerfile(tmp_path):
    assert read_dockerfile(context(tmp_path, "CMD python server.py\n")).command == ["sh", "-c", "python server.py"]
    assert read_dockerfile(tmp_path / "nothing-here").command is None


def test_a_failing_install_names_the_line_and_the_fix(tmp_path):
    folder = context(tmp_path, "RUN pip install --no-index no-such-package-of-agentenv\n")
    with pytest.raises(SandboxFailed) as e:
        virtualenv(tmp_path / "venvs", folder, read_dockerfile(folder).installs)
    assert "`pip install --no-index no-such-package-of-agentenv` failed for the local provider" in e.value.problem
    assert "sandbox_type docker" in e.value.fix
    assert [p.name for p in (tmp_path / "venvs").iterdir()] == [], "no half-made virtualenv is left"


def test_a_virtualenv_is_made_once_per_content(tmp_path):
    folder = context(tmp_path, "RUN pip install --no-index -r requirements.txt\n", **{"requirements.txt": ""})
    installs = read_dockerfile(folder).installs
    python = virtualenv(tmp_path / "venvs", folder, installs)
    assert python.exists() and python.parent.parent.parent == tmp_path / "venvs"
    assert virtualenv(tmp_path / "venvs", folder, installs) == python, "the same content: the same virtualenv"
    (folder / "requirements.txt").write_text("# changed\n")
    assert virtualenv(tmp_path / "venvs", folder, installs) != python, "a requirement file changed: another"
