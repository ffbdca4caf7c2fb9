"""The env-side extensions of protocol v1 each gateway instance serves and declares on its card (disable-tool,
enable-tool, clock, triggers, trajectory, step, state), over real HTTP against a real gateway: what each does,
who may call it, and that an instance of a run refuses control the run owns."""

from __future__ import annotations

import contextlib
import json

import httpx2
import pytest
from agentenv_protocol import client as reference_client
from agentenv_protocol import tool_access as reference_tool_access
from agentenv_protocol.types import WELL_KNOWN_PATH as CARD_PATH
from agentenv_protocol.types import EnvironmentCapabilities, EnvironmentCard, EnvironmentExtension
from explorer_util import serving
from gateway_util import mcp_client, running_gateway, support_data, support_spec
from reference_venv import reference_python, side_script  # noqa: F401 - fixtures: the side venv's scripts

from agent_env.gateway import extensions
from agent_env.gateway_client import GatewayRefused

ELSEWHERE = "127.0.0.2:9"  # a host no app of the tests is on
FREE = "free-1"  # an instance without a run: a harness of one's own controls it
RUN = "desk-1"  # an instance of run `run-1`: the run controls it


@pytest.fixture
async def desks(tmp_path):
    async with running_gateway(tmp_path / "gw", max_body_bytes=256 * 1024) as (gateway, base, admin):
        for instance, run in ((FREE, None), (RUN, "run-1")):
            await admin.put_instance(support_spec(instance, run_id=run))
            await admin.data(instance, "data/add", {"parts": [{"kind": "data", "data": support_data()}]})
        async with httpx2.AsyncClient(base_url=base, timeout=30) as http:
            yield gateway, base, admin, http


def bearer(token: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"} if token else {}


async def card_of(http, instance: str, token: str) -> dict:
    answer = await http.get(f"/envs/{instance}/.well-known/agent-env.json", headers=bearer(token))
    assert answer.status_code == 200, answer.text
    return answer.json()


async def mcp_tools(base: str, instance: str, token: str) -> set[str]:
    async with mcp_client(base, instance, token) as mcp:
        return {t.name for t in (await mcp.list_tools()).tools}


DECLARED = {
    extensions.DISABLE_TOOL: ["disable"],
    extensions.ENABLE_TOOL: ["enable"],
    extensions.TRIGGERS: ["state"],
    extensions.CLOCK: ["get_time", "set_time", "clear", "state"],
    extensions.TRAJECTORY: ["get"],
    extensions.STEP: ["step"],
    extensions.STATE: ["get"],
}
REQUESTS = {  # a valid request of each method, on the instance without a run
    "disable": {"role": "support", "tools": ["send_email"]},
    "enable": {"role": "support", "tools": ["send_email"]},
    "set_time": {"virtual_time": "2030-01-01T00:00:00Z"},
    "step": {"action": "list_tools"},
}
ROLE_METHODS = {"get_time", "step"}  # what an agent may call (a role token); the rest are the operator's


async def test_the_card_declares_each_extension_with_endpoints_that_answer(desks):
    gateway, base, admin, http = desks
    sam = await admin.token(FREE, "sam")
    for token in (gateway.admin_token, sam):  # the same declarations whoever reads the card
        card = await card_of(http, FREE, token)
        declared = {e["uri"]: e for e in card["capabilities"]["extensions"]}
        assert set(declared) >= set(DECLARED)
        assert extensions.CHANGES in declared, "its apps keep a changelog (tests/test_env_changes.py)"
    for uri, methods in DECLARED.items():
        entry = declared[uri]
        assert entry["required"] is False and entry["description"] and entry["params"]["endpoint"].startswith("/")
        assert sorted(entry["params"]["methods"]) == sorted(methods)
        for method in methods:
            op = reference_client.find_extension_method(card, uri, method)  # read as the protocol's client reads it
            token = sam if method in ROLE_METHODS else gateway.admin_token
            answer = await http.request(
                op["method"],
                f"/envs/{FREE}{op['endpoint']}",
                headers=bearer(token),
                **({} if op["method"] == "GET" else {"json": REQUESTS.get(method, {})}),
            )
            assert answer.status_code == 200, (uri, method, answer.text)
    # the tool-access entries are the reference's own declarations of them
    for reference in reference_tool_access.extensions():
        assert declared[reference.uri]["params"] == reference.params


async def test_a_disabled_tool_vanishes_for_that_role_and_its_call_is_refused(desks):
    gateway, base, admin, http = desks
    sam, lee = await admin.token(FREE, "sam"), await admin.token(FREE, "lee")
    lee_before = await mcp_tools(base, FREE, lee)
    answer = await http.post(
        f"/envs/{FREE}/tools/disable",
        json={"role": "support", "tools": ["send_email"]},
        headers=bearer(gateway.admin_token),
    )
    assert answer.status_code == 200, answer.text
    assert "send_email" in answer.json()["disabled"] and "send_email" not in answer.json()["tools"]
    assert "send_email" not in await mcp_tools(base, FREE, sam)
    assert await mcp_tools(base, FREE, lee) == lee_before, "other roles keep theirs"
    async with mcp_client(base, FREE, sam) as mcp:
        refused = await mcp.call_tool("send_email", {"to": "a@example.com", "subject": "s", "body": "b"})
    assert refused.is_error and "not available to role 'support'" in refused.content[0].text
    step = await http.post(
        f"/envs/{FREE}/step",
        json={"action": "call_tool", "tool_name": "send_email", "arguments": {}},
        headers=bearer(sam),
    )
    assert step.status_code == 403
    listed = await http.post(f"/envs/{FREE}/step", json={"action": "list_tools"}, headers=bearer(sam))
    assert "send_email" not in {t["name"] for t in listed.json()["tools"]}

    await http.post(
        f"/envs/{FREE}/tools/enable",
        json={"role": "support", "tools": ["send_email"]},
        headers=bearer(gateway.admin_token),
    )
    assert "send_email" in await mcp_tools(base, FREE, sam)


async def test_enable_wins_over_a_deny_pattern_and_star_means_every_tool_or_role(desks):
    gateway, base, admin, http = desks
    sam, admin_auth = await admin.token(FREE, "sam"), bearer(gateway.admin_token)
    await admin.set_role(FREE, "support", ["*"], ["billing.*"])
    assert "get_order" not in await mcp_tools(base, FREE, sam)
    await http.post(f"/envs/{FREE}/tools/enable", json={"role": "support", "tools": ["get_order"]}, headers=admin_auth)
    tools = await mcp_tools(base, FREE, sam)
    assert "get_order" in tools and "verify_order" not in tools, "the rest of the pattern stays denied"
    await http.post(
        f"/envs/{FREE}/tools/enable", json={"role": "support", "tools": ["issue_refund"]}, headers=admin_auth
    )
    assert "issue_refund" in await mcp_tools(base, FREE, sam), "a hidden tool, named"

    everything_off = await http.post(
        f"/envs/{FREE}/tools/disable", json={"role": "*", "tools": "*"}, headers=admin_auth
    )
    assert everything_off.status_code == 200 and set(everything_off.json()["roles"]) == {"support", "billing_lead"}
    assert await mcp_tools(base, FREE, sam) == {"get_time"}, "every role keeps the clock"
    assert await mcp_tools(base, FREE, await admin.token(FREE, "lee")) == {"get_time"}

    for body, problem in (
        ({"role": "nobody", "tools": ["send_email"]}, "no role 'nobody'"),
        ({"role": "support", "tools": ["no_such_tool"]}, "matches no tool"),
        ({"role": "support", "tools": ["get_time"]}, "every role keeps it"),
        ({"role": "support", "tools": "all"}, "tools"),
    ):
        answer = await http.post(f"/envs/{FREE}/tools/disable", json=body, headers=admin_auth)
        assert answer.status_code == 400 and problem in answer.json()["error"], answer.text


async def test_the_clock_is_set_read_and_cleared(desks):
    gateway, base, admin, http = desks
    sam, admin_auth = await admin.token(FREE, "sam"), bearer(gateway.admin_token)
    answer = await http.put(
        f"/envs/{FREE}/clock/set-time",
        json={"virtual_time": "2030-01-01T08:00:00+02:00", "virtual_seconds_per_real_second": 0},
        headers=admin_auth,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "armed": True,
        "virtual_time": "2030-01-01T06:00:00Z",
        "t0": "2030-01-01T06:00:00Z",
        "virtual_seconds_per_real_second": 0.0,
        "mode": "frozen",
    }
    got = await http.get(f"/envs/{FREE}/clock/time", headers=bearer(sam))
    assert got.json() == {"virtual_time": "2030-01-01T06:00:00Z"}
    async with mcp_client(base, FREE, sam) as mcp:  # the agents' clock tool and every call's stamp agree
        assert json.loads((await mcp.call_tool("get_time", {})).content[0].text)["utc"] == "2030-01-01T06:00:00Z"
        await mcp.call_tool("list_tickets", {})
    assert (await admin.trajectory(FREE))[-1]["virtual_time"] == "2030-01-01T06:00:00Z"

    paced = await http.put(
        f"/envs/{FREE}/clock/set-time", json={"virtual_time": "2030-01-01T00:00:00Z"}, headers=admin_auth
    )
    assert paced.json()["mode"] == "paced" and paced.json()["virtual_seconds_per_real_second"] == 1.0
    for bad in (
        {"virtual_time": "2030-01-01T00:00:00"},  # no offset: whose midnight?
        {"virtual_time": "tomorrow"},
        {"virtual_time": "2030-01-01T00:00:00Z", "virtual_seconds_per_real_second": 10**9},
        {"virtual_time": "2030-01-01T00:00:00Z", "virtual_seconds_per_real_second": -1},
    ):
        refused = await http.put(f"/envs/{FREE}/clock/set-time", json=bad, headers=admin_auth)
        assert refused.status_code == 400, (bad, refused.text)

    cleared = await http.post(f"/envs/{FREE}/clock/clear", headers=admin_auth)
    assert cleared.json() == {"ok": True, "armed": False}
    assert (await http.get(f"/envs/{FREE}/clock/time", headers=bearer(sam))).json() == {
        "virtual_time": "2026-02-16T09:30:00Z"
    }, "back to the instance's own fixed time"
    assert (await http.get(f"/envs/{FREE}/clock/state", headers=admin_auth)).json()["armed"] is False


async def test_an_instance_of_a_run_refuses_the_control_the_run_owns(desks):
    gateway, base, admin, http = desks
    admin_auth, sam = bearer(gateway.admin_token), await admin.token(RUN, "sam")
    before = await mcp_tools(base, RUN, sam)
    for method, path, body, step in (
        ("POST", "/tools/disable", {"role": "support", "tools": ["send_email"]}, "modify_env_tool_access"),
        ("POST", "/tools/enable", {"role": "support", "tools": ["issue_refund"]}, "modify_env_tool_access"),
        ("PUT", "/clock/set-time", {"virtual_time": "2030-01-01T00:00:00Z"}, "sync_env_clock"),
        ("POST", "/clock/clear", {}, "sync_env_clock"),
        ("POST", "/triggers/register", {"triggers": []}, "register_env_triggers"),
        ("POST", "/triggers/remove", {"ids": ["t"]}, "cancel_triggers"),
        ("POST", "/triggers/clear", {}, "register_env_triggers"),
    ):
        answer = await http.request(method, f"/envs/{RUN}{path}", json=body, headers=admin_auth)
        assert answer.status_code == 409, (path, answer.text)
        assert "run 'run-1'" in answer.json()["error"] and step in answer.json()["error"]
    assert await mcp_tools(base, RUN, sam) == before
    assert (await http.get(f"/envs/{RUN}/clock/state", headers=admin_auth)).json()["armed"] is False
    # reads are the operator's whatever the instance
    assert (await http.get(f"/envs/{RUN}/state", headers=admin_auth)).status_code == 200


async def test_trigger_state_shows_what_the_run_watches_and_no_registration_is_taken(desks):
    gateway, base, admin, http = desks
    admin_auth = bearer(gateway.admin_token)
    await admin.push_world(
        RUN,
        {
            "run_id": "run-1",
            "watches": [
                {"trigger": "refund_watch", "kind": "tool_call", "spec": {"env": "desk", "tool": "issue_refund"}}
            ],
        },
    )
    state = (await http.get(f"/envs/{RUN}/triggers/state", headers=admin_auth)).json()
    assert state["run_id"] == "run-1"
    assert [(t["id"], t["type"], t["status"]) for t in state["triggers"]] == [("refund_watch", "tool_call", "armed")]
    assert state["triggers"][0]["when"] == {"env": "desk", "tool": "issue_refund"}
    assert (await http.get(f"/envs/{FREE}/triggers/state", headers=admin_auth)).json()["triggers"] == []
    answer = await http.post(f"/envs/{FREE}/triggers/register", json={"triggers": []}, headers=admin_auth)
    assert answer.status_code == 501 and "register_env_triggers" in answer.json()["error"]


async def test_state_trajectory_and_step_answer_what_they_say(desks):
    gateway, base, admin, http = desks
    sam, admin_auth = await admin.token(FREE, "sam"), bearer(gateway.admin_token)
    state = (await http.get(f"/envs/{FREE}/state", headers=admin_auth)).json()
    servers = {s["name"]: {t["name"] for t in s["tools"]} for s in state["mcp_servers"]}
    assert {"mail", "helpdesk", "billing", "gateway"} <= set(servers) and "send_email" in servers["mail"]
    assert state["roles"]["support"]["disabled"] == ["billing.verify_order"]
    assert "verify_order" not in state["roles"]["support"]["tools"]

    listed = (await http.post(f"/envs/{FREE}/step", json={"action": "list_tools"}, headers=bearer(sam))).json()
    names = {t["name"] for t in listed["tools"]}
    assert "send_email" in names and "issue_refund" not in names and "verify_order" not in names
    assert all("parameters" in t for t in listed["tools"])
    called = await http.post(
        f"/envs/{FREE}/step",
        json={"action": "call_tool", "tool_name": "get_order", "arguments": {"order_id": "ORD-1001"}},
        headers=bearer(sam),
    )
    assert called.status_code == 200 and called.json()["isError"] is False
    assert "charges" in called.json()["structuredContent"] and "ORD-1001" in called.json()["content"][0]["text"]
    failed = await http.post(
        f"/envs/{FREE}/step",
        json={"action": "call_tool", "tool_name": "get_order", "arguments": {"order_id": "ORD-none"}},
        headers=bearer(sam),
    )
    assert failed.status_code == 200 and failed.json()["isError"] is True
    for body, status in (
        ({"action": "call_tool", "tool_name": "no_such_tool"}, 404),
        ({"action": "call_tool", "tool_name": "issue_refund"}, 403),
        ({"action": "call_tool"}, 400),
        ({"action": "dance"}, 400),
    ):
        assert (await http.post(f"/envs/{FREE}/step", json=body, headers=bearer(sam))).status_code == status, body

    lines = (await http.get(f"/envs/{FREE}/trajectory", headers=admin_auth)).text.splitlines()
    entries = [json.loads(line) for line in lines]
    assert [e["tool"] for e in entries][-4:] == ["get_order", "get_order", "no_such_tool", "issue_refund"]
    assert entries[-4]["agent"] == "sam" and entries[-1]["refused"]
    later = await http.get(f"/envs/{FREE}/trajectory", params={"after": entries[-2]["seq"]}, headers=admin_auth)
    assert [json.loads(line)["tool"] for line in later.text.splitlines()] == ["issue_refund"]


ADMIN_ONLY = [
    ("POST", "/tools/disable", {"role": "support", "tools": ["send_email"]}),
    ("POST", "/tools/enable", {"role": "support", "tools": ["send_email"]}),
    ("PUT", "/clock/set-time", {"virtual_time": "2030-01-01T00:00:00Z"}),
    ("POST", "/clock/clear", {}),
    ("GET", "/clock/state", None),
    ("POST", "/triggers/register", {"triggers": []}),
    ("POST", "/triggers/remove", {"ids": ["t"]}),
    ("POST", "/triggers/clear", {}),
    ("GET", "/triggers/state", None),
    ("GET", "/trajectory", None),
    ("GET", "/state", None),
]


async def test_the_operators_operations_refuse_a_role_token_and_no_token(desks):
    gateway, base, admin, http = desks
    sam = await admin.token(FREE, "sam")
    other_instance = await admin.token(RUN, "sam")
    before = (await http.get(f"/envs/{FREE}/state", headers=bearer(gateway.admin_token))).json()
    for method, path, body in ADMIN_ONLY:
        for token, status in ((None, 401), (sam, 401), (other_instance, {401, 403}), ("aea_forged", {401, 403})):
            answer = await http.request(
                method, f"/envs/{FREE}{path}", headers=bearer(token), **({} if body is None else {"json": body})
            )
            assert answer.status_code in (status if isinstance(status, set) else {status}), (path, token, answer.text)
            assert "error" in answer.json()
    assert (await http.get(f"/envs/{FREE}/state", headers=bearer(gateway.admin_token))).json() == before
    for method, path, body in (("GET", "/clock/time", None), ("POST", "/step", {"action": "list_tools"})):
        for token in (None, "aet_forged"):
            answer = await http.request(
                method, f"/envs/{FREE}{path}", headers=bearer(token), **({} if body is None else {"json": body})
            )
            assert answer.status_code in (401, 403), (path, answer.text)


async def test_the_protocols_own_client_without_a_credential_is_refused(desks):
    """The reference client sends no credential: our control path does not answer it (SECURITY.md, Roles)."""
    gateway, base, admin, http = desks
    card = await card_of(http, FREE, gateway.admin_token)
    with pytest.raises(reference_client.ExtensionCallError) as refused:
        await reference_client.invoke_extension(
            f"{base}/envs/{FREE}", card, extensions.DISABLE_TOOL, {"role": "support", "tools": ["send_email"]}
        )
    assert refused.value.response.status_code == 401
    assert "send_email" in await mcp_tools(base, FREE, await admin.token(FREE, "sam"))


async def test_bodies_over_their_limit_are_refused_unread(desks):
    gateway, base, admin, http = desks
    admin_auth, sam = bearer(gateway.admin_token), await admin.token(FREE, "sam")
    padding = "x" * (extensions.CONTROL_BODY_LIMIT + 1)
    for method, path, body in (
        ("POST", "/tools/disable", {"role": "support", "tools": [padding]}),
        ("POST", "/tools/enable", {"role": "support", "tools": [padding]}),
        ("PUT", "/clock/set-time", {"virtual_time": padding}),
        ("POST", "/clock/clear", {"padding": padding}),
    ):
        answer = await http.request(method, f"/envs/{FREE}{path}", json=body, headers=admin_auth)
        assert answer.status_code == 413 and "limit" in answer.json()["error"], (path, answer.text)
    big = {"action": "call_tool", "tool_name": "send_email", "arguments": {"body": "x" * 300_000}}
    answer = await http.post(f"/envs/{FREE}/step", json=big, headers=bearer(sam))
    assert answer.status_code == 413, answer.text


# -- the other way: an env that is not ours, behind our gateway, told of role and clock changes --

FOREIGN_ENV = '''
import sys

from agentenv_protocol.agent_env_environment import AgentEnvEnvironment, environment_card, extension, tool
from starlette.responses import JSONResponse


@environment_card(name="foreign")
class Foreign(AgentEnvEnvironment):
    tool_access = True  # serves disable-tool/v1 and enable-tool/v1, and enforces them per caller role

    def __init__(self):
        self.clock = []

    @tool()
    def ping(self) -> str:
        """Answer pong."""
        return "pong"

    @tool()
    def secret(self) -> str:
        """A tool a role may lose."""
        return "s3cret"

    @extension("urn:agentenv:clock/v1", op="set_time", method="PUT", path="/clock/set-time")
    def set_time(self, virtual_time: str, virtual_seconds_per_real_second: float = 1.0) -> dict:
        self.clock.append({"virtual_time": virtual_time, "rate": virtual_seconds_per_real_second})
        return {"armed": True}


env = Foreign()
app = env.create_app()
app.settings.host, app.settings.port = "127.0.0.1", int(sys.argv[1])


@app.custom_route("/seen", methods=["GET"])
async def seen(request):  # what the test reads back: the rules and clock settings this server was given
    return JSONResponse({"rules": env._application._tool_access.rules, "clock": env.clock})


env.serve()
'''


@pytest.fixture
def foreign_env(side_script):  # noqa: F811 - the fixture imported above
    """An env server written with the protocol's own env SDK (in its own venv: it needs mcp 1.x)."""
    with side_script("foreign_env", FOREIGN_ENV, ready=CARD_PATH) as url:
        yield url


@pytest.mark.processes
async def test_role_and_clock_changes_reach_a_foreign_env_that_declares_them(foreign_env, tmp_path):
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        spec = {
            "id": "mixed",
            "run_id": "run-9",
            "apps": [{"name": "foreign", "url": foreign_env}, {"app": "notes"}],
            "roles": {"agent": {"tools": ["*"]}},
        }
        await admin.put_instance(spec)
        agent = await admin.token("mixed", "agent")
        assert {"ping", "secret"} <= await mcp_tools(base, "mixed", agent)

        # modify_env_tool_access (the run's step) -> disable-tool / enable-tool on the app, by its own tool names
        await admin.set_role("mixed", "agent", ["*"], ["secret"])
        seen = httpx2.get(f"{foreign_env}/seen").json()
        assert seen["rules"] == {"agent": {"secret": True, "ping": False}}
        assert "secret" not in await mcp_tools(base, "mixed", agent)
        await admin.change_role("mixed", "agent", ["secret"], [])  # (the trigger action set_tools)
        assert httpx2.get(f"{foreign_env}/seen").json()["rules"] == {"agent": {"secret": False, "ping": False}}

        # the run's clock (sync_env_clock, pushed with the world) -> clock/v1 set_time
        clock = {
            "mode": "frozen",
            "virtual_anchor": "2031-05-01T12:00:00Z",
            "real_anchor": "2026-01-01T00:00:00Z",
        }
        await admin.push_world("mixed", {"run_id": "run-9", "clock": clock})
        await admin.push_world("mixed", {"run_id": "run-9", "clock": {**clock, "lease_until": "2026-01-01T00:01:00Z"}})
        seen = httpx2.get(f"{foreign_env}/seen").json()
        assert seen["clock"] == [{"virtual_time": "2031-05-01T12:00:00Z", "rate": 0.0}], "a renewed lease is no change"


async def test_an_app_that_refuses_a_role_change_fails_it_and_nothing_changes(tmp_path):
    """A foreign env that declares tool access and refuses: the change fails naming the app, and is not applied."""
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        with refusing_env() as url:
            await admin.put_instance({"id": "r", "apps": [{"name": "stubborn", "url": url}], "roles": {"agent": {}}})
            with pytest.raises(GatewayRefused) as refused:
                await admin.set_role("r", "agent", ["*"], ["ping"])
            assert refused.value.status == 502 and "stubborn" in str(refused.value) and "418" in str(refused.value)
            assert "ping" in (await admin.get_instance("r"))["roles"]["agent"]
            clock = {"mode": "frozen", "virtual_anchor": "2031-05-01T12:00:00Z", "real_anchor": "2026-01-01T00:00:00Z"}
            with pytest.raises(GatewayRefused) as refused:
                await admin.push_world("r", {"run_id": "run-9", "clock": clock})
            assert refused.value.status == 502 and "no path relative to its base" in str(refused.value)


async def test_a_tool_named_disable_is_still_called_over_rest_with_a_role_token(tmp_path):
    """`/tools/disable` is also the REST path of a tool named `disable`: a role token calls the tool there."""
    async with running_gateway(tmp_path / "gw") as (gateway, base, admin):
        with refusing_env() as url:
            await admin.put_instance({"id": "d", "apps": [{"name": "stubborn", "url": url}], "roles": {"agent": {}}})
            token = await admin.token("d", "agent")
            # (the string it returned: the SDK's {"result": ...} wrapping of a plain-text answer is undone)
            assert await admin.call_tool("d", token, "disable", {}) == "disabled nothing"
            async with httpx2.AsyncClient(base_url=base) as http:
                as_admin = await http.post(
                    "/envs/d/tools/disable",
                    json={"role": "agent", "tools": ["ping"]},
                    headers=bearer(gateway.admin_token),
                )
            assert as_admin.status_code == 502 and "418" in as_admin.json()["error"], (
                "the extension, refused by the app"
            )


@contextlib.contextmanager
def refusing_env():
    """A server whose card declares tool access, which takes tools enabled (as every role's are when an instance
    opens) and refuses any disabled (418); one of its tools is named `disable`."""
    from mcp.server import MCPServer
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    mcp = MCPServer("stubborn")

    @mcp.tool()
    def ping() -> str:
        """Answer pong."""
        return "pong"

    @mcp.tool()
    def disable() -> str:
        """A tool that happens to share its name with the extension's path."""
        return "disabled nothing"

    elsewhere = {"set_time": {"method": "PUT", "endpoint": f"//{ELSEWHERE}/clock/set-time"}}  # another host's path
    clock = EnvironmentExtension(uri=extensions.CLOCK, params={"endpoint": "/clock/time", "methods": elsewhere})
    card = EnvironmentCard(
        name="stubborn",
        capabilities=EnvironmentCapabilities(extensions=[*reference_tool_access.extensions(), clock], operations=[]),
    )
    app = mcp.streamable_http_app()
    app.router.routes.insert(0, Route(CARD_PATH, lambda request: JSONResponse(card.model_dump(mode="json"))))
    app.router.routes.append(
        Route(
            "/tools/disable", lambda request: JSONResponse({"error": "I will not"}, status_code=418), methods=["POST"]
        )
    )
    app.router.routes.append(Route("/tools/enable", lambda request: JSONResponse({}), methods=["POST"]))
    with serving(app) as url:
        yield url
