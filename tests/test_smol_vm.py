"""The smol_vm provider: real microVMs on this machine's KVM (QEMU microvm), booted from the guest that
scripts/smol-vm-image builds. The provider conformance cases (lifecycle, stop, exec timeout: as the cloud
providers pass them in test_providers_cloud.py), then what only a VM promises: its network mode, its limits,
an exec channel outsiders cannot use, secrets kept off the host's process table and disk, and a teardown
that leaves no process and no file. And an image workload: a tiny image the host's Docker builds, run by the
Docker daemon inside the VM (it needs a Docker daemon on the host too: the Docker tier).

Skipped, naming why, without a usable /dev/kvm, QEMU or the built guest; AGENT_ENV_REQUIRE_SMOL_VM=1 (CI) fails
instead. AGENT_ENV_SMOL_VM_ACCEL=tcg runs them in QEMU's software emulation where KVM cannot boot the guest (slow).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from conftest import free_port

from agent_env.config import SandboxSettings, Settings
from agent_env.errors import BadInput
from agent_env.providers import by_name, smol_vm
from agent_env.providers.base import Network, ProviderUnavailable, SandboxFailed, SandboxSpec
from agent_env.providers.docker_images import build_tag, context_tar
from agent_env.providers.smol_vm import SmolVMProvider


@pytest.fixture
def settings(tmp_path) -> Settings:
    """A fresh state dir, and the guest scripts/smol-vm-image built in the user's own state dir (the conftest
    points AGENT_ENV_HOME at a temporary one) or at AGENT_ENV_SMOL_VM_GUEST. AGENT_ENV_SMOL_VM_ACCEL=tcg runs
    the VMs in software emulation (where KVM cannot boot the guest)."""
    users = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "agentenv"
    own: dict[str, str] = {"guest": os.environ.get("AGENT_ENV_SMOL_VM_GUEST") or str(users / "smol_vm" / "guest")}
    if accel := os.environ.get("AGENT_ENV_SMOL_VM_ACCEL"):
        own.update(accel=accel, boot_timeout="600")  # emulation boots in tens of seconds, more on a busy machine
    return Settings(state_dir=tmp_path / "home", sandboxes=SandboxSettings(providers={"smol_vm": own}))


@pytest.fixture
async def vm(settings):
    provider = by_name.load("smol_vm", settings)
    try:
        await provider.check()
    except ProviderUnavailable as e:
        if os.environ.get("AGENT_ENV_REQUIRE_SMOL_VM"):
            raise
        pytest.skip(f"smol_vm unusable here: {e.problem} ({e.fix})")
    yield provider
    for info in await provider.list():  # whatever a failed test left
        await provider.remove(info.id)


def spec(**fields) -> SandboxSpec:
    return SandboxSpec(**{"name": "box", "run_id": "run-1", **fields})


async def fetch(url: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        for _ in range(200):  # the server in the VM takes a moment to listen
            try:
                return await http.get(url)
            except httpx.TransportError:
                await asyncio.sleep(0.1)
    raise AssertionError(f"{url} never answered")


def running(pid: int) -> bool:
    """The process exists and is not a zombie (a daemonized QEMU's parent is init, which reaps it in its time)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def qemu_pids_for(folder: Path) -> list[int]:
    """QEMU processes whose command line names the sandbox's folder."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(folder).encode() in (proc / "cmdline").read_bytes():
                    out.append(int(proc.name))
            except OSError:
                continue
    return out


# -- conformance (as tests/test_providers_cloud.py holds the cloud providers to) --


async def test_lifecycle(vm):
    web = spec(
        name="web-1",
        owner="env-a",
        command=["python3", "-m", "http.server", "8080"],
        port=8080,
        env={"GREETING": "hi"},
        ttl=600,
    )
    before = time.time()
    sb = await vm.create(web)

    failed = await sb.exec(["sh", "-c", "echo $GREETING; echo oops >&2; exit 3"])
    assert (failed.exit_code, failed.stdout, failed.stderr) == (3, "hi\n", "oops\n")
    assert (await sb.exec(["echo", "a b"])).stdout == "a b\n"  # arguments are not split again

    await sb.put_file("/work/data.bin", b"\x00\xffbytes")
    assert await sb.get_file("/work/data.bin") == b"\x00\xffbytes"
    assert (await sb.exec(["cat", "/work/data.bin"])).stdout.endswith("bytes")  # the file is in the VM
    with pytest.raises(FileNotFoundError):
        await sb.get_file("/work/missing")

    assert (await fetch(sb.url)).status_code == 200
    assert sb.url.startswith("http://127.0.0.1:")

    [info] = await vm.list("run-1")
    assert (info.provider, info.id, info.name, info.run_id, info.owner, info.status) == (
        "smol_vm",
        sb.info.id,
        "web-1",
        "run-1",
        "env-a",
        "running",
    )
    assert before + 600 <= info.expires_at <= time.time() + 600  # ttl from its creation (a boot takes a while)
    assert [i.id for i in await vm.list()] == [sb.info.id]
    assert await vm.list("run-2") == []

    again = await vm.create(web)  # a retried step gets the same sandbox
    assert (again.info.id, again.url, again.info.expires_at) == (sb.info.id, sb.url, sb.info.expires_at)
    assert len(await vm.list("run-1")) == 1
    attached = await vm.attach(sb.info.id)
    assert (await attached.exec(["cat", "/work/data.bin"])).stdout.endswith("bytes")

    assert await vm.remove(sb.info.id) is True
    assert await vm.list("run-1") == []
    assert await vm.remove(sb.info.id) is False


async def test_stop(vm):
    sb = await vm.create(spec())
    assert sb.url is None  # no port
    await sb.stop()
    assert await vm.list("run-1") == []


async def test_exec_timeout_raises(vm):  # as the local, docker and cloud providers do
    sb = await vm.create(spec())
    with pytest.raises(TimeoutError, match="sleep did not finish within 1s"):
        await sb.exec(["sleep", "5"], timeout=1)
    assert (await sb.exec(["true"])).exit_code == 0  # the agent still serves
    await sb.stop()


# -- what a microVM adds --


async def test_teardown_leaves_no_process_and_no_file(vm):
    sb = await vm.create(spec(name="gone", command=["sleep", "600"]))
    folder = vm.root / "gone"
    [pid] = qemu_pids_for(folder)
    assert (await sb.exec(["sh", "-c", "dd if=/dev/zero of=/big bs=1M count=8 2>/dev/null; echo ok"])).stdout == "ok\n"
    assert running(pid)
    await sb.stop()
    assert not running(pid) and qemu_pids_for(folder) == []
    assert not folder.exists()  # the disk's overlay (what /big was written to) was in it
    assert list(vm.root.iterdir()) == []


async def test_the_vm_is_isolated_from_the_host(vm, tmp_path):
    secret_file = tmp_path / "host-only.txt"
    secret_file.write_text("host")
    sb = await vm.create(spec(name="iso"))
    seen = await sb.exec(["cat", str(secret_file)])
    assert seen.exit_code != 0 and "No such file" in seen.stderr and seen.stdout == ""
    own = await sb.exec(["sh", "-c", "hostname; cat /proc/1/cmdline"])
    assert own.stdout.startswith("agentenv\n") and "agentenv-init" in own.stdout  # the guest's own name and init
    await sb.stop()


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"hello from the host")

    def log_message(self, *args):
        pass


async def test_network_none_reaches_nothing_while_its_port_still_serves(vm):
    host = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)  # QEMU's user network shows the host's loopback as 10.0.2.2
    threading.Thread(target=host.serve_forever, daemon=True).start()
    probe = [
        "python3",
        "-c",
        f"import urllib.request; print(urllib.request.urlopen('http://10.0.2.2:{host.server_port}', timeout=5).read())",
    ]
    try:
        open_box = await vm.create(spec(name="open"))
        reached = await open_box.exec(probe)
        assert reached.exit_code == 0 and "hello from the host" in reached.stdout

        serve = ["python3", "-m", "http.server", "9000"]
        closed = await vm.create(spec(name="closed", network=Network.parse("none"), command=serve, port=9000))
        blocked = await closed.exec(probe)
        assert blocked.exit_code != 0 and "hello" not in blocked.stdout
        assert (await fetch(closed.url)).status_code == 200  # the host still reaches its forwarded port
    finally:
        host.shutdown()


async def test_cpus_and_memory_are_the_vms(vm):
    sb = await vm.create(spec(name="sized", cpus=1.5, memory_mb=384))
    got = await sb.exec(["sh", "-c", "nproc; awk '/MemTotal/ {print $2}' /proc/meminfo"])
    cpus, mem_kb = got.stdout.split()
    assert int(cpus) == 2  # rounded up to whole vCPUs
    assert 256 * 1024 < int(mem_kb) <= 384 * 1024
    await sb.stop()


async def test_an_outsider_on_the_host_cannot_use_the_exec_channel(vm):
    sb = await vm.create(spec(name="guarded"))
    agent = sb._agent
    async with httpx.AsyncClient(base_url=agent) as http:
        assert (await http.get("/ready")).status_code == 401
        wrong = {"Authorization": "Bearer not-the-token"}
        ran = await http.post("/exec", json={"command": ["touch", "/pwned"]}, headers=wrong)
        assert ran.status_code == 401
        assert (await http.put("/file", params={"path": "/pwned2"}, content=b"x")).status_code == 401
        assert (await http.get("/file", params={"path": "/etc/shadow"})).status_code == 401
    assert (await sb.exec(["ls", "/pwned", "/pwned2"])).exit_code != 0  # nothing ran, nothing was written
    await sb.stop()


async def test_secrets_stay_off_the_host_command_line_and_disk(vm):
    sb = await vm.create(spec(name="keys", env={"API_KEY": "sk-very-secret-42"}))
    assert (await sb.exec(["sh", "-c", "echo $API_KEY"])).stdout == "sk-very-secret-42\n"
    folder = vm.root / "keys"
    [pid] = qemu_pids_for(folder)
    assert b"sk-very-secret-42" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    for path in folder.rglob("*"):
        if path.is_file() and not path.name.startswith("vl."):  # (QEMU's disk overlay holds the guest's writes)
            assert b"sk-very-secret-42" not in path.read_bytes(), path
    assert (folder.stat().st_mode & 0o777) == 0o700
    assert (folder / "sandbox.json").stat().st_mode & 0o077 == 0  # it holds the exec channel's token
    await sb.stop()


async def test_the_command_runs_with_its_env_and_logs(vm):
    command = ["sh", "-c", "echo started $GREETING on $HOST:$PORT; sleep 600"]
    sb = await vm.create(spec(name="logged", command=command, port=8000, env={"GREETING": "hello"}))
    for _ in range(100):
        if "started" in await sb.logs():
            break
        await asyncio.sleep(0.1)
    assert "started hello on 0.0.0.0:8000" in await sb.logs()
    await sb.stop()


async def test_what_it_cannot_do_is_a_clear_error(vm, settings, tmp_path):
    with pytest.raises(BadInput, match="cannot enforce network 'allowlist'"):
        await by_name.create("smol_vm", spec(network=Network.parse(["10.0.0.0/8"])), settings)
    busy = free_port()
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", busy))
        s.listen()
        with pytest.raises(SandboxFailed, match=f"127.0.0.1:{busy} is already in use"):
            await vm.create(spec(command=["sleep", "9"], port=80, host_port=busy))
    assert await vm.list() == []


async def test_an_image_workload_without_the_docker_guest_names_the_script(settings, tmp_path):
    provider = by_name.load("smol_vm", settings)
    provider.config.update(guest=str(tmp_path / "guest"), accel="tcg")
    with pytest.raises(ProviderUnavailable, match="Docker guest in .*/guest-docker lacks vmlinuz") as e:
        await provider.create(spec(image="agentenv/base:bookworm"))
    assert "scripts/smol-vm-image --docker" in e.value.fix
    assert not (provider.root / "box").exists()


async def test_check_names_what_is_missing(settings, tmp_path):
    provider = by_name.load("smol_vm", settings)
    assert isinstance(provider, SmolVMProvider)
    provider.config.update(guest=str(tmp_path / "no-guest"), accel="tcg")  # tcg: whatever this machine's KVM
    with pytest.raises(ProviderUnavailable) as e:
        await provider.check()
    if "qemu" in e.value.problem:
        pytest.skip(f"smol_vm unusable here before the guest is checked: {e.value.problem}")
    assert "lacks vmlinuz, initrd.img, rootfs.ext4" in e.value.problem
    assert "scripts/smol-vm-image" in e.value.fix
    provider.config["accel"] = "xen"
    with pytest.raises(BadInput, match="accel = 'xen' is not one of kvm, tcg"):
        await provider.check()


async def test_a_pvm_host_is_named_with_its_fixes(settings, monkeypatch):
    """A cloud VM's nested KVM may be PVM, which boots only PVM guest kernels: Debian's hangs there."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        pytest.skip("no usable /dev/kvm: the KVM check refuses before it looks for PVM")
    monkeypatch.setattr(smol_vm, "pvm_host", lambda: True)
    provider = by_name.load("smol_vm", settings)
    provider.config["accel"] = "kvm"  # (the default; AGENT_ENV_SMOL_VM_ACCEL may have set tcg)
    with pytest.raises(ProviderUnavailable) as e:
        await provider.check()
    assert "PVM" in e.value.problem and "kernel =" in e.value.fix and 'accel = "tcg"' in e.value.fix


def test_the_image_script_is_valid_bash():
    script = Path(__file__).parent.parent / "scripts" / "smol-vm-image"
    subprocess.run(["bash", "-n", str(script)], check=True)


# -- an image workload: Docker inside the VM --


@pytest.fixture
def docker_client(vm):
    """The host's Docker daemon, which builds and saves the image (the Docker tier: CI sets
    AGENT_ENV_REQUIRE_DOCKER=1 and fails without it)."""
    import docker

    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as e:  # noqa: BLE001 - any reason means the tier cannot run
        message = f"an image workload needs a Docker daemon on the host (run scripts/docker-setup): {e}"
        if os.environ.get("AGENT_ENV_REQUIRE_DOCKER"):
            pytest.fail(message)
        pytest.skip(message)
    yield client
    client.close()


def tiny_image(folder: Path, busybox: Path) -> Path:
    """A build context for an image FROM scratch holding only a static busybox (about 1 MB: quick to copy into
    an emulated VM). Its own command exits at once: the sandbox's `command` is what serves."""
    folder.mkdir()
    (folder / "busybox").write_bytes(busybox.read_bytes())
    (folder / "busybox").chmod(0o755)
    (folder / "Dockerfile").write_text(
        'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\nCMD ["true"]\n'
    )
    return folder


async def test_an_image_workload_runs_in_docker_inside_the_vm(vm, docker_client, tmp_path):
    """One VM (emulated, each boot is costly), every promise: the host's image, the sandbox's command, env and port,
    exec and files in the container, its logs, its image id recorded, and a teardown that leaves nothing."""
    with pytest.raises(SandboxFailed, match="'agentenv/no-such:1' is not on the host's Docker daemon"):
        await vm.create(spec(name="nope", image="agentenv/no-such:1"))
    assert not (vm.root / "nope").exists()

    context = tiny_image(tmp_path / "tiny", vm.docker_guest / "busybox")
    serve = (
        'echo "started $GREETING"; mkdir /www; echo "hello $GREETING" >/www/index.html; exec httpd -f -p $PORT -h /www'
    )
    sb = await vm.create(
        spec(name="img", build=str(context), command=["sh", "-c", serve], port=8080, env={"GREETING": "hi"})
    )
    folder = vm.root / "img"
    [pid] = qemu_pids_for(folder)
    assert not (folder / "image.tar").exists()  # the image's copy went into the VM

    page = await fetch(sb.url)  # the host reaches the container's port
    assert (page.status_code, page.text) == (200, "hello hi\n")

    inside = await sb.exec(["sh", "-c", "echo $GREETING $HOST:$PORT; ls /bin/busybox /usr/bin/dockerd; exit 3"])
    assert inside.exit_code == 3  # the container's own filesystem: busybox, no dockerd (that is the VM's)
    assert inside.stdout.startswith("hi 0.0.0.0:8080\n/bin/busybox\n") and "dockerd" in inside.stderr

    await sb.put_file("/data/x.bin", b"\x00\xffbytes")
    assert (await sb.exec(["cat", "/data/x.bin"])).stdout.endswith("bytes")  # written into the container
    assert await sb.get_file("/www/index.html") == b"hello hi\n"  # what the container's command wrote
    with pytest.raises(FileNotFoundError):
        await sb.get_file("/data/missing")
    assert "started hi" in await sb.logs()
    with pytest.raises(TimeoutError, match="sleep did not finish within 2s"):
        await sb.exec(["sleep", "321"], timeout=2)
    assert "sleep 321" not in (await sb.exec(["ps"])).stdout  # killed, in the container

    host_id = docker_client.images.get(build_tag(context, context_tar(context))).id  # as the provider tagged it
    [info] = await vm.list("run-1")
    assert info.image_id == sb.info.image_id == host_id  # the very image the host built ran
    assert (await vm.create(spec(name="img", build=str(context), port=8080))).info.image_id == host_id  # a retry

    await sb.stop()
    assert not running(pid) and qemu_pids_for(folder) == []
    assert not folder.exists() and list(vm.root.iterdir()) == []
