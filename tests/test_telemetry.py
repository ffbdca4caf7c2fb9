"""Tracing: one OpenTelemetry trace per run, end to end, and nothing of it loaded when it is off.

- In process: `refund` runs (a workflow, its activities, an env deployed in a gateway, a hosted A2A agent
  calling the env's tools) with the spans kept in memory; every span the run made has the run's trace id.
- Across processes: `agent-env run refund` exports over OTLP/HTTP to a receiver this test starts; the CLI
  process, the worker and the embedded gateway daemon all send spans of that one trace.
- Off (the default): neither `agent-env run` nor `--help` loads any of OpenTelemetry.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import free_port
from gateway_util import running_gateway

from agent_env import telemetry
from agent_env.spec.run import RunStatus
from agent_env.task_lookup import resolve_target
from agent_env.temporal import launch

AGENT_ENV = str(Path(sys.executable).parent / "agent-env")


# -- settings ----------------------------------------------------------------------------------------------------


def test_tracing_is_set_from_the_file_or_opentelemetrys_own_variables(monkeypatch, tmp_path):
    from agent_env.config import load_settings

    for var in ("AGENT_ENV_TRACES", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "AGENT_ENV_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    assert load_settings(tmp_path).telemetry.traces is False  # off unless asked for
    (tmp_path / ".agentenv").mkdir()
    (tmp_path / ".agentenv" / "config.toml").write_text(
        '[telemetry]\ntraces = true\notlp_endpoint = "http://a:4318/"\n'
    )
    assert load_settings(tmp_path).telemetry.traces_url == "http://a:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "evals")
    settings = load_settings(tmp_path)
    assert (settings.telemetry.traces_url, settings.telemetry.service_name) == (
        "http://collector:4318/v1/traces",
        "evals",
    )
    assert settings.origin("telemetry", "otlp_endpoint").name == "OTEL_EXPORTER_OTLP_ENDPOINT"


def test_tracing_without_the_sdk_says_which_extra_to_install(monkeypatch, settings):
    from agent_env.errors import BadInput

    traced = settings.model_copy(deep=True)
    traced.telemetry.traces = True
    monkeypatch.setattr(telemetry, "_tracer", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.resources", None)  # as if the `otel` extra were missing
    with pytest.raises(BadInput, match=r"agentenv-framework\[otel\]"):
        telemetry.setup(traced, "cli")


# -- (a) one run, in process, spans in memory -----------------------------------------------------------------


@pytest.fixture(scope="module")
def spans_in_memory(settings):
    """Tracing on in this process (once per process: OpenTelemetry's provider is global), kept in memory."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    traced = settings.model_copy(deep=True)
    traced.telemetry.traces = True
    assert telemetry.setup(traced, "test", exporter=exporter), "tracing was set up in this process before"
    yield exporter
    # The provider stays global, but later tests of this session trace nothing: ours stops, and so does our code.
    from opentelemetry import trace

    trace.get_tracer_provider().shutdown()  # type: ignore[attr-defined]  # the SDK's provider
    exporter.clear()
    telemetry._tracer = None


async def test_a_run_is_one_trace_from_its_start_to_the_agents_tool_calls(spans_in_memory, settings, server, tmp_path):
    from agent_env.temporal.worker import create_worker
    from agent_env.temporal_client.client import connect

    in_gateway = settings.model_copy(deep=True)
    in_gateway.gateway.ip = "0.0.0.0"  # no fixed address: hosted agents' cards name the one each request came to
    async with running_gateway(tmp_path / "gw", settings=in_gateway) as (gateway, base, _admin):
        traced = settings.model_copy(deep=True)
        traced.gateway.url, traced.gateway.admin_token = base, gateway.admin_token
        traced.temporal.task_queue = f"traced-{uuid.uuid4().hex[:8]}"  # only this test's worker takes the run
        client = await connect(traced)  # with the tracing interceptor: tracing is on in this process
        async with create_worker(client, traced):
            state = await launch.wait_result(await launch.start_run(client, traced, resolve_target("refund")))
    assert state.status is RunStatus.PASSED, (state.error, {k: s.error for k, s in state.steps.items()})
    telemetry.flush()

    spans = spans_in_memory.get_finished_spans()
    root = next(s for s in spans if s.name == "run refund")
    assert root.parent is None and root.attributes["run_id"] == state.run_id
    trace = [s for s in spans if s.context.trace_id == root.context.trace_id]
    names = {s.name for s in trace}
    assert "RunWorkflow:agentenv.TaskRun" in names
    assert {"RunActivity:agentenv.step.deploy_env", "RunActivity:agentenv.record_run"} <= names, sorted(names)
    steps = {s.attributes["temporalActivityID"] for s in trace if s.name.startswith("RunActivity:agentenv.step.")}
    local = {p.id for p in launch.plan(resolve_target("refund"), "plan-only", settings).steps if p.local}
    assert local and steps == {"desk", "case", "agent", "work", "grade"}  # local activities carry the trace too
    assert "agent turn refunds" in names  # the worker asked the hosted agent (A2A) ...
    server_spans = [s for s in trace if s.kind.name == "SERVER" and "url.path" in (s.attributes or {})]
    paths = {s.attributes["url.path"] for s in server_spans}
    assert any(p.startswith("/agents/") for p in paths), paths  # ... the gateway served the turn ...
    assert any(p.startswith("/envs/") and p.endswith("/mcp") for p in paths), paths  # ... and its tool calls
    assert {"app billing.verify_order", "app billing.issue_refund"} <= names, sorted(names)  # in the env's apps
    # Nothing the run did started a trace of its own: every span of this run hangs under its root.
    stray = [s.name for s in spans if s.context.trace_id != root.context.trace_id and s.name.startswith("app ")]
    assert stray == []


# -- (b) across processes, over OTLP/HTTP ----------------------------------------------------------------------


class OtlpReceiver:
    """The smallest OTLP/HTTP trace receiver: POST /v1/traces (protobuf); keeps (trace id, span name, process)."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        self.spans: list[tuple[str, str, str]] = []
        received = self.spans

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if self.headers.get("content-encoding") == "gzip":
                    import gzip

                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    attributes = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            received.append((span.trace_id.hex(), span.name, attributes.get("agentenv.process", "")))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def otlp_receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


@pytest.mark.processes
def test_the_cli_and_the_gateway_export_one_trace_over_otlp(otlp_receiver, server, tmp_path):
    env = {
        **os.environ,
        "AGENT_ENV_HOME": str(tmp_path / "home"),  # its own embedded gateway (this state dir's), traced from its start
        "AGENT_ENV_GATEWAY_PORT": str(free_port()),
        "TEMPORAL_ADDRESS": f"{server.ip}:{server.port}",  # the session's Temporal server
        "AGENT_ENV_TASK_QUEUE": f"otlp-{uuid.uuid4().hex[:8]}",
        "AGENT_ENV_TRACES": "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver.url,
    }
    # A cluster (TEMPORAL_ADDRESS): `run` starts and follows; a worker of its own executes the run.
    worker = subprocess.Popen([AGENT_ENV, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        done = subprocess.run([AGENT_ENV, "run", "refund"], env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        deadline = time.monotonic() + 45  # the gateway and the worker go on running: their batches come later
        while True:
            roots = {t for t, name, process in otlp_receiver.spans if (name, process) == ("run refund", "cli")}
            of_run = [(name, process) for t, name, process in otlp_receiver.spans if t in roots]
            if {("app billing.issue_refund", "gateway"), ("agent turn refunds", "worker")} <= set(of_run):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert len(roots) == 1, otlp_receiver.spans
        assert {"cli", "worker", "gateway"} <= {process for _, process in of_run}, of_run
        assert ("agent-env run refund", "cli") in of_run and ("RunWorkflow:agentenv.TaskRun", "worker") in of_run
        assert ("agent turn refunds", "worker") in of_run and ("POST /agents/{agent_id}/{path}", "gateway") in of_run
        assert ("POST /envs/{instance}/mcp", "gateway") in of_run  # the agent's tool calls, served ...
        assert ("app billing.issue_refund", "gateway") in of_run  # ... by the env's app
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        subprocess.run([AGENT_ENV, "gateway", "stop"], env=env, capture_output=True, timeout=60)


# -- (c) off: nothing loaded -------------------------------------------------------------------------------------


def _loaded_after(args: list[str], env: dict[str, str]) -> list[str]:
    """Run `agent-env ARGS` in a fresh interpreter; report the OpenTelemetry modules it had loaded at its exit."""
    probe = (
        "import atexit, json, os, sys\n"
        "def report(): print('LOADED', json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry') "
        "or m.startswith('temporalio.contrib.opentelemetry'))), flush=True)\n"
        "atexit.register(report)\n"
        "real_exit = os._exit\n"
        "def exit_now(code): report(); real_exit(code)\n"
        "os._exit = exit_now  # the CLI skips interpreter teardown once temporalio is loaded\n"
        f"sys.argv = ['agent-env', *{args!r}]\n"
        "from agent_env.cli import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.rsplit("LOADED ", 1)[1])


@pytest.mark.processes
def test_help_loads_no_opentelemetry():
    assert _loaded_after(["--help"], dict(os.environ)) == []


@pytest.mark.processes
def test_a_run_without_tracing_loads_none_of_it(server):
    env = {k: v for k, v in os.environ.items() if k not in ("AGENT_ENV_TRACES", "OTEL_EXPORTER_OTLP_ENDPOINT")}
    env["AGENT_ENV_TASK_QUEUE"] = f"untraced-{uuid.uuid4().hex[:8]}"
    loaded = _loaded_after(["run", "hello"], env)
    assert loaded == []  # the CLI: not even OpenTelemetry's API
    # (The gateway's process has the API loaded, by FastAPI and the MCP SDK, with its no-op provider.)
