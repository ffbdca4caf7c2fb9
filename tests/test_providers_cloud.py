"""The cloud providers (modal, modal_vm, e2b, tensorlake, tenki), against in-process fakes of their SDKs
(tests/fakes/modal, e2b, tensorlake, tenki): every one passes the same conformance tests (`cloud`).

The fakes run sandbox commands as local subprocesses, so a sandbox serving HTTP is really fetched here.
The same tests against the real services are in tests_live/.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from conftest import free_port

from agent_env.config import Settings
from agent_env.errors import BadInput
from agent_env.providers import by_name
from agent_env.providers.base import Network, ProviderUnavailable, SandboxFailed, SandboxSpec

FAKES = Path(__file__).parent / "fakes"
PROVIDERS = ("modal", "modal_vm", "e2b", "tensorlake", "tenki")
SDK = {"modal": "modal", "modal_vm": "modal", "e2b": "e2b", "tensorlake": "tensorlake", "tenki": "tenki"}
EXTRA = {**SDK}  # the extra that brings each provider's SDK
IMAGE = {"modal": "python:3.12-slim", "modal_vm": "python:3.12-slim", "e2b": None, "tensorlake": None, "tenki": None}
KEYS = {"tensorlake": "tl-test-key", "tenki": "tk-test-key"}  # their default secrets, from the environment


def _drop_sdk_modules() -> None:
    for name in [n for n in sys.modules if n.split(".")[0] in {*SDK.values(), "vm_folder"}]:
        del sys.modules[name]


@pytest.fixture
def sdks(monkeypatch, tmp_path):
    """The fake SDKs, imported as `modal`, `e2b`, `tensorlake` and `tenki`, with credentials: in the environment
    for modal and e2b, in the secrets tensorlake and tenki read by default (`secret:tensorlake-api-key`, ...)."""
    _drop_sdk_modules()
    monkeypatch.syspath_prepend(str(FAKES))
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    monkeypatch.setenv("E2B_API_KEY", "e2b_test")
    monkeypatch.setenv("AGENT_ENV_SECRET_TENSORLAKE_API_KEY", KEYS["tensorlake"])
    monkeypatch.setenv("AGENT_ENV_SECRET_TENKI_API_KEY", KEYS["tenki"])
    import e2b
    import modal
    import tenki
    import tensorlake.sandbox

    fakes = SimpleNamespace(modal=modal, modal_vm=modal, e2b=e2b, tensorlake=tensorlake.sandbox, tenki=tenki)
    yield fakes
    for sdk in (modal, e2b, tensorlake.sandbox, tenki):
        sdk.reset()
    _drop_sdk_modules()  # later tests must not find the fakes


@pytest.fixture
def settings(tmp_path):
    return Settings(state_dir=tmp_path)


@pytest.fixture(params=PROVIDERS)
def cloud(request, sdks, settings):
    return by_name.load(request.param, settings)


def recorded(sdks, provider: str):
    """What the provider passed to the SDK when it created its latest sandbox."""
    return getattr(sdks, provider).sandboxes()[-1].create_kwargs


def spec(provider: str, **fields) -> SandboxSpec:
    return SandboxSpec(**{"name": "box", "run_id": "run-1", "image": IMAGE[provider], **fields})


async def fetch(url: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        for _ in range(100):  # the server in the sandbox takes a moment to listen
            try:
                return await http.get(url)
            except httpx.TransportError:
                await asyncio.sleep(0.1)
    raise AssertionError(f"{url} never answered")


def test_importing_the_providers_does_not_import_the_sdks():
    modules = ", ".join(f"agent_env.providers.{name}" for name in PROVIDERS)
    code = f"import sys, {modules}; assert not {set(SDK.values())!r} & set(sys.modules), 'SDK imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_check_refuses_without_the_sdk(provider, settings, monkeypatch):
    monkeypatch.setitem(sys.modules, SDK[provider], None)  # `import <sdk>` now fails
    with pytest.raises(ProviderUnavailable) as e:
        await by_name.load(provider, settings).check()
    assert e.value.fix == f"pip install 'agentenv-framework[{EXTRA[provider]}]'"


async def test_modal_check_needs_a_token(sdks, settings, monkeypatch, tmp_path):
    monkeypatch.delenv("MODAL_TOKEN_ID")
    monkeypatch.setenv("MODAL_CONFIG_PATH", str(tmp_path / "modal.toml"))
    provider = by_name.load("modal", settings)
    with pytest.raises(ProviderUnavailable) as e:
        await provider.check()
    assert "modal token new" in e.value.fix and "MODAL_TOKEN_ID" in e.value.fix
    (tmp_path / "modal.toml").write_text('[default]\ntoken_id = "ak-1"\ntoken_secret = "as-1"\n')
    await provider.check()  # what `modal token new` writes is enough


async def test_e2b_check_needs_an_api_key(sdks, settings, monkeypatch):
    monkeypatch.delenv("E2B_API_KEY")
    with pytest.raises(ProviderUnavailable) as e:
        await by_name.load("e2b", settings).check()
    assert "E2B_API_KEY" in e.value.fix


async def test_lifecycle(cloud):
    await cloud.check()
    port = free_port()
    server = [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"]
    web = spec(cloud.name, name="web-1", owner="env-a", command=server, port=port, env={"GREETING": "hi"}, ttl=600)
    sb = await cloud.create(web)

    failed = await sb.exec(["sh", "-c", "echo $GREETING; echo oops >&2; exit 3"])
    assert (failed.exit_code, failed.stdout, failed.stderr) == (3, "hi\n", "oops\n")
    assert (await sb.exec(["echo", "a b"])).stdout == "a b\n"  # arguments are not split again

    await sb.put_file("/work/data.bin", b"\x00\xffbytes")
    assert await sb.get_file("/work/data.bin") == b"\x00\xffbytes"
    with pytest.raises(FileNotFoundError):
        await sb.get_file("/work/missing")

    assert (await fetch(sb.url)).status_code == 200

    [info] = await cloud.list("run-1")
    assert (info.provider, info.id, info.name, info.run_id, info.owner) == (
        cloud.name,
        sb.info.id,
        "web-1",
        "run-1",
        "env-a",
    )
    assert time.time() + 590 < info.expires_at <= time.time() + 601
    assert [i.id for i in await cloud.list()] == [sb.info.id]
    assert await cloud.list("run-2") == []

    again = await cloud.create(web)  # a retried step gets the same sandbox
    assert (again.info.id, again.url, again.info.expires_at) == (sb.info.id, sb.url, sb.info.expires_at)
    assert len(await cloud.list("run-1")) == 1

    assert await cloud.remove(sb.info.id) is True
    assert await cloud.list("run-1") == []
    assert await cloud.remove(sb.info.id) is False


async def test_stop(cloud):
    sb = await cloud.create(spec(cloud.name))
    assert sb.url is None  # no port
    await sb.stop()
    assert await cloud.list("run-1") == []


async def test_exec_timeout_raises(cloud):  # as the local and docker providers do
    sb = await cloud.create(spec(cloud.name))
    with pytest.raises(TimeoutError, match="sleep did not finish within 1s"):
        await sb.exec(["sleep", "5"], timeout=1)


async def test_modal_network_resources_and_image(sdks, settings):
    modal = by_name.load("modal", settings)
    await modal.create(spec("modal", name="closed", network=Network.parse("none"), cpus=0.5, memory_mb=256))
    kwargs = recorded(sdks, "modal")
    assert (kwargs["block_network"], kwargs["outbound_cidr_allowlist"]) == (True, None)
    assert (kwargs["cpu"], kwargs["memory"], kwargs["timeout"]) == (0.5, 256, 6 * 3600)
    assert (kwargs["image"].kind, kwargs["image"].args) == ("registry", {"tag": "python:3.12-slim"})
    assert kwargs["app"].name == "agentenv"  # [sandboxes] modal_app

    await modal.create(spec("modal", name="some", network=Network.parse(["10.0.0.0/8"])))
    kwargs = recorded(sdks, "modal")
    assert (kwargs["block_network"], kwargs["outbound_cidr_allowlist"]) == (False, ["10.0.0.0/8"])

    await modal.create(spec("modal", name="open"))
    assert recorded(sdks, "modal")["outbound_cidr_allowlist"] is None
    assert "agentenv.owner" not in recorded(sdks, "modal")["tags"]  # Modal tag values must not be empty


async def test_modal_builds_a_dockerfile(sdks, settings, tmp_path):
    modal = by_name.load("modal", settings)
    (tmp_path / "app").mkdir()
    with pytest.raises(SandboxFailed, match="no Dockerfile"):
        await modal.create(spec("modal", image=None, build=str(tmp_path / "app")))
    (tmp_path / "app" / "Dockerfile").write_text("FROM python:3.12-slim\n")
    await modal.create(spec("modal", image=None, build=str(tmp_path / "app")))
    image = recorded(sdks, "modal")["image"]
    assert (image.kind, image.args) == (
        "dockerfile",
        {"path": tmp_path / "app" / "Dockerfile", "context_dir": str(tmp_path / "app")},
    )


async def test_modal_snapshots_a_filesystem_a_new_sandbox_starts_from(sdks, settings):
    modal = by_name.load("modal", settings)
    first = await modal.create(spec("modal", name="first", command=["sleep", "30"]))
    await first.put_file("/data/state.txt", b"kept")
    image = await first.snapshot()
    assert image.startswith("im-")
    second = await modal.create(spec("modal", name="second", image=image, command=["sleep", "30"]))
    assert recorded(sdks, "modal")["image"].object_id == image
    assert await second.get_file("/data/state.txt") == b"kept"
    for box in (first, second):
        await box.stop()


async def test_e2b_cannot_snapshot(sdks, settings):
    box = await by_name.load("e2b", settings).create(spec("e2b", name="nosnap"))
    with pytest.raises(BadInput, match="the e2b provider cannot snapshot"):
        await box.snapshot()
    await box.stop()


async def test_modal_shortens_long_names(sdks, settings):
    modal = by_name.load("modal", settings)
    long = spec("modal", name="x" * 100)
    sb = await modal.create(long)
    assert len(recorded(sdks, "modal")["name"]) == 64
    assert sb.info.name == "x" * 100  # the label keeps the full name
    assert (await modal.create(long)).info.id == sb.info.id


async def test_e2b_template_network_and_background_command(sdks, settings):
    e2b = by_name.load("e2b", settings)
    await e2b.create(spec("e2b", name="closed", network=Network.parse("none")))
    kwargs = recorded(sdks, "e2b")
    assert (kwargs["template"], kwargs["allow_internet_access"], kwargs["timeout"]) == ("base", False, 6 * 3600)

    sb = await e2b.create(spec("e2b", name="open", image="my-template", command=["sleep", "30"]))
    assert (recorded(sdks, "e2b")["template"], recorded(sdks, "e2b")["allow_internet_access"]) == ("my-template", True)
    [run] = sdks.e2b.sandboxes()[-1].background
    assert (run["cmd"], run["timeout"]) == ("sleep 30", 0)  # 0, or E2B kills it after 60 s
    assert sb.info.run_id == "run-1"


async def test_e2b_refuses_what_templates_fix(sdks, settings, tmp_path):
    e2b = by_name.load("e2b", settings)
    with pytest.raises(BadInput) as e:
        await e2b.create(spec("e2b", build=str(tmp_path)))
    assert "e2b template build" in str(e.value) and "image" in e.value.fix
    with pytest.raises(BadInput, match="cannot limit cpus or memory"):
        await by_name.create("e2b", spec("e2b", cpus=2), settings)
    with pytest.raises(BadInput, match="cannot enforce network 'allowlist'"):
        await by_name.create("e2b", spec("e2b", network=Network.parse(["10.0.0.0/8"])), settings)
    assert sdks.e2b.sandboxes() == []


# --- modal_vm ------------------------------------------------------------------------------------------------


async def test_modal_vm_boots_a_vm_with_docker_started_before_its_command(sdks, settings, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"  # a `dockerd` the image has: the sandbox starts it, then its command
    bin_dir.mkdir()
    marker = tmp_path / "dockerd-started"
    (bin_dir / "dockerd").write_text(f"#!/bin/sh\ntouch {marker}\nexec sleep 30\n")
    (bin_dir / "dockerd").chmod(0o755)
    (bin_dir / "docker").write_text("#!/bin/sh\nexit 1\n")  # no daemon answers yet
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    vm = by_name.load("modal_vm", settings)
    box = await vm.create(spec("modal_vm", image=None, name="vm", command=["sleep", "30"]))
    kwargs = recorded(sdks, "modal_vm")
    assert kwargs["experimental_options"] == {"vm_runtime": True}
    assert sdks.modal.sandboxes()[-1].v2  # Modal's V2 backend, the only one that starts VMs
    image = kwargs["image"]  # no image: a Docker-capable Ubuntu
    assert (image.kind, image.args["base"].args, image.args["packages"]) == (
        "apt",
        {"tag": "ubuntu:24.04"},
        ["docker.io", "ca-certificates", "curl"],
    )
    for _ in range(100):
        if marker.exists():
            break
        await asyncio.sleep(0.05)
    assert marker.exists(), "dockerd was not started"
    assert (await box.exec(["echo", "up"])).stdout == "up\n"

    assert list(sdks.modal.Sandbox.list(app_id=kwargs["app"].app_id)) == []  # V1's list misses V2 sandboxes...
    assert [i.id for i in await vm.list("run-1")] == [box.info.id]  # ...the provider finds them
    assert (await vm.create(spec("modal_vm", image=None, name="vm"))).info.id == box.info.id  # by name, too
    with pytest.raises(BadInput, match="the modal_vm provider cannot snapshot"):
        await box.snapshot()
    assert await vm.remove(box.info.id) is True


async def test_modal_vm_without_a_command_keeps_running(sdks, settings):
    box = await by_name.load("modal_vm", settings).create(spec("modal_vm", name="idle"))
    assert (await box.exec(["true"])).exit_code == 0
    assert sdks.modal.sandboxes()[-1].poll() is None  # its keep-alive runs: Modal would end it otherwise
    await box.stop()


# --- tensorlake and tenki: API keys as secret references, their settings ----------------------------------------


@pytest.mark.parametrize("provider", ["tensorlake", "tenki"])
async def test_the_api_key_is_a_secret_resolved_where_it_is_used(provider, sdks, tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_ENV_SECRET_MY_KEY", "resolved-key")
    settings = Settings(state_dir=tmp_path, sandboxes={"providers": {provider: {"api_key": "secret:my-key"}}})
    _, box = await by_name.create(provider, spec(provider, env={"TOKEN": "s3cret"}), settings)
    made = getattr(sdks, provider).sandboxes()[-1]
    assert made.api_key == "resolved-key"  # the SDK's client got it ...
    assert "resolved-key" not in repr(made.create_kwargs)  # ... and not the VM (its env is the spec's)
    assert (await box.exec(["sh", "-c", "echo $TOKEN"])).stdout == "s3cret\n"
    await box.stop()


@pytest.mark.parametrize("provider", ["tensorlake", "tenki"])
async def test_without_a_key_the_provider_is_unusable_naming_the_secret(provider, sdks, settings, monkeypatch):
    monkeypatch.delenv(f"AGENT_ENV_SECRET_{provider.upper()}_API_KEY")
    with pytest.raises(ProviderUnavailable) as e:
        await by_name.load(provider, settings).check()
    assert f"agent-env secrets set {provider}-api-key" in e.value.fix
    assert f"AGENT_ENV_SECRET_{provider.upper()}_API_KEY" in e.value.fix
    assert f"[sandboxes.providers.{provider}] api_key" in e.value.fix
    assert provider not in {p.name for p in await by_name.usable(settings)}  # `sandboxes list` skips it


@pytest.mark.parametrize("provider", ["tensorlake", "tenki"])
async def test_unknown_settings_and_builds_are_refused(provider, sdks, tmp_path):
    settings = Settings(state_dir=tmp_path, sandboxes={"providers": {provider: {"regoin": "eu"}}})
    with pytest.raises(BadInput) as e:
        await by_name.load(provider, settings).check()
    assert "regoin" in e.value.problem and "api_key" in e.value.fix
    with pytest.raises(BadInput, match="cannot build"):
        await by_name.load(provider, Settings(state_dir=tmp_path)).create(spec(provider, build=str(tmp_path)))
    assert getattr(sdks, provider).sandboxes() == []


@pytest.mark.parametrize("provider", ["tensorlake", "tenki"])
async def test_the_command_gets_the_env_and_its_output_is_the_log(provider, sdks, settings):
    box = await by_name.load(provider, settings).create(
        spec(provider, command=["sh", "-c", "echo hello $WHO; sleep 30"], env={"WHO": "world"})
    )
    for _ in range(100):
        if "hello world" in await box.logs():
            break
        await asyncio.sleep(0.05)
    assert await box.logs() == "hello world\n"
    await box.stop()
    assert await by_name.load(provider, settings).list() == []


@pytest.mark.parametrize("provider", ["tensorlake", "tenki"])
async def test_network_and_limits(provider, sdks, settings):
    cloud = by_name.load(provider, settings)
    await cloud.create(spec(provider, name="closed", network=Network.parse("none"), cpus=1.5, memory_mb=1025))
    closed = recorded(sdks, provider)
    await cloud.create(spec(provider, name="some", network=Network.parse(["10.0.0.0/8"])))
    some = recorded(sdks, provider)
    await cloud.create(spec(provider, name="open"))
    opened = recorded(sdks, provider)
    if provider == "tensorlake":
        assert (closed["allow_internet_access"], closed["cpus"], closed["memory_mb"]) == (False, 1.5, 1025)
        assert (some["allow_internet_access"], some["allow_out"]) == (True, ["10.0.0.0/8"])
        assert (opened["allow_internet_access"], opened["allow_out"], opened["timeout_secs"]) == (True, None, 6 * 3600)
    else:  # whole cores, even memory
        assert (closed["allow_outbound"], closed["cpu_cores"], closed["memory_mb"]) == (False, 2, 1026)
        assert (some["allow_outbound"], some["allow_cidrs"]) == (True, ["10.0.0.0/8"])
        assert (opened["allow_outbound"], opened["allow_cidrs"], opened["max_duration"]) == (True, None, 6 * 3600)
        assert (opened["tags"], opened["metadata"]["agentenv.run"]) == (["agentenv"], "run-1")


async def test_tenki_filters_ipv4_only_and_boots_one_image_or_snapshot(sdks, tmp_path):
    tenki = by_name.load("tenki", Settings(state_dir=tmp_path))
    with pytest.raises(BadInput, match="IPv4 only"):
        await tenki.create(spec("tenki", network=Network.parse(["2001:db8::/32"])))
    both = {"image": "ubuntu-docker", "snapshot_id": "snap-1"}
    with pytest.raises(BadInput, match="both image and snapshot_id"):
        await by_name.load("tenki", Settings(state_dir=tmp_path, sandboxes={"providers": {"tenki": both}})).check()
    configured = Settings(state_dir=tmp_path, sandboxes={"providers": {"tenki": {"snapshot_id": "snap-1"}}})
    await by_name.load("tenki", configured).create(spec("tenki", name="from-snapshot"))
    assert (recorded(sdks, "tenki")["snapshot_id"], recorded(sdks, "tenki")["image"]) == ("snap-1", None)
    await by_name.load("tenki", configured).create(spec("tenki", name="own-image", image="my/image:1"))
    assert (recorded(sdks, "tenki")["snapshot_id"], recorded(sdks, "tenki")["image"]) == (None, "my/image:1")


async def test_tensorlake_every_call_goes_to_the_configured_api(sdks, tmp_path):
    here = Settings(state_dir=tmp_path, sandboxes={"providers": {"tensorlake": {"api_url": "https://tl.internal"}}})
    box = await by_name.load("tensorlake", here).create(spec("tensorlake"))
    assert recorded(sdks, "tensorlake")["api_url"] == "https://tl.internal"
    assert await by_name.load("tensorlake", Settings(state_dir=tmp_path)).list() == []  # the public API has none
    assert [i.id for i in await by_name.load("tensorlake", here).list()] == [box.info.id]
    assert await by_name.load("tensorlake", here).remove(box.info.id) is True


async def test_tensorlake_labels_live_in_the_vm_and_its_name_says_whose_it_is(sdks, settings, tmp_path):
    tl = by_name.load("tensorlake", settings)
    box = await tl.create(spec("tensorlake", name="web", owner="env-a"))
    made = sdks.tensorlake.sandboxes()[-1]
    assert made.name.startswith("agentenv-") and "web" not in made.name  # a hash: names may be long

    # A workload that rewrites its labels cannot make its VM another install's: the name says whose it is.
    labels = json.loads((made.folder.root / "tmp/agentenv/labels.json").read_text())
    (made.folder.root / "tmp/agentenv/labels.json").write_text(json.dumps({**labels, "agentenv.install": "s-other"}))
    [info] = await tl.list()
    assert (info.install, info.name, info.owner) == (tl.install, "web", "env-a")

    # A VM whose create was cut short before it was labelled goes soon after it was made (the reaper sees it).
    (made.folder.root / "tmp/agentenv/labels.json").unlink()
    [info] = await tl.list()
    assert info.run_id == "" and info.expires_at <= time.time() + 900
    other = await by_name.load("tensorlake", Settings(state_dir=tmp_path / "other")).list()
    assert other == []  # another install does not list it
    await box.stop()
