"""The smol_vm exec channel without a VM: the guest's agent (smol_vm_guest, stdlib only) served here over real
HTTP on 127.0.0.1, driven by the provider's own sandbox client, and by an outsider without the token. What a
real microVM adds (boot, forwards, network, teardown) is in test_smol_vm.py, which needs KVM."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import ThreadingHTTPServer

import httpx
import pytest

from agent_env.providers import SandboxInfo, SandboxSpec, smol_vm
from agent_env.providers.base import Network, SandboxFailed
from agent_env.providers.smol_vm_guest import Handler


@pytest.fixture
def agent(tmp_path, monkeypatch):
    """The guest agent on a free port of the host's loopback, as a VM's forward would show it."""
    monkeypatch.setattr(Handler, "token", "tok-123")
    monkeypatch.setattr(Handler, "env", {"PATH": "/usr/bin:/bin", "GREETING": "hi"})
    monkeypatch.setattr(Handler, "home", str(tmp_path))
    monkeypatch.setattr(Handler, "app_log", str(tmp_path / "app.log"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def box(agent: str, tmp_path, token: str = "tok-123") -> smol_vm.SmolVMSandbox:
    info = SandboxInfo(provider="smol_vm", id="box", name="box", run_id="run-1")
    return smol_vm.SmolVMSandbox(info, tmp_path, agent, token)


async def test_exec_files_and_logs_through_the_agent(agent, tmp_path):
    sb = box(agent, tmp_path)
    failed = await sb.exec(["sh", "-c", "echo $GREETING; echo oops >&2; pwd; exit 3"])
    assert (failed.exit_code, failed.stdout, failed.stderr) == (3, f"hi\n{tmp_path}\n", "oops\n")
    assert (await sb.exec(["echo", "a b"])).stdout == "a b\n"
    missing = await sb.exec(["no-such-program-here"])
    assert missing.exit_code == 127 and "no-such-program-here" in missing.stderr

    target = tmp_path / "deep" / "data.bin"
    await sb.put_file(str(target), b"\x00\xffbytes")
    assert target.read_bytes() == b"\x00\xffbytes" and await sb.get_file(str(target)) == b"\x00\xffbytes"
    with pytest.raises(FileNotFoundError):
        await sb.get_file(str(tmp_path / "missing"))
    with pytest.raises(SandboxFailed, match="could not write"):
        await sb.put_file(str(target / "under-a-file"), b"x")

    assert await sb.logs() == ""  # the command printed nothing yet
    (tmp_path / "app.log").write_text("".join(f"line {i}\n" for i in range(30)))
    assert (await sb.logs(lines=2)) == "line 28\nline 29\n"


async def test_exec_timeout_raises_and_the_agent_still_serves(agent, tmp_path):
    sb = box(agent, tmp_path)
    with pytest.raises(TimeoutError, match="sleep did not finish within 1s in sandbox box"):
        await sb.exec(["sleep", "5"], timeout=1)
    assert (await sb.exec(["true"])).exit_code == 0


async def test_an_outsider_without_the_token_gets_nothing(agent, tmp_path):
    async with httpx.AsyncClient(base_url=agent) as http:
        assert (await http.get("/ready")).status_code == 401
        wrong = {"Authorization": "Bearer tok-12"}  # a prefix of the token is not the token
        assert (
            await http.post("/exec", json={"command": ["touch", str(tmp_path / "pwned")]}, headers=wrong)
        ).status_code == 401
        assert (await http.put("/file", params={"path": str(tmp_path / "pwned2")}, content=b"x")).status_code == 401
        assert (await http.get("/file", params={"path": "/etc/hostname"}, headers=wrong)).status_code == 401
        assert (await http.get("/logs")).status_code == 401
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    with pytest.raises(httpx.HTTPStatusError):
        await box(agent, tmp_path, token="wrong").exec(["true"])


async def test_a_gone_agent_is_a_clear_error(tmp_path):
    (tmp_path / "console.log").write_text("[    1.0] Kernel panic - not syncing: secret-value\n")
    sb = box("http://127.0.0.1:9", tmp_path)  # the discard port: nothing answers there
    sb.secrets = ("secret-value",)
    with pytest.raises(SandboxFailed) as e:
        await sb.exec(["true"])
    assert "did not answer" in e.value.problem and "Kernel panic" in e.value.problem
    assert "secret-value" not in e.value.problem  # the console is redacted


def test_the_qemu_command_keeps_secrets_off_it_and_maps_the_spec(tmp_path):
    spec = SandboxSpec(
        name="web", run_id="r", command=["python3", "app.py"], port=8080, cpus=1.5, memory_mb=300,
        env={"API_KEY": "sk-secret"}, network={"mode": "none"},
    )  # fmt: skip
    argv = smol_vm.qemu_command(tmp_path, tmp_path / "guest", spec, 4000, 5000, accel="kvm", kernel=tmp_path / "k")
    joined = " ".join(argv)
    assert "sk-secret" not in joined and "python3" not in joined  # both reach the guest through fw_cfg files
    assert argv[argv.index("-smp") + 1] == "2" and argv[argv.index("-m") + 1] == "300"
    assert "restrict=on" in joined  # network none: slirp lets the guest reach nothing
    assert (
        "hostfwd=tcp:127.0.0.1:4000-10.0.2.15:7000" in joined and "hostfwd=tcp:127.0.0.1:5000-10.0.2.15:8080" in joined
    )
    assert "snapshot=on" in joined  # the shared guest disk is never written
    emulated = smol_vm.qemu_command(
        tmp_path, tmp_path, spec.model_copy(update={"network": Network()}), 1, None, accel="tcg", kernel=tmp_path
    )
    assert "restrict=off" in " ".join(emulated) and "tsc_early_khz=" in " ".join(emulated)


def test_a_vm_whose_record_was_never_written_is_still_stopped_and_a_stranger_is_not(tmp_path):
    """A create cancelled between QEMU's start and its record leaves only the pidfile: a new create of that name
    (or a remove) still stops that process, and never one whose command line does not name the folder."""
    folder = tmp_path / "box"
    folder.mkdir()
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    ours = subprocess.Popen([*sleeper, str(folder)])
    stranger = subprocess.Popen(sleeper)
    try:
        (folder / "qemu.pid").write_text(str(ours.pid))
        assert smol_vm._stop_folder(folder) is True
        assert ours.wait(timeout=10) is not None and not folder.exists()
        folder.mkdir()
        (folder / "qemu.pid").write_text(str(stranger.pid))
        smol_vm._stop_folder(folder)
        assert stranger.poll() is None and not folder.exists()
    finally:
        for proc in (ours, stranger):
            proc.kill()
            proc.wait()
