"""`agent-env secrets|models|agents`, `run --model`, and the criteria in `runs show`: real subprocesses."""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import FAKE_MODEL_KEY, free_port

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")
HEAVY = ("temporalio", "mcp", "a2a", "httpx", "httpx2", "grpc")


def cli(*args, env=None, input=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([AGENT_ENV, *args], capture_output=True, text=True, env=env, input=input, timeout=timeout)


@pytest.fixture
def home_env(tmp_path):
    """A state directory and gateway port of its own, and no secrets from the session's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_ENV_SECRET_")}
    env.update(AGENT_ENV_HOME=str(tmp_path / "home"), AGENT_ENV_GATEWAY_PORT=str(free_port()))
    return env


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["secrets", "--help"],
        ["models", "--help"],
        ["agents", "--help"],
        ["run", "--help"],
        ["secrets", "list"],
        ["models", "show"],
    ],
)
def test_help_and_light_commands_import_nothing_heavy(args, home_env):
    probe = (
        "import atexit, sys\n"
        f"heavy = {HEAVY!r}\n"
        "atexit.register(lambda: print('LOADED', sorted({m.split('.')[0] for m in sys.modules} & set(heavy))))\n"
        f"sys.argv = ['agent-env', *{args!r}]\n"
        "from agent_env.cli import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=30, env=home_env)
    assert out.returncode == 0, out.stderr
    assert "LOADED []" in out.stdout


def test_secrets_round_trip(home_env):
    home = Path(home_env["AGENT_ENV_HOME"])
    assert "no secrets yet" in cli("secrets", "list", env=home_env).stdout

    done = cli("secrets", "set", "openai", "--value", "sk-from-flag-123", env=home_env)
    assert done.returncode == 0, done.stderr
    assert "secret:openai" in done.stdout and "sk-from-flag-123" not in done.stdout
    done = cli("secrets", "set", "piped.key", env=home_env, input="sk-from-stdin-456\n")
    assert done.returncode == 0, done.stderr

    path = home / "secrets.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"openai": "sk-from-flag-123", "piped.key": "sk-from-stdin-456"}

    env = {**home_env, "AGENT_ENV_SECRET_FROM_ENV": "sk-env-789", "AGENT_ENV_SECRET_OPENAI": "sk-env-openai"}
    listed = cli("secrets", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "openai" in listed.stdout and "piped.key" in listed.stdout
    assert "AGENT_ENV_SECRET_FROM_ENV" in listed.stdout and "overridden by the environment variable" in listed.stdout
    for value in ("sk-from-flag-123", "sk-from-stdin-456", "sk-env-789", "sk-env-openai"):
        assert value not in listed.stdout + listed.stderr
    as_json = json.loads(cli("secrets", "list", "--json", env=env).stdout)
    assert as_json["names"] == ["openai", "piped.key"] and as_json["environment"] == [
        "AGENT_ENV_SECRET_FROM_ENV",
        "AGENT_ENV_SECRET_OPENAI",
    ]

    bad = cli("secrets", "set", "no spaces", "--value", "x", env=home_env)
    assert bad.returncode == 2 and "secret name 'no spaces' is not valid" in bad.stderr
    empty = cli("secrets", "set", "blank", env=home_env, input="")
    assert empty.returncode == 2 and "no value given" in empty.stderr

    assert cli("secrets", "delete", "piped.key", env=home_env).returncode == 0
    assert json.loads(path.read_text()) == {"openai": "sk-from-flag-123"}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = cli("secrets", "delete", "piped.key", env=home_env)
    assert again.returncode == 2 and "no secret 'piped.key'" in again.stderr


def test_secrets_set_prompts_with_hidden_input(home_env):
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal of its own, as at an interactive shell
        os.execve(AGENT_ENV, [AGENT_ENV, "secrets", "set", "typed"], home_env)
    seen, status, answered = b"", None, False
    deadline = time.monotonic() + 30
    try:
        while status is None or select.select([fd], [], [], 0)[0]:
            assert time.monotonic() < deadline, seen
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    seen += os.read(fd, 1024)
                except OSError:  # the child closed its terminal: it is exiting
                    if status is None:
                        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
                    break
            if not answered and b"(hidden): " in seen:  # getpass writes the ": " once echo is off
                os.write(fd, b"sk-typed-secret\n")
                answered = True
            if status is None:
                done, code = os.waitpid(pid, os.WNOHANG)
                if done:  # exited: read what is left
                    status = os.waitstatus_to_exitcode(code)
    finally:
        os.close(fd)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    assert answered and status == 0, seen
    assert b"sk-typed-secret" not in seen, "the value was echoed"
    assert re.search(rb"stored secret (\x1b\[[0-9;]*m)*typed", seen), seen
    stored = json.loads((Path(home_env["AGENT_ENV_HOME"]) / "secrets.json").read_text())
    assert stored == {"typed": "sk-typed-secret"}


def test_models_show_reference_and_whether_it_is_set(home_env):
    env = {
        **home_env,
        "AGENT_ENV_MODEL_BASE_URL": "http://127.0.0.1:9/v1",
        "AGENT_ENV_MODEL": "some-model",
        "AGENT_ENV_MODEL_API_KEY": "secret:mine",
    }
    missing = cli("models", "show", env=env)
    assert missing.returncode == 0, missing.stderr
    rows = {line.split()[0]: line for line in missing.stdout.splitlines() if line.split()}
    for purpose in ("default", "agent", "persona", "judge"):
        assert "http://127.0.0.1:9/v1" in rows[purpose] and "some-model" in rows[purpose]
        assert "secret:mine" in rows[purpose] and "not set" in rows[purpose]
    assert "agent-env secrets set mine" in missing.stdout

    assert cli("secrets", "set", "mine", "--value", "sk-shown-never", env=env).returncode == 0
    judge = cli("models", "show", "judge", env=env)
    assert judge.returncode == 0, judge.stderr
    assert "secret:mine" in judge.stdout and "set" in judge.stdout and "not set" not in judge.stdout
    assert "sk-shown-never" not in judge.stdout

    from_env = cli("models", "show", "agent", env={**env, "AGENT_ENV_SECRET_MINE": "sk-env-never"})
    assert "set (from AGENT_ENV_SECRET_MINE)" in from_env.stdout and "sk-env-never" not in from_env.stdout

    bad = cli("models", "show", "nope", env=env)
    assert bad.returncode == 2 and "unknown model purpose 'nope'" in bad.stderr and "persona" in bad.stderr


def _post(url: str, body: dict, key: str | None = None) -> tuple[int, dict]:
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_models_fake_serves_scripts_until_interrupted(home_env, tmp_path):
    from agent_env.agents.fake_model import builtin_scripts

    scripts = tmp_path / "scripts.json"
    scripts.write_text(json.dumps({"cli-probe": [{"say": "hello from the probe script"}]}))
    port = free_port()
    proc = subprocess.Popen(
        [AGENT_ENV, "models", "fake", "--port", str(port), "--scripts", str(scripts), "--api-key", "k-123"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=home_env,
    )
    try:
        header, export = proc.stdout.readline(), proc.stdout.readline()
        url = f"http://127.0.0.1:{port}/v1"
        assert url in header and "cli-probe" in header
        assert f"AGENT_ENV_MODEL_BASE_URL={url} AGENT_ENV_MODEL=fake" in export
        deadline = time.monotonic() + 30
        while True:
            try:
                status, reply = _post(f"{url}/chat/completions", {"model": "cli-probe", "messages": []}, "k-123")
                break
            except OSError:  # not listening yet
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
                time.sleep(0.1)
        assert status == 200 and reply["choices"][0]["message"]["content"] == "hello from the probe script"
        assert _post(f"{url}/chat/completions", {"model": "cli-probe", "messages": []})[0] == 401
        for name in builtin_scripts():  # the built-in bundles' scripts are served as well
            assert _post(f"{url}/chat/completions", {"model": name, "messages": []}, "k-123")[0] == 200, name
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
    assert proc.returncode in (0, 130), proc.stderr.read()


def test_models_fake_says_no_key_is_needed_and_refuses_bad_input(home_env, tmp_path):
    port = free_port()
    proc = subprocess.Popen(
        [AGENT_ENV, "models", "fake", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=home_env,
    )
    try:
        proc.stdout.readline()
        assert "no API key needed" in proc.stdout.readline()
        deadline = time.monotonic() + 30
        while True:  # interrupt it serving, as a user would (not half-way through starting)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    done = cli("models", "fake", "--port", str(free_port()), "--scripts", str(bad), env=home_env)
    assert done.returncode == 2 and "expected an object of script name" in done.stderr
    done = cli("models", "fake", "--scripts", str(tmp_path / "missing.json"), env=home_env)
    assert done.returncode == 2 and "no such file" in done.stderr


@pytest.mark.parametrize(
    "args,expected",
    [
        (["--model", "bad=gpt-x"], "unknown model purpose 'bad' in --model bad=gpt-x"),
        (["--model-url", "jduge=http://127.0.0.1:1/v1"], "unknown model purpose 'jduge'"),
        (["--model-url", "judge=127.0.0.1:1"], "is not an http(s) URL"),
        (["--model", "agent="], "no value after '='"),
    ],
)
def test_run_model_overrides_refuse_bad_input(args, expected):
    done = cli("run", "hello", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert expected in done.stderr
    if "purpose" in expected:
        assert "default, agent, persona, judge" in done.stderr


def test_model_overrides_change_only_what_they_name():
    from agent_env.cli.models_cmd import apply_overrides, parse_overrides
    from agent_env.config import ModelSettings, load_settings

    settings = load_settings()
    settings.models["persona"] = ModelSettings(base_url="http://persona.example/v1", model="p-1")
    overrides = parse_overrides(["plain", "agent=a-1"], ["judge=http://judge.example/v1?x=1", "http://d.example/v1"])
    assert overrides == {
        "default": {"model": "plain", "base_url": "http://d.example/v1"},
        "agent": {"model": "a-1"},
        "judge": {"base_url": "http://judge.example/v1?x=1"},
    }
    apply_overrides(settings, overrides)
    assert (settings.model("default").base_url, settings.model("default").model) == ("http://d.example/v1", "plain")
    assert (settings.model("agent").base_url, settings.model("agent").model) == ("http://d.example/v1", "a-1")
    assert (settings.model("judge").base_url, settings.model("judge").model) == ("http://judge.example/v1?x=1", "plain")
    assert settings.model("persona").model == "p-1", "a purpose with its own section keeps it"
    moved = settings.model("agent")  # another origin: the configured key stays with its own
    assert (moved.api_key, moved.withheld_key) == (None, os.environ["AGENT_ENV_MODEL_API_KEY"])


JUDGED = """id = "judged"
[[steps]]
id = "grade"
type = "rubrics_verifier"
retries = 0
[steps.config]
reference = "hello there"
attempts = 1
criteria = [{ id = "mentions-hello", description = "The material mentions 'hello'." },
            { id = "mentions-there", description = "The material mentions 'there'." }]
"""


def test_run_model_override_and_runs_show_criteria(server, tmp_path):
    path = tmp_path / "judged.toml"
    path.write_text(JUDGED)
    done = cli("run", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "score 1.00 (2/2)" in done.stdout and "PASSED · score 1.00" in done.stdout
    assert "✓ mentions-hello" not in done.stdout, "live progress lists failed criteria only"
    run_id = done.stdout.split(" · run ")[1].split()[0]

    shown = cli("runs", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    grade = next(i for i, line in enumerate(lines) if "rubrics_verifier" in line)
    assert "score 1.00 (2/2)" in lines[grade]
    assert lines[grade + 1].strip().startswith("✓ mentions-hello: found: hello")
    assert lines[grade + 2].strip().startswith("✓ mentions-there: found: there")
    assert "PASSED · score 1.00" in lines[-1]

    # The same task with another judge model, for this run only: the fake's garbage model cannot judge.
    done = cli("run", str(path), "--model", "judge=fake-garbage", "--json")
    assert done.returncode == 1, done.stdout + done.stderr
    state = json.loads(done.stdout)
    assert state["status"] == "error" and "it is not JSON" in state["steps"]["grade"]["error"]
    # ... and a bare name is the default model, which the judge uses too (no [models.judge] here).
    done = cli("run", str(path), "--model", "fake-garbage", "--json")
    assert json.loads(done.stdout)["status"] == "error"
    assert cli("run", str(path)).returncode == 0, "the overrides were for those runs only"


async def test_agents_pending_answer_and_list(home_env):
    from agent_env.agents.client import AgentClient
    from agent_env.config import GatewaySettings, Settings
    from agent_env.gateway import tokens
    from agent_env.gateway.embedded import connect

    def run_cli(*args):
        return asyncio.to_thread(cli, *args, env=home_env)

    stopped = await run_cli("agents", "pending")
    assert stopped.returncode == 3 and "gateway is not running" in stopped.stderr
    assert "agent-env gateway start" in stopped.stderr
    started = await run_cli("gateway", "start")
    assert started.returncode == 0, started.stderr
    try:
        settings = Settings(
            state_dir=Path(home_env["AGENT_ENV_HOME"]),
            gateway=GatewaySettings(port=int(home_env["AGENT_ENV_GATEWAY_PORT"])),
        )
        assert "no turns are waiting" in (await run_cli("agents", "pending")).stdout
        import httpx

        async with (
            connect(settings, start_daemon=False) as admin,
            httpx.AsyncClient(
                headers={
                    "authorization": f"Bearer {tokens.admin_token(tokens.load_or_create_key(settings.state_dir / 'gateway' / 'key'))}"
                },
                timeout=30,
            ) as http,
        ):
            await admin.put_agent({"id": "r-1.pat", "run_id": "r-1", "record": {"name": "pat", "type": "human"}})
            listed = await run_cli("agents", "list")
            assert listed.returncode == 0 and "r-1.pat" in listed.stdout and "human" in listed.stdout

            base = f"http://127.0.0.1:{settings.gateway.port}"
            asking = asyncio.create_task(
                AgentClient(f"{base}/agents/r-1.pat/", http).ask(
                    "Approve the refund for ORD-1001?", {}, context_id="c", message_id="m-1", deadline_s=30
                )
            )
            for _ in range(300):
                if await admin.human_turns():
                    break
                await asyncio.sleep(0.05)
            pending = await run_cli("agents", "pending")
            assert pending.returncode == 0, pending.stderr
            assert "r-1.pat/m-1" in pending.stdout and "pat" in pending.stdout
            assert "Approve the refund for ORD-1001?" in pending.stdout

            wrong = await run_cli("agents", "answer", "nobody", "Yes")
            assert wrong.returncode == 2 and "no turn 'nobody' is waiting" in wrong.stderr
            answered = await run_cli("agents", "answer", "pat", "Yes, approved.")  # the agent's only turn
            assert answered.returncode == 0, answered.stderr
            assert "answered turn r-1.pat/m-1" in answered.stdout
            reply = await asyncio.wait_for(asking, 30)
            assert reply.text == "Yes, approved." and not reply.failed
            again = await run_cli("agents", "answer", "r-1.pat/m-1", "No!")
            assert again.returncode == 2 and "turn 'r-1.pat/m-1' is answered" in again.stderr
            assert "no turn is waiting now" in again.stderr
    finally:
        await run_cli("gateway", "stop")


def test_secret_values_never_leak_into_models_show_of_the_session():
    """The session's own model key (a real secret reference in conftest) is shown by reference only."""
    shown = cli("models", "show")
    assert "secret:test-model" in shown.stdout and FAKE_MODEL_KEY not in shown.stdout + shown.stderr
