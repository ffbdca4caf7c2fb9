"""The gateway's clients: one gateway's client and the pool both meet the whole `GatewayClient` protocol, method
for method and signature for signature, so a step handed a pool cannot tell (the pool holds clients, it is not
one: a method it forgot would not quietly fall through to a base class)."""

from __future__ import annotations

import inspect

import pytest

from agent_env.gateway_client import api, wire
from agent_env.gateway_client.env_servers import EnvServers
from agent_env.gateway_client.pool import GatewayPool
from agent_env.gateway_client.single import SingleGateway

pytestmark = pytest.mark.unit


def protocol_methods() -> dict[str, inspect.Signature]:
    own = [name for name, value in vars(api.GatewayClient).items() if inspect.iscoroutinefunction(value)]
    return {name: inspect.signature(getattr(api.GatewayClient, name)) for name in own}


def test_the_protocol_names_what_runs_use():
    methods = protocol_methods()
    assert len(methods) > 30
    assert {"put_instance", "call_as", "push_world", "end_run", "call_tool", "aclose", "__aenter__"} <= set(methods)


@pytest.mark.parametrize("client", [SingleGateway, GatewayPool, EnvServers])
def test_each_client_implements_every_method_of_the_protocol(client):
    missing, different = [], []
    for name, expected in protocol_methods().items():
        method = getattr(client, name, None)
        if method is None or getattr(method, "__qualname__", "").split(".")[0] != client.__name__:
            missing.append(name)  # not its own: nothing may come from elsewhere
            continue
        if not inspect.iscoroutinefunction(method):
            different.append(f"{name}: not async")
        ours = inspect.signature(method)
        same = [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
            (p.name, p.kind, p.default) for p in expected.parameters.values()
        ]
        if not same or str(ours.return_annotation) != str(expected.return_annotation):
            different.append(f"{name}{ours} (the protocol: {name}{expected})")
    assert not missing, f"{client.__name__} lacks {missing}"
    assert not different, f"{client.__name__} differs from the protocol: {different}"


def test_the_pool_is_not_a_single_gateway():
    assert not issubclass(GatewayPool, SingleGateway)
    assert "base_url" in api.GatewayClient.__annotations__


def test_answers_are_parsed_into_their_shapes_and_keep_fields_they_do_not_name():
    hit = {"trigger": "t", "instance": "run.env", "virtual_time": "2026-01-01T00:00:00Z", "match": {}, "new": 1}
    assert wire.parse(wire.Hits, {"hits": [hit]}) == {"hits": [hit]}
    with pytest.raises(ValueError, match="run_instances"):
        wire.parse(wire.Load, {"instances": 1, "agents": 0})


def test_answers_the_gateway_may_give_in_any_version_still_parse():
    """A trajectory entry that cannot be read back is served as a note, and older gateways leave fields out:
    both still parse, as they did when answers were plain dicts."""
    page = {"entries": [{"seq": 1, "unreadable": "this entry cannot be read: ...", "bytes": 9}, {"seq": 2}]}
    assert wire.parse(wire.TrajectoryPage, page) == page
    assert wire.parse(wire.RunEnded, {"instances": [], "agents": []}) == {"instances": [], "agents": []}
