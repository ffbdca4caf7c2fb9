"""Env topologies: where an environment's instance is served, by the `env_provider_type` its record declares.

- `gateway` (the default): an instance on the install's gateway (or pool), beside every other run's.
- `server`: a server of its own, reached directly at its own URL: the gateway's code serving that one instance
  (`agent_env.gateway.own_server`), started as a sandbox of the run (the `local` provider unless the deploy_env step
  names another) and stopped with it.
- a plugin's: an `EnvironmentProvider` registered in the `agent_env.env_providers` entry-point group runs that same
  server on compute of its own (a VM with a GPU and a display, a machine of a lab) and says where it is reached.

Whatever the topology, the door is the gateway's: an own server's key is derived from the install's admin token and
the instance (`gateway_client.env_servers.server_key`), handed to it in its environment (never its command line),
so agents hold role tokens it HMACs, see the tools their role allows, and only the install's workers hold its admin
token. Where an instance is served is recorded in the object store; the run's steps reach it through
`gateway_client.env_servers.EnvServers`.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, ClassVar

from agent_env import waiting
from agent_env.envs.server_token import SERVER_TOKEN_ENV
from agent_env.errors import BadInput, StepFailed
from agent_env.gateway_client.api import GatewayClient, GatewayRefused, GatewayUnavailable
from agent_env.gateway_client.env_servers import (
    EnvServerRecord,
    EnvServers,
    record_of,
    run_records,
    save,
    server_client,
    server_key,
)
from agent_env.gateway_client.single import SingleGateway
from agent_env.providers import apps, by_name
from agent_env.spec.env import SandboxRun
from agent_env.stores import keys

if TYPE_CHECKING:
    from agent_env.config import Settings
    from agent_env.stores import Stores

ENTRY_POINT_GROUP = "agent_env.env_providers"
GATEWAY = "gateway"
BUILTIN = {
    GATEWAY: "agent_env.providers.topologies:OnGateway",
    "server": "agent_env.providers.topologies:OwnServer",
}
COMMAND = ("python", "-m", "agent_env.gateway.own_server")  # what every own server runs
READY_TIMEOUT_S = 60.0


@dataclass
class EnvServer:
    """One environment instance's own server, as a topology's provider starts it: run `command` with `env` (its key:
    a secret, for the server's environment only) so that it serves on `$HOST:$PORT`, and say where it is reached."""

    settings: Settings
    run_id: str
    instance: str
    env_name: str  # the environment record's name
    topology: str
    sandbox_provider: str | None  # the deploy_env step's `provider`, if it names one
    command: list[str] = field(default_factory=lambda: list(COMMAND))
    env: dict[str, str] = field(default_factory=dict, repr=False)


@dataclass
class Started:
    url: str  # where the run and its agents reach the server (its base URL)
    handle: str = ""  # what `stop` finds it by (the provider's own; recorded, so any worker can stop it)


class EnvironmentProvider(ABC):
    """A topology: where an environment's instance is served. Plugins subclass it and register it under its `type`
    in the `agent_env.env_providers` entry-point group."""

    type: ClassVar[str]
    description: ClassVar[str] = ""

    @abstractmethod
    async def start(self, server: EnvServer, stores: Stores) -> Started | None:
        """Start `server` (or, on a retry, find it) and return where it is reached; None: the instance has no
        server of its own (the install's gateway serves it)."""

    @abstractmethod
    async def stop(self, server: EnvServer, handle: str, stores: Stores) -> None:
        """Stop the server `start` answered `handle` for (idempotent: it may be gone already)."""


class OnGateway(EnvironmentProvider):
    type = GATEWAY
    description = "an instance on the install's gateway (the default)"

    async def start(self, server: EnvServer, stores: Stores) -> Started | None:
        return None

    async def stop(self, server: EnvServer, handle: str, stores: Stores) -> None:
        return None


class OwnServer(EnvironmentProvider):
    type = "server"
    description = "a server of its own, reached directly: a sandbox of the run (local unless deploy_env names one)"

    async def start(self, server: EnvServer, stores: Stores) -> Started | None:
        box = SandboxRun(command=server.command, network="open")
        _, sandbox = await apps.start(
            server.settings,
            stores,
            run_id=server.run_id,
            owner=server.instance,
            name="own-server",
            box=box,
            build_key=None,
            chain=server.sandbox_provider or "local",
            label=f"the own server of env {server.env_name}",
            server_token=server.env[SERVER_TOKEN_ENV],
        )
        if not sandbox.url:
            raise StepFailed(f"the own server of env {server.env_name} was started without a port to reach it at")
        return Started(url=sandbox.url, handle=sandbox.info.id)

    async def stop(self, server: EnvServer, handle: str, stores: Stores) -> None:
        for provider in await by_name.usable(server.settings):
            for info in await provider.list(server.run_id):
                if info.id == handle:
                    await provider.remove(info.id)


@cache
def targets() -> dict[str, str]:
    """Every topology this install knows -> its `module:Class` (plugins, then the built-ins, which win)."""
    from importlib.metadata import entry_points

    return {**{ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}, **BUILTIN}


def load(name: str) -> EnvironmentProvider:
    """The topology `name` (an env record's `env_provider_type`)."""
    target = targets().get(name)
    if target is None:
        raise BadInput(
            f"env_provider_type {name!r} is no topology this install knows (known: {', '.join(sorted(targets()))})",
            "use `gateway` or `server`, or install the plugin that registers it in agent_env.env_providers "
            "(`agent-env plugin list` shows them)",
        )
    module_name, _, attr = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise BadInput(
            f"topology {name!r} ({target}) cannot be loaded: {type(e).__name__}: {e}",
            "fix or reinstall the plugin that registers it (`agent-env plugin check`)",
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, EnvironmentProvider)) or cls.type != name:
        raise BadInput(
            f"topology {name!r} ({target}) is not an EnvironmentProvider of type {name!r}",
            "point the entry point at a subclass of agent_env.providers.topologies.EnvironmentProvider whose "
            "`type` is the entry point's name",
        )
    return cls()


def env_server(
    settings: Settings,
    *,
    run_id: str,
    instance: str,
    env_name: str,
    topology: str = GATEWAY,
    sandbox: str | None = None,
) -> EnvServer:
    """What a topology starts for `instance`, its key (derived, so any worker of the install makes the same) in
    its environment."""
    return EnvServer(
        settings=settings,
        run_id=run_id,
        instance=instance,
        env_name=env_name,
        topology=topology,
        sandbox_provider=sandbox,
        env={SERVER_TOKEN_ENV: server_key(settings, instance).hex()},
    )


async def serving(gateway: GatewayClient, server: EnvServer, stores: Stores) -> GatewayClient:
    """What a deploy puts `server.instance` on: `gateway` for the `gateway` topology, else the instance's own server,
    started by its topology (and remembered by `gateway`, so the run's later requests find it)."""
    own = await open_server(server, stores)
    if own is None:
        return gateway
    if isinstance(gateway, EnvServers):
        gateway.remember(server.instance, own)
    return own


async def open_server(server: EnvServer, stores: Stores) -> SingleGateway | None:
    """Start the instance's own server as its topology does, record where it is, and wait until it answers its admin
    token; its admin client. None for the `gateway` topology."""
    provider = load(server.topology)
    started = await provider.start(server, stores)
    if started is None:
        return None
    record = EnvServerRecord(
        instance=server.instance,
        run_id=server.run_id,
        env=server.env_name,
        topology=server.topology,
        url=started.url.rstrip("/"),
        handle=started.handle,
    )
    await save(stores, record)  # first: whatever happens next, the run's end finds it and stops it
    client = server_client(server.settings, record)

    async def answers() -> bool:
        await client.list_instances()
        return True

    try:
        await waiting.until(
            answers,
            what=f"the own server of env {server.env_name} at {record.url}",
            timeout=READY_TIMEOUT_S,
            interval=0.1,
            retry_on=(GatewayUnavailable,),
        )
    except waiting.TimedOut as e:
        await client.aclose()
        raise StepFailed(f"{e}; topology {server.topology!r} started it, but it does not answer", retryable=True) from e
    except GatewayRefused as e:
        await client.aclose()
        raise StepFailed(
            f"the own server of env {server.env_name} at {record.url} refuses this install's admin token "
            f"({e.status}): is something else serving there?"
        ) from None
    return client


async def close_server(settings: Settings, stores: Stores, instance: str, gateway: GatewayClient | None = None) -> bool:
    """Stop `instance`'s own server, if it has one, and forget it (`gateway` too); whether it had one."""
    record = await record_of(stores, instance)
    if record is None:
        return False
    await _stop(settings, stores, record)
    if isinstance(gateway, EnvServers):
        gateway.forget(instance)
    return True


async def close_run_servers(settings: Settings, stores: Stores, run_id: str) -> int:
    """Stop every own server of the run (at its end); how many."""
    records = await run_records(stores, run_id)
    for record in records:
        await _stop(settings, stores, record)
    return len(records)


async def _stop(settings: Settings, stores: Stores, record: EnvServerRecord) -> None:
    server = env_server(
        settings,
        run_id=record.run_id,
        instance=record.instance,
        env_name=record.env,
        topology=record.topology,
    )
    await load(record.topology).stop(server, record.handle, stores)
    await stores.aio.objects.delete(keys.env_server(record.run_id, record.instance))
