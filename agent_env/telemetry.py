"""Tracing (OpenTelemetry): one trace per run, from the CLI through Temporal to the gateway, apps and agents.

Why it is built this way:
- Off by default, and then free: nothing here imports OpenTelemetry until `setup` finds `[telemetry] traces`
  on. Until then `span()` is a null context, `inject_traceparent` returns at once, and Temporal gets no
  interceptor, so a run without tracing pays one attribute check per call.
- On, each process (CLI, worker, gateway) sets up its own tracer provider once, exporting over OTLP/HTTP in
  batches, and the trace crosses processes as W3C `traceparent`: in Temporal headers (the SDK's tracing
  interceptor: the workflow and its activities, local ones too), and on HTTP requests to our own servers
  (the gateway, env servers, A2A agents). Model APIs get none: they are someone else's.
- The gateway's server spans are FastAPI's own (`gateway_telemetry`), so no ASGI middleware is added.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Any

from agent_env.config import Settings
from agent_env.errors import BadInput

if TYPE_CHECKING:
    from fastapi.telemetry import TelemetryConfig
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Tracer

_tracer: Tracer | None = None  # set once tracing is on in this process


def setup(settings: Settings, process: str, *, exporter: SpanExporter | None = None) -> bool:
    """Trace this process if `[telemetry] traces` is on (once; later calls change nothing). `process` names
    it in the spans' resource (cli, worker, gateway); `exporter` replaces OTLP/HTTP (tests). True if on."""
    global _tracer
    config = settings.telemetry
    if _tracer is not None or not config.traces:
        return _tracer is not None
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError as e:
        raise BadInput(
            f"[telemetry] traces is on, but the OpenTelemetry SDK is not installed ({e.name} is missing)",
            "install agent-env's `otel` extra (pip install 'agentenv-framework[otel]'), or turn traces off",
        ) from None

    if exporter is None:
        exporter = OTLPSpanExporter(endpoint=config.traces_url)
    resource = Resource.create(
        {"service.name": config.service_name, "agentenv.process": process, "process.pid": os.getpid()}
    )
    provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=1000))
    trace.set_tracer_provider(provider)  # flushed and shut down at interpreter exit (the SDK's atexit hook)
    _tracer = trace.get_tracer("agent_env")
    return True


def flush(timeout_s: float = 2.0) -> None:
    """Export the spans still batched (before a process exits without running atexit hooks). Waits at most
    `timeout_s`: a collector that does not answer must not hold the command up (the SDK's flush retries)."""
    if _tracer is not None:
        import threading

        from opentelemetry import trace

        provider: Any = trace.get_tracer_provider()
        exporting = threading.Thread(target=provider.force_flush, daemon=True, name="agentenv-trace-flush")
        exporting.start()
        exporting.join(timeout_s)


def span(name: str, **attributes: str | int | float | bool) -> contextlib.AbstractContextManager[Any]:
    """A span around a block, the current one inside it; a null context when tracing is off."""
    if _tracer is None:
        return contextlib.nullcontext()
    return _tracer.start_as_current_span(name, attributes=attributes)


async def inject_traceparent(request: Any) -> None:
    """An httpx/httpx2 request hook for clients of our own servers: the current trace goes with the request."""
    if _tracer is not None:
        from opentelemetry import propagate

        propagate.inject(request.headers)


def trace_headers(headers: dict[str, str]) -> dict[str, str]:
    """`headers` with the current trace's context added when tracing is on (for clients that are not httpx)."""
    if _tracer is not None:
        from opentelemetry import propagate

        propagate.inject(headers)
    return headers


HTTP_HOOKS: dict[str, list[Any]] = {"request": [inject_traceparent]}  # `event_hooks=` of our servers' clients


def temporal_interceptors() -> list[Any]:
    """The Temporal client's interceptors: the tracing one when tracing is on (workers inherit it)."""
    if _tracer is None:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor()]


UNTRACED_PATHS = frozenset({"/ready", "/healthz", "/readyz", "/metrics"})  # probes and scrapes: no run's work


def gateway_telemetry() -> TelemetryConfig:
    """FastAPI's telemetry for the gateway: server spans (continuing the caller's `traceparent`) when
    tracing is on, probes and scrapes left out; nothing at all when off (tool calls are the hot path)."""
    return {
        "tracing": _tracer is not None,
        "metrics": False,
        "logs": False,
        "operation_spans": False,
        "auto_configure": False,
        "exclude": lambda scope: scope.get("path") in UNTRACED_PATHS,
    }
