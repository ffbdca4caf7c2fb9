"""Connect to the configured Temporal: a cluster (address set) or the embedded dev server."""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from typing import TYPE_CHECKING

from agent_env import telemetry, waiting
from agent_env.config import Settings
from agent_env.errors import ServerError
from agent_env.temporal_client import seals, server

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.runtime import Runtime


def _tls(settings: Settings):
    t = settings.temporal
    if not (t.tls or t.tls_cert or t.tls_ca):
        return bool(t.api_key) or False  # Temporal Cloud API keys need TLS
    from temporalio.service import TLSConfig

    def read(path):
        if path is None:
            return None
        try:
            return path.read_bytes()
        except OSError as e:
            raise ServerError(
                f"cannot read TLS file {path}: {e.strerror}", "fix the tls_* paths in the config"
            ) from None

    return TLSConfig(
        client_cert=read(t.tls_cert),
        client_private_key=read(t.tls_key),
        server_root_ca_cert=read(t.tls_ca),
        domain=t.tls_server_name,
    )


async def connect(
    settings: Settings,
    *,
    start_server: bool = True,
    on_notice=lambda msg: None,
    runtime: Runtime | None = None,
    server_grace: float = 0.0,
) -> Client:
    """A client using the pydantic data converter. Starts the embedded server when none is configured.
    `runtime`: the SDK runtime its workers record metrics in (a worker's health port); None: the default.
    `server_grace` (with `start_server=False`): how long the embedded server may take to appear (a background
    worker is started beside the server, not after it)."""
    server_up = None
    if settings.embedded and start_server:  # in a thread (waits until it answers), while temporalio is imported
        ensure = functools.partial(server.ensure, settings, on_notice=on_notice)
        server_up = asyncio.get_running_loop().run_in_executor(None, ensure)
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    if server_up is not None:
        await server_up
    elif settings.embedded and not await _server_appears(settings, server_grace):
        raise ServerError(
            "the embedded Temporal server is not running",
            "start it with `agent-env server start` (or let `agent-env run` start it)",
        )
    from agent_env.temporal_client.sealing import SealingClient  # (temporalio's interceptors)

    target = settings.address
    interceptors = telemetry.temporal_interceptors()  # tracing, when this process set it up: workers inherit it
    # Every start and update this client sends is sealed with the install's plan key (read when first needed).
    interceptors.append(SealingClient(settings.temporal.namespace, lambda: seals.load(settings)))

    async def connected() -> Client:
        return await asyncio.wait_for(
            Client.connect(
                target,
                namespace=settings.temporal.namespace,
                api_key=settings.temporal.api_key,
                tls=_tls(settings),
                data_converter=pydantic_data_converter,
                interceptors=interceptors,
                runtime=runtime,
            ),
            timeout=settings.temporal.connect_timeout,
        )

    # A freshly started dev server opens its port a moment before its frontend is healthy: keep
    # trying it for a while. A configured cluster gets the configured timeout, once.
    try:
        return await waiting.until(
            connected,
            what=f"the Temporal server at {target}",
            timeout=20.0 if settings.embedded else 0.0,
            interval=0.05,
            give_up_on=(ServerError,),
        )  # any other failure gets the same clear message
    except waiting.TimedOut as timed_out:
        e = timed_out.last
        reason = f"no answer within {settings.temporal.connect_timeout:g}s" if isinstance(e, TimeoutError) else e
        if settings.embedded:
            raise ServerError(
                f"the embedded Temporal server at {target} did not answer ({reason})",
                "run `agent-env server stop`, then try again; its log is under <state_dir>/temporal/server.log",
            ) from None
        raise ServerError(
            f"the Temporal server at {target} (from {settings.describe_address_source()}) did not answer ({reason})",
            "check that the server runs and the address, namespace and TLS settings are right, "
            "or unset the address to use the embedded server",
        ) from None


# (client, namespace) -> whether our search attributes are usable: asked once per client, not per run started.
_ATTRIBUTES_CHECKED: weakref.WeakKeyDictionary[Client, dict[str, bool]] = weakref.WeakKeyDictionary()


async def ensure_search_attributes(client: Client, namespace: str) -> bool:
    """Register our search attributes if missing. False if the cluster does not let us (e.g. Cloud API keys)."""
    checked = _ATTRIBUTES_CHECKED.setdefault(client, {})
    if namespace not in checked:
        checked[namespace] = await _register_search_attributes(client, namespace)
    return checked[namespace]


async def _register_search_attributes(client: Client, namespace: str) -> bool:
    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest, ListSearchAttributesRequest
    from temporalio.service import RPCError

    from agent_env.temporal_client.attributes import ALL

    try:
        listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace=namespace))
        missing = {k.name: k.indexed_value_type for k in ALL if k.name not in listed.custom_attributes}
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=namespace, search_attributes=missing)  # type: ignore[arg-type]  # IntEnum of the proto's values
            )
        return True
    except RPCError as e:
        if "not found" in str(e).lower() and "namespace" in str(e).lower():
            raise ServerError(
                f"namespace '{namespace}' does not exist on this Temporal server",
                "create it (`temporal operator namespace create`) or set [temporal] namespace in the config",
            ) from None
        return False


async def workers_polling(client: Client, settings: Settings) -> bool:
    """Whether a worker polled the task queue lately (Temporal lists its recent pollers). Unknown: True (the
    caller only warns when none does)."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    try:
        answer = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=settings.temporal.namespace,
                task_queue=TaskQueue(name=settings.temporal.task_queue),
                task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            )
        )
    except Exception:  # noqa: BLE001 - unknown: no warning
        return True
    return bool(answer.pollers)


async def _server_appears(settings: Settings, grace: float) -> bool:
    """Whether the embedded server runs (its pidfile names a live process: it may still be starting), waiting up
    to `grace` seconds for one to appear while a process is starting it. Nobody starting it for a second (the
    start failed, or never began) ends the wait early."""
    now = time.monotonic()
    deadline, idle_since = now + grace, now
    while not server.status(settings).running:
        now = time.monotonic()
        if server.starting(settings):
            idle_since = now
        if now >= deadline or now - idle_since > 1.0:
            return False
        await asyncio.sleep(0.05)
    return True
