"""The modal and e2b providers, against in-process fakes of their SDKs (tests/fakes/modal, tests/fakes/e2b).

The fakes run sandbox commands as local subprocesses, so a sandbox serving HTTP is really fetched here.
The same tests against the real services are in tests_live/.
"""

from __future__ import annotations

import asyncio
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
SDKS = ("modal", "e2b")
IMAGE = {"modal": "python:3.12-slim", "e2b": None}  # e2b: the configured template


def _drop_sdk_modules() -> None:
    for name in [n for n in sys.modules if n.split(".")[0] in SDKS]:
        del sys.modules[name]


@pytest.fixture
def sdks(monkeypatch, tmp_path):
    """The fake SDKs, imported as `modal` and `e2b`, with credentials in the environment."""
    _drop_sdk_modules()
    monkeypatch.syspath_prepend(str(FAKES))
    monkeypatch.setenv("MODAL_TOKEN_ID", "ak-test")
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-test")
    monkeypatch.setenv("E2B_API_KEY", "e2b_test")
    import e2b
    import modal

    yield SimpleNamespace(modal=modal, e2b=e2b)
    modal.reset()
    e2b.reset()
    _drop_sdk_modules()  # later tests must not find the fakes


@pytest.fixture
def settings(tmp_path):
    return Settings(state_dir=tmp_path)


@pytest.fixture(params=SDKS)
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
    code = (
        "import sys, agent_env.providers.modal, agent_env.providers.e2b; "
        "assert not {'modal', 'e2b'} & set(sys.modules), 'SDK imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("provider", SDKS)
async def test_check_refuses_without_the_sdk(provider, settings, monkeypatch):
    monkeypatch.setitem(sys.modules, provider, None)  # `import <sdk>` now fails
    with pytest.raises(ProviderUnavailable) as e:
        await by_name.load(provider, settings).check()
    assert e.value.fix == f"pip install 'agentenv-framework[{provider}]'"


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
