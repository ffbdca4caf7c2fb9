"""`smol_vm`: a sandbox is a microVM on this machine's KVM, run by QEMU's `microvm` machine type.

Why QEMU microvm (not Firecracker, nor the `smolvm` package on PyPI): it installs from Debian's own registry
(`apt-get install qemu-system-x86`, as CI and any Debian/Ubuntu host can), needs no Python dependency, boots
Debian's own kernel in well under a second (no PCI, no firmware: the kernel is loaded directly), and brings
user-mode networking (slirp) that forwards host ports to the guest with no tap device, bridge or root-only
setup to leave behind. Firecracker ships no Debian or PyPI binary (only GitHub release tarballs), needs a tap
device per VM for networking, and `smolvm` wraps those same VMMs with a heavier dependency of its own.

The guest (kernel, initramfs, an ext4 Debian root with Python 3) is built once by `scripts/smol-vm-image` into
the state dir's `smol_vm/guest` (or the config's `[sandboxes.providers.smol_vm] guest = DIR`). Each VM boots
that disk copy-on-write (QEMU's snapshot mode; its overlay lives in the sandbox's folder), so a VM changes
nothing shared. The provider hands the guest its agent (`smol_vm_guest.py`) and a config (the command, its
environment, a fresh bearer token) through QEMU's fw_cfg, from files that are 0600 and deleted once the VM
answers: nothing secret is on QEMU's command line. The agent's port and the sandbox's `port` are forwarded
from free ports on the host's 127.0.0.1; exec, put_file, get_file and logs are HTTP calls to the agent.

Network: `open` (user-mode NAT), or `none` (slirp's restrict mode: the guest reaches nothing, the host still
reaches its forwarded ports). Limits: `cpus` (rounded up to whole vCPUs) and `memory_mb` are the VM's.
A sandbox's folder (`<state dir>/sandboxes/smol_vm/NAME`) records QEMU's pid and start time; stopping it kills
QEMU and deletes the folder, which leaves no process and no file (and there never was a tap device).

Settings (`[sandboxes.providers.smol_vm]`): `guest` (the folder), `kernel` (another kernel than the guest's,
e.g. one built with CONFIG_PVM_GUEST for a cloud VM whose nested KVM is PVM: Debian's kernel hangs there, and
`check` says so), `accel` ("kvm", or "tcg": QEMU's software emulation, slow, for machines without usable KVM),
`boot_timeout` (seconds).

An image workload (`image`: an image on the host's Docker daemon, or `build`: a folder with a Dockerfile, built by
the host's Docker as the docker provider builds it) boots the second guest, `<guest>-docker` (scripts/smol-vm-image
--docker: the same plus Debian's Docker engine), whose agent starts dockerd at boot. While the VM boots, the host's
Docker saves the image into the sandbox's folder; the provider then streams that tar to the agent, which loads it
and runs the container on the VM's network with the sandbox's env and command; the tar is deleted. From then on
exec, files and logs are the container's, the forwarded port is the container's, and teardown is the VM's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, cast

import httpx

from agent_env.config import default_state_dir
from agent_env.errors import BadInput, NotFound
from agent_env.ports import free_port, port_taken
from agent_env.providers.base import (
    Capabilities,
    ExecResult,
    ProviderUnavailable,
    Sandbox,
    SandboxFailed,
    SandboxInfo,
    SandboxProvider,
    SandboxSpec,
    install_id,
)
from agent_env.providers.docker import DockerProvider
from agent_env.providers.docker_images import BASE_IMAGE, BASE_IMAGE_FIX
from agent_env.providers.local import _start_time

QEMU = "qemu-system-x86_64"
GUEST_FILES = ("vmlinuz", "initrd.img", "rootfs.ext4")
GUEST_AGENT = Path(__file__).with_name("smol_vm_guest.py")
AGENT_PORT = 7000  # the agent's port inside the guest (smol_vm_guest.AGENT_PORT)
GUEST_IP = "10.0.2.15"  # QEMU user-mode networking's first guest address
BOOT_TIMEOUT = 60.0  # KVM boots in about a second; software emulation (tcg) on a loaded machine in tens
ACCELS = ("kvm", "tcg")
DEFAULT_MEMORY_MB = 512
BUILD_FIX = "build the guest once with scripts/smol-vm-image (needs root and a Debian mirror)"
DOCKER_BUILD_FIX = "build the Docker guest once with scripts/smol-vm-image --docker (needs root and a Debian mirror)"


def guest_dir(configured: object, state_dir: Path, *, docker: bool = False) -> Path:
    """Where the guest's kernel, initramfs and disk are: the config's `guest`, else this state dir's, else the
    default state dir's (one guest serves every install of this machine). The Docker guest is its sibling
    `<guest>-docker`."""
    suffix = "-docker" if docker else ""
    if configured:
        return Path(str(configured) + suffix).expanduser()
    own = state_dir / "smol_vm" / f"guest{suffix}"
    return own if (own / "rootfs.ext4").exists() else default_state_dir() / "smol_vm" / f"guest{suffix}"


def pvm_host() -> bool:
    """Whether this machine's /dev/kvm is PVM (a nested hypervisor for cloud VMs): it runs only guest kernels
    built with CONFIG_PVM_GUEST, and Debian's kernel hangs at its switch to long mode there."""
    return Path("/sys/module/kvm_pvm").exists()


def _tcg_clock() -> str:
    """Kernel arguments that give an emulated guest the host's TSC rate (what TCG's TSC runs at): microvm has
    no HPET or PM timer to calibrate against, and calibrating against its PIT fails on a busy host (boot hangs)."""
    mhz = next(
        (line.split(":")[1] for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("cpu MHz")),
        "2000",
    )
    return f" tsc_early_khz={int(float(mhz) * 1000)} tsc=reliable"


def qemu_command(
    folder: Path, guest: Path, spec: SandboxSpec, agent_port: int, host_port: int | None, *, accel: str, kernel: Path
) -> list[str]:
    forwards = f"hostfwd=tcp:127.0.0.1:{agent_port}-{GUEST_IP}:{AGENT_PORT}"
    if spec.port and host_port:
        forwards += f",hostfwd=tcp:127.0.0.1:{host_port}-{GUEST_IP}:{spec.port}"
    restrict = "on" if spec.network.mode == "none" else "off"
    return [
        QEMU,
        *("-machine", f"microvm,accel={accel}"),
        *(
            "-cpu",
            "host" if accel == "kvm" else "max",
            "-smp",
            str(math.ceil(spec.cpus or 1)),
            "-m",
            str(spec.memory_mb or DEFAULT_MEMORY_MB),
        ),
        *("-nodefaults", "-no-user-config", "-nographic", "-no-reboot"),
        *("-kernel", str(kernel), "-initrd", str(guest / "initrd.img")),
        *("-append", "console=ttyS0 quiet panic=-1 reboot=t" + ("" if accel == "kvm" else _tcg_clock())),
        *("-drive", f"id=root,file={guest / 'rootfs.ext4'},format=raw,if=none,snapshot=on"),
        *("-device", "virtio-blk-device,drive=root"),
        *("-netdev", f"user,id=net,restrict={restrict},{forwards}", "-device", "virtio-net-device,netdev=net"),
        *("-fw_cfg", f"name=opt/agentenv/agent,file={folder / 'agent.py'}"),
        *("-fw_cfg", f"name=opt/agentenv/config,file={folder / 'config.json'}"),
        *("-serial", f"file:{folder / 'console.log'}"),
        *("-pidfile", str(folder / "qemu.pid"), "-daemonize"),
    ]


def _read(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "sandbox.json").read_text())
    except (OSError, ValueError):
        return None


def _alive(meta: dict) -> bool:
    pid = meta.get("pid")
    return bool(pid) and _start_time(cast(int, pid)) == meta.get("started")


def _unrecorded(folder: Path) -> dict | None:
    """A QEMU started for this folder whose record was never written (its create was cancelled in between):
    known by its pidfile, and ours only if its command line names the folder."""
    try:
        pid = int((folder / "qemu.pid").read_text())
        ours = str(folder).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return {"pid": pid, "started": _start_time(pid)} if ours else None


def _stop_folder(folder: Path, grace: float = 3.0) -> bool:
    """Kill the sandbox's QEMU (its pid checked against its start time: a reused pid is never ours) and delete
    its folder, which holds everything the VM wrote (the disk's overlay, the console)."""
    meta = _read(folder) or _unrecorded(folder)
    existed = folder.exists()
    if meta and _alive(meta):
        with contextlib.suppress(ProcessLookupError):
            os.kill(meta["pid"], signal.SIGTERM)
        deadline = time.monotonic() + grace
        while _alive(meta) and time.monotonic() < deadline:
            time.sleep(0.02)
        if _alive(meta):
            with contextlib.suppress(ProcessLookupError):
                os.kill(meta["pid"], signal.SIGKILL)
            while _alive(meta):
                time.sleep(0.02)
    shutil.rmtree(folder, ignore_errors=True)
    return existed


def _write_record(folder: Path, meta: dict) -> None:
    record = folder / "sandbox.json"  # private: it holds the exec channel's token
    fd = os.open(record.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(meta, f)
    record.with_suffix(".tmp").replace(record)


def _host_image(docker: DockerProvider, name: str) -> Any:
    """The image on the host's Docker daemon (never pulled: as the docker provider, images are local)."""
    try:
        return docker.client.images.get(name)
    except Exception as e:
        if getattr(e, "status_code", None) != 404:  # docker.errors.ImageNotFound is the daemon's 404
            raise
        raise SandboxFailed(
            f"image {name!r} is not on the host's Docker daemon",
            BASE_IMAGE_FIX if name == BASE_IMAGE else f"build or load it first (`docker build -t {name} ...`)",
        ) from None


def _save_image(image: Any, tar: Path) -> None:
    """`docker save` the host's image into the sandbox's folder (0600, like everything in it)."""
    fd = os.open(tar, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        for chunk in image.save(named=True):
            f.write(chunk)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class SmolVMSandbox(Sandbox):
    def __init__(self, info: SandboxInfo, folder: Path, agent: str, token: str) -> None:
        super().__init__(info)
        self.folder = folder
        self._agent = agent
        self._headers = {"Authorization": f"Bearer {token}"}

    async def _call(self, method: str, route: str, *, timeout: float = 30, **kw) -> httpx.Response:
        async with httpx.AsyncClient(base_url=self._agent, headers=self._headers, timeout=timeout) as http:
            try:
                return await http.request(method, route, **kw)
            except httpx.TransportError as e:
                raise SandboxFailed(
                    f"the agent in microVM {self.info.name!r} did not answer ({type(e).__name__}): "
                    + self.redact(_tail(self.folder / "console.log", 5)),
                    "the VM stopped or is overloaded: remove the sandbox and start it again",
                ) from None

    async def exec(self, command: list[str], *, timeout: float = 60) -> ExecResult:
        r = await self._call("POST", "/exec", json={"command": command, "timeout": timeout}, timeout=timeout + 10)
        if r.status_code == 504:
            raise TimeoutError(f"{command[0]} did not finish within {timeout:g}s in sandbox {self.info.name}")
        r.raise_for_status()
        return ExecResult.model_validate(r.json())

    async def put_file(self, path: str, data: bytes) -> None:
        r = await self._call("PUT", "/file", params={"path": path}, content=data)
        if r.status_code != 204:
            raise SandboxFailed(f"could not write {path} in microVM {self.info.name!r}: {r.text}", "check the path")

    async def get_file(self, path: str) -> bytes:
        r = await self._call("GET", "/file", params={"path": path})
        if r.status_code == 404:
            raise FileNotFoundError(path)
        r.raise_for_status()
        return r.content

    async def logs(self, lines: int = 20) -> str:
        r = await self._call("GET", "/logs", params={"lines": lines})
        return r.text if r.status_code == 200 else ""

    async def stop(self) -> None:
        await asyncio.to_thread(_stop_folder, self.folder)

    async def run_image(self, tar: Path, timeout: float) -> str:
        """Stream a `docker save` tar to the guest's agent, which loads and runs it; the loaded image's id."""

        async def chunks():
            with tar.open("rb") as f:
                while chunk := await asyncio.to_thread(f.read, 1 << 20):
                    yield chunk

        headers = {"Content-Length": str(tar.stat().st_size)}
        r = await self._call("PUT", "/image", content=chunks(), headers=headers, timeout=timeout)
        if r.status_code != 200:
            raise SandboxFailed(
                f"the image workload of microVM {self.info.name!r} did not start: {self.redact(r.text)}",
                "check the image and its command (`docker run` them on the host), or the VM's memory_mb",
            )
        return str(r.json()["image_id"])


class SmolVMProvider(SandboxProvider):
    name = "smol_vm"
    capabilities = Capabilities(isolated=True, build=True, network=["open", "none"], resources=True)

    def __init__(self, settings) -> None:
        self.settings = settings
        self.state_dir = Path(settings.state_dir)
        self.root = self.state_dir / "sandboxes" / "smol_vm"
        self.install = install_id(settings)

    @property
    def guest(self) -> Path:
        return guest_dir(self.config.get("guest"), self.state_dir)

    @property
    def docker_guest(self) -> Path:
        return guest_dir(self.config.get("guest"), self.state_dir, docker=True)

    @property
    def accel(self) -> str:
        accel = str(self.config.get("accel", "kvm"))
        if accel not in ACCELS:
            raise BadInput(
                f"[sandboxes.providers.smol_vm] accel = {accel!r} is not one of {', '.join(ACCELS)}",
                'use "kvm" (hardware virtualization), or "tcg" (software emulation: slow, needs no KVM)',
            )
        return accel

    @property
    def kernel(self) -> Path:
        return self._kernel(self.guest)

    def _kernel(self, guest: Path) -> Path:
        """The configured kernel, else the guest's own (its initramfs holds that kernel's modules)."""
        configured = self.config.get("kernel")
        return Path(str(configured)).expanduser() if configured else guest / "vmlinuz"

    async def check(self) -> None:
        if self.accel == "kvm":
            self._check_kvm()
        if shutil.which(QEMU) is None:
            raise ProviderUnavailable(f"{QEMU} is not installed", "apt-get install qemu-system-x86")
        missing = [f for f in GUEST_FILES if not (self.guest / f).is_file()]
        if missing:
            raise ProviderUnavailable(f"the smol_vm guest in {self.guest} lacks {', '.join(missing)}", BUILD_FIX)
        if not self.kernel.is_file():
            raise ProviderUnavailable(f"the configured smol_vm kernel {self.kernel} is not a file", "fix `kernel`")

    def _check_kvm(self) -> None:
        if not os.access("/dev/kvm", os.R_OK | os.W_OK):
            raise ProviderUnavailable(
                "/dev/kvm is missing or not usable by this user: the smol_vm provider needs KVM",
                "run on a machine (or a VM with nested virtualization) with KVM, as root or in the kvm group; "
                'or set [sandboxes.providers.smol_vm] accel = "tcg" (software emulation, slow)',
            )
        if pvm_host() and not self.config.get("kernel"):
            raise ProviderUnavailable(
                "this machine's /dev/kvm is PVM (the kvm_pvm module): it boots only kernels built as PVM guests, "
                "and the smol_vm guest's Debian kernel is not one",
                "set [sandboxes.providers.smol_vm] kernel = a kernel built with CONFIG_PVM_GUEST, or "
                'accel = "tcg" (software emulation, slow), or run on a host with plain KVM',
            )

    def _info(self, folder: Path, meta: dict) -> SandboxInfo:
        status = "running" if _alive(meta) else "exited"
        return SandboxInfo.from_labels(
            self.name, folder.name, meta["labels"], url=meta.get("url"), status=status, image_id=meta.get("image_id")
        )

    def _sandbox(self, folder: Path, meta: dict) -> SmolVMSandbox:
        return SmolVMSandbox(self._info(folder, meta), folder, meta["agent"], meta["token"])

    async def create(self, spec: SandboxSpec) -> Sandbox:
        folder = self.root / spec.name
        meta = _read(folder)
        if meta and _alive(meta):
            if self._info(folder, meta).install != self.install:
                raise SandboxFailed(
                    f"a microVM named {spec.name!r} of another agent-env install runs in {folder}",
                    "leave it to that install, or give this install a state dir of its own",
                )
            if meta.get("image_id") or not (spec.image or spec.build):
                return self._sandbox(folder, meta)  # a retried step finds the VM it started
        if folder.exists():  # (or a VM whose image workload never started: it starts afresh)
            await asyncio.to_thread(_stop_folder, folder)
        if spec.host_port is not None and port_taken(spec.host_port):
            raise SandboxFailed(
                f"port 127.0.0.1:{spec.host_port} is already in use",
                "free that port, or leave `host_port` unset to get a free one",
            )
        if spec.image or spec.build:
            return await self._boot_image(folder, spec)
        folder.mkdir(parents=True, mode=0o700)
        return await self._boot(folder, spec, self.guest)

    async def _boot_image(self, folder: Path, spec: SandboxSpec) -> SmolVMSandbox:
        """Boot the Docker guest while the host's Docker saves the image into the folder, then run it in the VM."""
        missing = [f for f in GUEST_FILES if not (self.docker_guest / f).is_file()]
        if missing:
            raise ProviderUnavailable(
                f"the smol_vm Docker guest in {self.docker_guest} lacks {', '.join(missing)}", DOCKER_BUILD_FIX
            )
        docker = DockerProvider(self.settings)
        try:
            await docker.check()
            image = await asyncio.to_thread(_host_image, docker, await docker.image_for(spec))
            folder.mkdir(parents=True, mode=0o700)
            tar = folder / "image.tar"
            saving = asyncio.create_task(asyncio.to_thread(_save_image, image, tar))
            try:
                sandbox = await self._boot(folder, spec, self.docker_guest)
                await saving
                image_id = await sandbox.run_image(tar, float(self.config.get("boot_timeout", BOOT_TIMEOUT)) + 600)
            except BaseException:
                with contextlib.suppress(BaseException):
                    await saving  # (a thread cannot be cancelled: it finishes before its folder goes)
                await asyncio.to_thread(_stop_folder, folder)
                raise
        finally:
            docker.close()
        tar.unlink()
        meta = {**cast(dict, _read(folder)), "image_id": image_id}
        _write_record(folder, meta)
        sandbox.info.image_id = image_id
        return sandbox

    async def _boot(self, folder: Path, spec: SandboxSpec, guest: Path) -> SmolVMSandbox:
        token = secrets.token_urlsafe(32)
        agent_port = free_port()
        host_port = spec.host_port or (free_port() if spec.port else None)
        env = {**spec.env, "HOST": "0.0.0.0"} | ({"PORT": str(spec.port)} if spec.port else {})
        config = {"token": token, "env": env, "command": spec.command, "container": bool(spec.image or spec.build)}
        for name, text in (("agent.py", GUEST_AGENT.read_text()), ("config.json", json.dumps(config))):
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
        started = await asyncio.to_thread(
            subprocess.run,
            qemu_command(folder, guest, spec, agent_port, host_port, accel=self.accel, kernel=self._kernel(guest)),
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": str(folder)},  # the disk overlay's place
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        if started.returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            raise SandboxFailed(
                f"QEMU could not start microVM {spec.name!r}: {started.stderr.strip()[-800:]}",
                "free the port it names, or check the guest with scripts/smol-vm-image",
            )
        pid = int((folder / "qemu.pid").read_text())
        meta = {
            "pid": pid,
            "started": _start_time(pid),
            "labels": spec.labels(self.install),
            "url": f"http://127.0.0.1:{host_port}" if host_port else None,
            "agent": f"http://127.0.0.1:{agent_port}",
            "token": token,
        }
        _write_record(folder, meta)
        sandbox = self._sandbox(folder, meta)
        sandbox.secrets = tuple(spec.env.values())
        try:
            await self._wait_ready(sandbox, meta)
        except BaseException:
            await asyncio.to_thread(_stop_folder, folder)
            raise
        for name in ("agent.py", "config.json"):  # QEMU read them at start; the guest has them now
            (folder / name).unlink(missing_ok=True)
        return sandbox

    async def _wait_ready(self, sandbox: SmolVMSandbox, meta: dict) -> None:
        deadline = time.monotonic() + float(self.config.get("boot_timeout", BOOT_TIMEOUT))
        async with httpx.AsyncClient(base_url=meta["agent"], headers=sandbox._headers, timeout=2) as http:
            while True:
                with contextlib.suppress(httpx.TransportError):
                    if (await http.get("/ready")).status_code == 204:
                        return
                if not _alive(meta) or time.monotonic() > deadline:
                    console = sandbox.redact(_tail(sandbox.folder / "console.log"))
                    raise SandboxFailed(
                        f"microVM {sandbox.info.name!r} "
                        + ("stopped while booting" if not _alive(meta) else "did not answer in time")
                        + f"; its console's last lines:\n{console}",
                        "check the guest (rebuild it with scripts/smol-vm-image), or raise "
                        "[sandboxes.providers.smol_vm] boot_timeout on a loaded machine",
                    )
                await asyncio.sleep(0.02)

    async def list(self, run_id: str | None = None) -> list[SandboxInfo]:
        out = []
        for folder in sorted(self.root.glob("*")) if self.root.is_dir() else []:
            meta = _read(folder)
            if meta is None:
                continue
            info = self._info(folder, meta)
            if info.install == self.install and (run_id is None or info.run_id == run_id):
                out.append(info)
        return out

    def _folder(self, sandbox_id: str) -> Path:
        if "/" in sandbox_id or sandbox_id in ("", ".", ".."):
            raise BadInput(f"{sandbox_id!r} is not a smol_vm sandbox id", "use an id from `agent-env sandboxes list`")
        return self.root / sandbox_id

    async def remove(self, sandbox_id: str) -> bool:
        return await asyncio.to_thread(_stop_folder, self._folder(sandbox_id))

    async def attach(self, sandbox_id: str) -> Sandbox:
        folder = self._folder(sandbox_id)
        meta = _read(folder)
        if meta is None or self._info(folder, meta).install != self.install:
            raise NotFound(f"no smol_vm sandbox {sandbox_id!r} of this install", "it was removed: deploy it again")
        return self._sandbox(folder, meta)
