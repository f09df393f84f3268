"""Traces across real processes (C6): an approval run suspended by one worker process and
resumed by another is one trace, sent over OTLP/HTTP to a collector on loopback; and without
the SDK (or with tracing off) nothing of OpenTelemetry is imported and nothing breaks."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from .conftest import REPO_ROOT, Plaita, poll, requires_redis

pytestmark = pytest.mark.process


@attrs.frozen
class ReceivedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]

    @property
    def node(self) -> tuple[str, str]:
        return (self.attributes["plaita.node.id"], self.attributes["plaita.node.outcome"])


class Collector:
    """An OTLP/HTTP trace receiver on loopback: every span any process sent it."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.receive(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def receive(self, request: ExportTraceServiceRequest) -> None:
        received = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ReceivedSpan(
                            service=str(resource.get("service.name")),
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes={kv.key: _value(kv.value) for kv in span.attributes},
                            links=tuple(
                                (link.trace_id.hex(), link.span_id.hex()) for link in span.links
                            ),
                        )
                    )
        with self._lock:
            self.spans.extend(received)

    def of(self, execution_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [
                s for s in self.spans if s.attributes.get("plaita.execution.id") == execution_id
            ]

    def named(self, prefix: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.name.startswith(prefix)]

    def __enter__(self) -> Collector:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


@pytest.fixture
def collector() -> Iterator[Collector]:
    with Collector() as running:
        yield running


def traced(plaita: Plaita, collector: Collector) -> None:
    """Every process this runner starts sends its spans to ``collector``, batched briefly."""
    plaita.env.update(
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": "plaita-cli",
        }
    )


WORKER = [
    "worker",
    "--flows",
    "examples/flows",
    "--handler-modules",
    "examples.handlers",
    "--read-block-ms",
    "100",
]


@requires_redis
def running(plaita: Plaita, process: subprocess.Popen[bytes]) -> None:
    """Return once ``process`` logged its start (or fail if it exited instead)."""
    poll(
        lambda: process.poll() is not None or "worker.started" in plaita.log_of(process),
        timeout=30,
        what="the worker to start",
    )
    assert process.poll() is None, plaita.logs()


def test_an_approval_suspended_by_one_worker_and_resumed_by_another_is_one_trace(
    plaita: Plaita, collector: Collector
) -> None:
    """C6: the CLI starts it (the root), worker A runs it to its wait and is stopped, the
    CLI publishes the decision, the event filter routes it and worker B resumes it: every
    node span of both workers is a child of the root, in one trace; the resume links to the
    span that suspended it and to the filter's."""
    traced(plaita, collector)
    event_filter = plaita.spawn(
        "event-filter",
        "event-filter",
        "--read-block-ms",
        "100",
        env={"OTEL_SERVICE_NAME": "filter"},
    )
    worker_a = plaita.spawn("worker-a", *WORKER, env={"OTEL_SERVICE_NAME": "worker-a"})
    running(plaita, worker_a)  # its --flows are registered before the start asks for one
    started = plaita.json("executions", "start", "approval", "--input", '{"amount": 5000}')
    execution_id = started["execution_id"]
    waiting = plaita.wait_for_status(execution_id, {"suspended"})
    assert waiting["waiting_for"]["node_id"] == "wait_decision"
    assert plaita.stop(worker_a) == 0, plaita.logs()

    worker_b = plaita.spawn("worker-b", *WORKER, env={"OTEL_SERVICE_NAME": "worker-b"})
    running(plaita, worker_b)
    plaita.run(
        "events",
        "publish",
        "approval_decision",
        "--correlation-id",
        execution_id,
        "--data",
        '{"approved": true}',
    )
    done = plaita.wait_for_status(execution_id, {"completed", "error"})
    assert (done["status"], done["result"]["outcome"]) == ("completed", "shipped"), plaita.logs()
    assert plaita.stop(worker_b) == 0, plaita.logs()
    assert plaita.stop(event_filter) == 0, plaita.logs()

    def every_span() -> list[ReceivedSpan] | None:
        spans = [s for s in collector.of(execution_id) if "plaita.node.id" in s.attributes]
        return spans if len(spans) == 8 and collector.named("filter ") else None

    nodes = poll(every_span, timeout=15, what=f"the 8 node spans of {execution_id}")
    [root] = [s for s in collector.of(execution_id) if s.name == "execution approval"]
    assert (root.service, root.parent_id) == ("plaita-cli", "")
    assert {s.trace_id for s in nodes} == {root.trace_id}
    assert {s.parent_id for s in nodes} == {root.span_id}
    by_worker = {
        service: [s.node for s in nodes if s.service == service]
        for service in ("worker-a", "worker-b")
    }
    assert by_worker == {
        "worker-a": [
            ("request", "advanced"),
            ("check", "advanced"),
            ("wait_decision", "suspended"),
        ],
        "worker-b": [
            ("wait_decision", "advanced"),
            ("record_decision", "advanced"),
            ("route", "advanced"),
            ("ship", "advanced"),
            ("done", "ended"),
        ],
    }
    assert {s.attributes["plaita.node.attempt"] for s in nodes} == {1}
    assert {s.attributes["plaita.node.type"] for s in nodes} == {"task", "if", "event", "end"}

    [publish] = collector.named("publish ")
    [filtered] = collector.named("filter ")
    assert publish.service == "plaita-cli" and filtered.service == "filter"
    assert (filtered.trace_id, filtered.parent_id) == (publish.trace_id, publish.span_id)
    suspending = next(s for s in nodes if s.node == ("wait_decision", "suspended"))
    resuming = next(s for s in nodes if s.node == ("wait_decision", "advanced"))
    assert set(resuming.links) == {
        (suspending.trace_id, suspending.span_id),
        (filtered.trace_id, filtered.span_id),
    }


#: The packages the ``otel`` extra installs. The OpenTelemetry API is not among them: FastAPI
#: (from 0.16x on) depends on it and imports it itself; redis-py imports the SDK's metrics
#: when they can be imported. Tracing is what plaita must leave alone.
EXTRA_PACKAGES = ("opentelemetry.sdk", "opentelemetry.exporter", "opentelemetry.proto")
TRACING_MODULES = (
    "opentelemetry.sdk.trace",
    "opentelemetry.exporter",
    "opentelemetry.proto",
    "plaita.adapters.otel.tracer",
)

#: Runs ``plaita demo`` and prints, at exit, the tracing modules that were imported. With
#: BLOCK set the extra's packages cannot be imported, as when it is not installed.
DEMO = textwrap.dedent(
    f"""
    import atexit
    import os
    import sys

    def within(name, packages):
        return any(name == package or name.startswith(package + ".") for package in packages)

    class NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if within(name, {EXTRA_PACKAGES!r}):
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    if os.environ.get("BLOCK"):
        sys.meta_path.insert(0, NotInstalled())

    def imported():
        found = sorted(name for name in sys.modules if within(name, {TRACING_MODULES!r}))
        print("TRACING_MODULES=" + ",".join(found), file=sys.stderr)

    atexit.register(imported)
    from plaita.entrypoints.cli import main

    sys.argv = ["plaita", "demo"]
    main()
    """
)


def run_demo(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "demo.py"
    script.write_text(DEMO)
    environ = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=REPO_ROOT,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def imported_modules(done: subprocess.CompletedProcess[str]) -> list[str]:
    [line] = [line for line in done.stderr.splitlines() if line.startswith("TRACING_MODULES=")]
    listed = line.split("=", 1)[1]
    return listed.split(",") if listed else []


def test_without_the_extra_tracing_asked_for_is_a_warning_and_nothing_is_imported(
    tmp_path: Path,
) -> None:
    done = run_demo(tmp_path, BLOCK="1", OTEL_TRACES_EXPORTER="console")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("completed") >= 2
    assert "event=tracing.sdk_missing" in done.stderr and "plaita[otel]" in done.stderr
    assert imported_modules(done) == []


def test_with_the_extra_installed_and_tracing_off_no_tracing_module_is_imported(
    tmp_path: Path,
) -> None:
    done = run_demo(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("completed") >= 2
    assert "event=tracing" not in done.stderr
    assert imported_modules(done) == []


def test_the_console_exporter_prints_every_node_span(tmp_path: Path) -> None:
    done = run_demo(tmp_path, OTEL_TRACES_EXPORTER="console")
    assert done.returncode == 0, done.stderr
    assert "plaita.adapters.otel.tracer" in imported_modules(done)
    # Printed at exit: the small execution's 6 node spans, the large one's 8 (its wait twice).
    assert done.stdout.count('"plaita.node.id"') == 14
    assert done.stdout.count('"name": "execution approval"') == 2


APPLICATION_PROVIDER = textwrap.dedent(
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from plaita.entrypoints.container import build_container
    from plaita.entrypoints.settings import Settings

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)
    tracer = build_container(Settings(backend="memory")).tracer()
    tracer.start_execution(execution_id="x-1", flow_id="f", tenant_id="default")
    print(type(tracer).__name__, [span.name for span in spans.get_finished_spans()])
    """
)


def test_an_application_that_set_up_opentelemetry_gets_plaitas_spans() -> None:
    environ = {name: value for name, value in os.environ.items() if not name.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", APPLICATION_PROVIDER],
        cwd=REPO_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "OtelTracer ['execution f']"
