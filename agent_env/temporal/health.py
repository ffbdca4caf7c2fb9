"""A worker's health port (`agent-env worker --health-port`): /healthz, /readyz and /metrics for probes and
Prometheus.

/metrics is the Temporal SDK's own worker metrics (task latencies, slots, polls, sticky cache, ...). The SDK
could serve them itself (`PrometheusConfig(bind_address=...)`), but on a second port of its own, outside
the guard every server we start sits behind. Instead its Runtime records them into a `MetricBuffer`, and
this server turns the buffer into Prometheus families when scraped (and drains it every few seconds in
between, so the buffer never fills): one port for probes and scrapes, one door. Counters keep their running
totals, gauges their last value; histograms get fixed buckets here (the buffer hands over single values).

The metrics hold no secret (task queue and activity names, counts, latencies), so they need no token; the
port binds 127.0.0.1 unless told otherwise (`--health-host 0.0.0.0` in a container).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING

import uvicorn
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from temporalio.runtime import (
    BUFFERED_METRIC_KIND_COUNTER,
    BUFFERED_METRIC_KIND_GAUGE,
    MetricBuffer,
    MetricBufferDurationFormat,
    Runtime,
    TelemetryConfig,
)

from agent_env.errors import ServerError
from agent_env.guard import HostGuard
from agent_env.ports import listening_socket

if TYPE_CHECKING:
    from temporalio.client import Client
    from temporalio.worker import Worker

BUFFER_SIZE = 100_000  # updates between drains; the SDK drops (and logs) what does not fit
DRAIN_EVERY_S = 2.0
# Durations are in seconds: from a workflow task's milliseconds to an activity's minutes.
BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
CHECK_TIMEOUT = timedelta(seconds=3)

Labels = tuple[tuple[str, str], ...]


class SdkMetrics(Collector):
    """The SDK's buffered metric updates, accumulated into Prometheus families."""

    def __init__(self, buffer: MetricBuffer) -> None:
        self.buffer = buffer
        self._meta: dict[str, tuple[str, int]] = {}  # name -> (description, kind)
        self._values: dict[str, dict[Labels, float]] = {}  # counters and gauges
        self._histograms: dict[str, dict[Labels, list[float]]] = {}  # bucket counts..., +Inf count, sum

    def drain(self) -> None:
        for update in self.buffer.retrieve_updates():
            metric = update.metric
            kind = metric.kind
            self._meta.setdefault(metric.name, (metric.description or metric.name, kind))
            labels = tuple(sorted((k, str(v)) for k, v in update.attributes.items()))
            if kind == BUFFERED_METRIC_KIND_COUNTER:
                values = self._values.setdefault(metric.name, {})
                values[labels] = values.get(labels, 0.0) + update.value
            elif kind == BUFFERED_METRIC_KIND_GAUGE:
                self._values.setdefault(metric.name, {})[labels] = float(update.value)
            else:
                counts = self._histograms.setdefault(metric.name, {}).setdefault(labels, [0.0] * (len(BUCKETS) + 2))
                counts[bisect.bisect_left(BUCKETS, update.value)] += 1
                counts[-1] += update.value

    def collect(self) -> Iterator[Metric]:
        self.drain()
        for name, (doc, kind) in sorted(self._meta.items()):
            if kind == BUFFERED_METRIC_KIND_COUNTER:
                family = Metric(name, doc, "counter")
                total_name = name if name.endswith("_total") else name + "_total"  # the SDK names some so
                for labels, total in self._values[name].items():
                    family.add_sample(total_name, dict(labels), total)
            elif kind == BUFFERED_METRIC_KIND_GAUGE:
                family = Metric(name, doc, "gauge")
                for labels, last in self._values[name].items():
                    family.add_sample(name, dict(labels), last)
            else:
                family = Metric(name, doc, "histogram")
                for labels, counts in self._histograms[name].items():
                    running = 0.0
                    for bound, count in zip((*BUCKETS, float("inf")), counts[:-1], strict=True):
                        running += count
                        family.add_sample(name + "_bucket", {**dict(labels), "le": _bound(bound)}, running)
                    family.add_sample(name + "_count", dict(labels), running)
                    family.add_sample(name + "_sum", dict(labels), counts[-1])
            yield family


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class WorkerHealth:
    """The health port of one worker process. Make it before connecting: the client must use `runtime`."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        buffer = MetricBuffer(BUFFER_SIZE, MetricBufferDurationFormat.SECONDS)
        self.runtime = Runtime(telemetry=TelemetryConfig(metrics=buffer))
        self.sdk_metrics = SdkMetrics(buffer)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.sdk_metrics)

    async def readiness(self, client: Client, worker: Worker, draining: Callable[[], bool]) -> str | None:
        """None when the worker polls a Temporal that answers; else why it is not ready."""
        if draining():
            return "draining: it takes no new tasks"
        if not worker.is_running:
            return "the worker is not running"
        try:
            await client.service_client.check_health(timeout=CHECK_TIMEOUT)
        except Exception as e:  # noqa: BLE001 - unreachable, refused, timed out: not ready, and why
            return f"Temporal does not answer: {type(e).__name__}: {e}"
        return None

    def app(self, client: Client, worker: Worker, draining: Callable[[], bool]) -> HostGuard:
        async def healthz(request: Request) -> Response:
            return Response(b"ok", media_type="text/plain")

        async def readyz(request: Request) -> JSONResponse:
            if reason := await self.readiness(client, worker, draining):
                return JSONResponse({"ready": False, "reason": reason}, status_code=503)
            return JSONResponse({"ready": True})

        async def metrics(request: Request) -> Response:
            return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

        routes = [
            Route(path, endpoint, methods=["GET"])
            for path, endpoint in (
                ("/healthz", healthz),
                ("/readyz", readyz),
                ("/metrics", metrics),
            )
        ]
        return HostGuard(Starlette(routes=routes))

    @contextlib.asynccontextmanager
    async def serving(self, client: Client, worker: Worker, draining: Callable[[], bool]) -> AsyncIterator[None]:
        """Serve the port while the block runs (the worker's life, its drain included)."""
        sock = _bound_socket(self.host, self.port)
        server = QuietServer(uvicorn.Config(self.app(client, worker, draining), log_level="warning"))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        drainer = asyncio.create_task(self._drain_forever())
        try:
            while not server.started:
                if serving.done():
                    serving.result()
                    raise ServerError(f"the health port {self.host}:{self.port} stopped at start-up")
                await asyncio.sleep(0.01)
            yield
        finally:
            drainer.cancel()
            server.should_exit = True
            await serving
            sock.close()

    async def _drain_forever(self) -> None:
        while True:
            await asyncio.sleep(DRAIN_EVERY_S)
            self.sdk_metrics.drain()


class QuietServer(uvicorn.Server):
    """Leaves the process's signals alone: the worker's own handlers drain it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bound_socket(host: str, port: int) -> socket.socket:
    """The port, bound here: uvicorn would exit the process on a taken port instead of raising."""
    try:
        sock = listening_socket(host, port)
    except OSError as e:
        raise ServerError(
            f"cannot serve the worker's health port on {host}:{port}: {e.strerror}",
            "pick a free port (--health-port, [worker] health_port) or the right address (--health-host)",
        ) from None
    sock.set_inheritable(True)
    return sock
