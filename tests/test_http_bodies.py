"""The small FastAPI servers (the explorer, `agent-env episodes serve`, the fake model) read request bodies within
a size limit and measure their nesting before anything parses them, as outsiders find over real HTTP: an
oversized body is a 413 (declared or streamed in chunks without a length), a too-deep one a 400, and neither is
read whole or logged as a server error; none of them serves public API documents."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest
from explorer_util import serving

from agent_env.json_depth import MAX_DEPTH

JSON = {"content-type": "application/json"}
NAMED = f"deeper than {MAX_DEPTH} levels"


def deep(levels: int = 100_000) -> bytes:
    return b"[" * levels + b"]" * levels


def oversized(limit: int) -> bytes:
    """A valid JSON object just past `limit` bytes."""
    return b'{"model": "fake", "x": "' + b"a" * limit + b'"}'


def chunks(data: bytes, size: int = 256 * 1024) -> Iterator[bytes]:
    """`data` streamed without a Content-Length (chunked): the server cannot tell its size up front."""
    for at in range(0, len(data), size):
        yield data[at : at + size]


class ServerErrors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_errors() -> Iterator[list[logging.LogRecord]]:
    handler = ServerErrors()
    logger = logging.getLogger("uvicorn.error")
    logger.addHandler(handler)
    yield handler.records
    logger.removeHandler(handler)


def refused(answer: httpx.Response, status: int, named: str) -> None:
    assert answer.status_code == status, (answer.status_code, answer.text[:300])
    assert named in answer.text, answer.text[:300]


def no_documents(http: httpx.Client) -> None:
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert http.get(path).status_code in (401, 404), path


def test_the_fake_model_refuses_oversized_and_deep_bodies(server_errors):
    from agent_env.agents.fake_model import MAX_BODY_BYTES, create_app

    with serving(create_app({}, api_key="sk-fake")) as base, httpx.Client(base_url=base, timeout=120) as http:
        keyed = {**JSON, "authorization": "Bearer sk-fake"}
        big = oversized(MAX_BODY_BYTES)
        for path in ("/v1/chat/completions", "/chat/completions", "/v1/responses", "/responses", "/v1/messages"):
            refused(http.post(path, content=big, headers=keyed), 413, "KiB limit")
            refused(http.post(path, content=chunks(big), headers=keyed), 413, "KiB limit")
            refused(http.post(path, content=deep(), headers=keyed), 400, NAMED)
            refused(http.post(path, content=b"[1, 2]", headers=keyed), 400, "JSON object")
            refused(http.post(path, content=big, headers=JSON), 401, "invalid")  # the key first, the body unread
        too_big = http.post("/v1/messages", content=chunks(big), headers=keyed).json()
        assert too_big["type"] == "error" and too_big["error"]["type"] == "request_too_large", too_big
        asked = {"model": "fake-small", "messages": [{"role": "user", "content": "hi"}]}
        answer = http.post("/v1/chat/completions", json=asked, headers=keyed)
        assert answer.json()["choices"][0]["message"]["content"] == "ok", answer.text
        no_documents(http)
    assert not server_errors, [r.getMessage() for r in server_errors]


async def test_the_episodes_server_refuses_oversized_and_deep_bodies(settings, server_errors):
    """No lifespan: a body that reached an episode would fail on the missing connection (a 400 naming it)."""
    import asyncio

    import uvicorn
    from conftest import free_port

    from agent_env.episodes.http import MAX_BODY_BYTES, create_app
    from agent_env.gateway.embedded import admin_token

    port = free_port()
    app = create_app(settings, worker=False)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        auth = {**JSON, "authorization": f"Bearer {admin_token(settings)}"}
        big = oversized(MAX_BODY_BYTES)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
            for path in (
                "/episodes",
                "/episodes/groups",
                "/episodes/e1/next-turn",
                "/episodes/e1/turns/t1/end",
                "/episodes/e1/abandon",
            ):
                refused(await http.post(path, content=big, headers=auth), 413, "KiB limit")
                refused(await http.post(path, content=chunked(big), headers=auth), 413, "KiB limit")
                refused(await http.post(path, content=deep(), headers=auth), 400, NAMED)
                refused(await http.post(path, content=big, headers=JSON), 401, "admin token")
            for path in ("/docs", "/redoc", "/openapi.json"):
                assert (await http.get(path, headers=auth)).status_code == 404, path
    finally:
        server.should_exit = True
        await task
    assert not server_errors, [r.getMessage() for r in server_errors]


async def chunked(data: bytes):
    for piece in chunks(data):
        yield piece


def test_the_explorer_reads_no_body_past_its_limit(tmp_path, server_errors):
    """The explorer's API is GET only; a body sent along anyway is read within 64 KiB and measured, signed in
    or not (the page and the API alike)."""
    from agent_env.config import Settings
    from agent_env.explorer.auth import Door
    from agent_env.explorer.server import MAX_BODY_BYTES, create_app

    with serving(create_app(Settings(state_dir=tmp_path), Door())) as base:
        with httpx.Client(base_url=base, timeout=60) as http:
            big = oversized(MAX_BODY_BYTES)
            for path in ("/", "/login", "/api/runs", "/api/runs/r/calls"):
                refused(http.request("GET", path, content=big, headers=JSON), 413, "KiB limit")
                refused(http.request("GET", path, content=chunks(big, 4096), headers=JSON), 413, "KiB limit")
                refused(http.request("GET", path, content=deep(960), headers=JSON), 400, NAMED)
            assert http.get("/api/runs").status_code == 401
            assert http.get("/").status_code == 401  # the login page
            no_documents(http)
    assert not server_errors, [r.getMessage() for r in server_errors]
