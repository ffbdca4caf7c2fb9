"""Run a gateway in-process on a free port, and connect MCP clients to it with a role token."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

import httpx2
import uvicorn
from conftest import free_port
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agent_env.gateway.http import create_app
from agent_env.gateway.service import Gateway
from agent_env.gateway_client.single import SingleGateway

SUPPORT_DATA = (
    Path(__file__).parent.parent / "agent_env" / "bundles" / "support-desk" / "envs" / "support-desk" / "data.json"
)


@contextlib.asynccontextmanager
async def running_gateway(root: Path, **kwargs):
    gateway = Gateway(root, **kwargs)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(gateway), host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the gateway did not start"
        await asyncio.sleep(0.01)
    base = f"http://127.0.0.1:{port}"
    admin = SingleGateway(base, gateway.admin_token)
    try:
        yield gateway, base, admin
    finally:
        await admin.aclose()
        server.should_exit = True
        await task
        gateway.close()


@contextlib.asynccontextmanager
async def mcp_client(
    base: str, instance: str, token: str | None, mode: str = "auto", headers: dict | None = None, **kwargs
):
    all_headers = {**({"authorization": f"Bearer {token}"} if token else {}), **(headers or {})}
    async with httpx2.AsyncClient(headers=all_headers, timeout=30) as http:
        async with Client(
            streamable_http_client(f"{base}/envs/{instance}/mcp", http_client=http), mode=mode, **kwargs
        ) as client:
            yield client


def support_spec(instance: str = "desk-1", **extra) -> dict:
    return {
        "id": instance,
        "run_id": "run-1",
        "env": "support-desk",
        "apps": [{"app": "mail"}, {"app": "helpdesk"}, {"app": "billing"}],
        "roles": {
            "support": {"tools": ["*"], "deny": ["billing.verify_order"]},
            "billing_lead": {"tools": ["billing.*", "issue_refund", "get_time"]},
        },
        "agents": {"sam": "support", "lee": "billing_lead"},
        "now": "2026-02-16T09:30:00Z",
        **extra,
    }


def support_data(apps=("mail", "helpdesk", "billing")) -> dict:
    return {app: data for app, data in json.loads(SUPPORT_DATA.read_text()).items() if app in apps}
