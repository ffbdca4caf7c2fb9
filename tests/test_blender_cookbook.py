"""The Blender cookbook end to end, and the image check it grades with.

Docker tier: the studio (an agent-env app) runs in a container built FROM agentenv/blender:bookworm (Debian's
Blender, made by scripts/docker-base-image, built here when absent); the artist, an LLM agent played by the
fake model server, writes a scene script there and renders it with Cycles on the CPU; the run brings the
render out and checks it. Without a Docker daemon it is skipped, naming it (CI sets AGENT_ENV_REQUIRE_DOCKER=1:
it fails instead). The check itself needs no Docker: PNGs made here, right and wrong.
"""

from __future__ import annotations

import asyncio
import importlib
import struct
import subprocess
import time
import zlib
from pathlib import Path

import pytest
from test_docker import containers_of, docker_client  # noqa: F401 - the Docker tier's fixture

from agent_env.bundles import BUILTIN_ROOT
from agent_env.envs.app import ToolError
from agent_env.envs.context import Ctx
from agent_env.planning.tasks import load_task
from agent_env.spec.run import RunStatus
from agent_env.steps.builtin.image_check import CheckImageConfig, NotAnImage, grade, read_png
from agent_env.stores import open_stores
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch

ROOT = Path(__file__).parent.parent
BLENDER_IMAGE = "agentenv/blender:bookworm"


# -- PNGs made here --


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def filtered(kind: int, line: bytes, previous: bytes, bpp: int) -> bytes:
    """One scanline with PNG filter `kind` applied (the inverse of what the check undoes)."""
    out = bytearray([kind])
    for i, x in enumerate(line):
        a = line[i - bpp] if i >= bpp else 0
        b, c = previous[i], previous[i - bpp] if i >= bpp else 0
        if kind == 0:
            predicted = 0
        elif kind == 1:
            predicted = a
        elif kind == 2:
            predicted = b
        elif kind == 3:
            predicted = (a + b) >> 1
        else:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            predicted = a if pa <= pb and pa <= pc else b if pb <= pc else c
        out.append((x - predicted) & 0xFF)
    return bytes(out)


def png(width: int, height: int, pixel=lambda x, y: (x * 7 % 256, y * 11 % 256, (x + y) % 256)) -> bytes:
    """An 8-bit RGB PNG; its rows cycle through all five filter types."""
    rows, previous = [], bytes(width * 3)
    for y in range(height):
        line = bytes(v for x in range(width) for v in pixel(x, y))
        rows.append(filtered(y % 5, line, previous, 3))
        previous = line
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"".join(rows)))
        + chunk(b"IEND", b"")
    )


def scored(data: bytes, **config) -> tuple[float, dict[str, str]]:
    score = grade(data, CheckImageConfig(image="unused", **config))
    return score.value, {c.name: c.detail for c in score.criteria if not c.passed}


def test_a_picture_of_the_size_asked_for_passes():
    data = png(40, 30)
    assert read_png(data, max_pixels=10_000).width == 40
    value, failed = scored(data, width=40, height=30)
    assert (value, failed) == (1.0, {})


def test_every_filter_type_is_undone():
    data = png(9, 10)  # rows 0..9: filters 0-4, twice
    assert read_png(data, max_pixels=1000).colours == len({(x * 7, y * 11, x + y) for x in range(9) for y in range(10)})


def test_a_blank_picture_fails():
    value, failed = scored(png(32, 24, lambda x, y: (200, 200, 200)), width=32, height=24)
    assert value == 0.0
    assert failed == {"not blank": "1 distinct colours (at least 8 wanted)"}


def test_a_picture_of_another_size_fails():
    value, failed = scored(png(32, 24), width=320, height=240)
    assert value == 0.0 and failed == {"of size 320x240": "it is 32x24"}


def test_what_is_not_a_png_fails_saying_so():
    assert scored(b"GIF89a not a png", width=1) == (
        0.0,
        {"a PNG": "not a PNG (its first bytes are not the PNG signature)"},
    )
    damaged = bytearray(png(8, 8))
    damaged[40] ^= 0xFF  # inside IDAT: its CRC no longer matches
    assert "CRC does not match" in scored(bytes(damaged))[1]["a PNG"]
    assert "cut short" in scored(png(8, 8)[:-20])[1]["a PNG"]


def test_oversized_input_is_refused_before_it_is_decoded():
    data = png(64, 64)
    assert scored(data, max_bytes=100)[1] == {"a PNG": f"the file is {len(data)} bytes, more than max_bytes (100)"}
    assert "more than max_pixels (1000)" in scored(data, max_pixels=1000)[1]["a PNG"]
    # A header promising little, over data inflating to much: only what the header promises is inflated.
    bomb = png(8, 8)[:33] + chunk(b"IDAT", zlib.compress(bytes(50_000_000))) + chunk(b"IEND", b"")
    assert read_png(bomb, max_pixels=64).colours == 1
    with pytest.raises(NotAnImage, match="holds 50 bytes; its size needs 200"):
        read_png(png(8, 8)[:33] + chunk(b"IDAT", zlib.compress(bytes(50))) + chunk(b"IEND", b""), max_pixels=64)


# -- the studio's tools, in process --


@pytest.fixture
def studio(tmp_path, monkeypatch):
    """The studio app (the bundle's server module), working in a temporary folder."""
    from agent_env.envs.app_instance import AppInstance

    monkeypatch.syspath_prepend(str(BUILTIN_ROOT / "blender" / "envs" / "studio" / "server"))
    module = importlib.import_module("studio")
    monkeypatch.setattr(module, "WORK_DIR", tmp_path / "work")
    (tmp_path / "work").mkdir()
    instance = AppInstance(module.Studio, tmp_path / "state")
    yield lambda tool, **arguments: instance.call(tool, arguments, Ctx())
    instance.close()


def test_the_studio_writes_and_lists_files_only_in_its_folder(studio, tmp_path):
    assert studio("write_file", path="a/scene.py", content="print(1)")["bytes"] == 8
    assert studio("list_files") == {"files": {"a/scene.py": 8}, "truncated": False}
    (tmp_path / "work" / "out").symlink_to(tmp_path)
    for path in ("../escape.py", "/etc/passwd", "a/../../escape.py", "out/escape.py"):
        with pytest.raises(ToolError, match="work folder"):
            studio("write_file", path=path, content="x")
    assert not (tmp_path / "escape.py").exists()
    with pytest.raises(ToolError, match="outside the work folder"):
        studio("list_files", path="..")


@pytest.mark.processes
def test_the_studio_runs_commands_in_its_folder_bounded(studio, tmp_path):
    ran = studio("run", command="pwd; echo oops >&2; exit 3")
    assert ran["exit_code"] == 3 and ran["output"] == f"{tmp_path / 'work'}\noops\n" and not ran["timed_out"]
    loud = studio("run", command="head -c 100000 /dev/zero | tr '\\0' x")
    assert loud["output_bytes"] == 100_000 and len(loud["output"]) == 8 * 1024 + 1  # the tail, marked cut
    started = time.monotonic()
    slow = studio("run", command="sleep 30 & sleep 30; echo never", timeout=0.5)
    assert slow["timed_out"] and "never" not in slow["output"] and time.monotonic() - started < 10


# -- the cookbook, end to end --


@pytest.fixture(scope="module")
def blender_bundle(docker_client, tmp_path_factory) -> Path:  # noqa: F811
    """The blender bundle; the Blender base image built first when the daemon lacks it (debootstrap: about two
    minutes)."""
    if not docker_client.images.list(name=BLENDER_IMAGE):
        made = subprocess.run(
            [str(ROOT / "scripts" / "docker-base-image"), BLENDER_IMAGE, "blender"],
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert made.returncode == 0, made.stderr[-3000:]
    return BUILTIN_ROOT / "blender"  # as it ships: the studio's image gets agent-env from this install


async def test_the_blender_cookbook_renders_and_checks_a_picture(
    client,
    settings,
    worker,
    blender_bundle,
    docker_client,  # noqa: F811
):
    spec = load_task(blender_bundle / "tasks" / "blender.toml")
    state = await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, spec)), 600)
    assert state.status is RunStatus.PASSED and state.score == 1, state
    assert state.steps["brief"].outputs["tool_calls"] == 3
    (render,) = state.steps["render"].outputs["files"]
    assert render["path"] == "/work/render.png"
    picture = read_png(open_stores(settings).objects.get(render["key"]), max_pixels=320 * 240)
    assert (picture.width, picture.height) == (320, 240) and picture.colours > 100
    assert state.steps["check"].score.value == 1.0
    assert containers_of(docker_client, state.run_id) == [], "the run's end removes the studio's container"


async def test_a_render_of_the_wrong_size_scores_zero(
    client,
    settings,
    worker,
    blender_bundle,
    docker_client,  # noqa: F811
):
    spec = load_task(blender_bundle / "tasks" / "blender.toml")
    check = next(s for s in spec.steps if s.id == "check")
    check.config.update(width=640, height=480)  # the brief still asks for 320x240
    state = await asyncio.wait_for(launch.wait_result(await launch.start_run(client, settings, spec)), 600)
    assert state.status is RunStatus.FAILED and state.score == 0, state
    failed = {c.name: c.detail for c in state.steps["check"].score.criteria if not c.passed}
    assert failed == {"of size 640x480": "it is 320x240"}


def test_the_builtin_bundle_is_runnable():
    assert resolve_target("blender").id == "blender"
