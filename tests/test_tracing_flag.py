"""`serve --tracing` is opt-in: without the extra installed it says what to install, and the
spans go where OpenTelemetry's standard variables say.

The development install carries the extra: the tests that serve spans run the real SDK, and its
absence is simulated where that is the point."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from npu_resolver_client import ResolverClient
from npu_resolver_server import _app, _cli, _tracing
from tests._server import ProcessServer, free_port


@pytest.fixture(autouse=True)
def _no_otel_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the developer's shell exports must not decide these tests."""
    for name in [name for name in os.environ if name.startswith("OTEL_")]:
        monkeypatch.delenv(name)


def _no_server(*args: Any, **kwargs: Any) -> int:
    pytest.fail("the server was started although the tracing packages are missing")


def test_tracing_without_the_extra_names_the_packages_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    absent = ["opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-grpc"]
    monkeypatch.setattr(_tracing, "missing_packages", lambda: list(absent))
    monkeypatch.setattr(_app, "run_worker", _no_server)
    assert _cli.main(["--port", "0", "--tracing"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'npu-config-resolver[tracing]'" in err
    assert all(package in err for package in absent)
    assert "opentelemetry-instrumentation-grpc" not in err  # only what is missing is named


def test_missing_packages_names_each_distribution_whose_module_is_absent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    absent = "opentelemetry.instrumentation.grpc"
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *args: None if name == absent else object()
    )
    assert _tracing.missing_packages() == ["opentelemetry-instrumentation-grpc"]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: object())
    assert _tracing.missing_packages() == []


@pytest.mark.parametrize(
    ("environ", "problem"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER names zipkin"),
        ({"OTEL_TRACES_EXPORTER": "console,jaeger"}, "names jaeger"),
        ({"OTEL_TRACES_EXPORTER": "none,otlp"}, "none cannot be given with an exporter"),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, "OTLP protocol http/json"),
        ({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc/web"}, "OTLP protocol grpc/web"),
        (  # the gRPC exporter logged a traceback and sent spans trusting the system's CAs
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4317",
                "OTEL_EXPORTER_OTLP_CERTIFICATE": "/no-such-dir/ca.pem",
            },
            "OTEL_EXPORTER_OTLP_CERTIFICATE=/no-such-dir/ca.pem: cannot read it "
            "(No such file or directory)",
        ),
        (  # an endpoint with no scheme is TLS to the gRPC exporter; the traces set is the one
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317",
                "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": "/",
                "OTEL_EXPORTER_OTLP_CERTIFICATE": "/no-such-dir/ca.pem",
            },
            "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE=/: cannot read it (Is a directory)",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://collector:4318/v1/traces",
                "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": "/no-such-dir/client.pem",
            },
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE=/no-such-dir/client.pem",
        ),
    ],
)
def test_exporter_variables_the_server_cannot_honour_stop_the_start_naming_them(
    environ: dict[str, str],
    problem: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Spans sent quietly to localhost:4317 when the operator asked for another exporter are
    lost spans: the start stops (exit 2) and says which value it cannot honour."""
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(_app, "run_worker", _no_server)
    assert _cli.main(["--port", "0", "--tracing"]) == 2
    assert problem in capsys.readouterr().err


@pytest.mark.parametrize("missing", [False, True])
def test_a_tracing_setting_that_stops_the_start_is_a_start_failed_json_line_too(
    missing: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a log pipeline reads: the plain line, then `start_failed` with its text."""
    if missing:
        monkeypatch.setattr(_tracing, "missing_packages", lambda: ["opentelemetry-sdk"])
    else:
        monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    monkeypatch.setattr(_app, "run_worker", _no_server)
    assert _cli.main(["--port", "0", "--tracing"]) == 2
    plain, line = capsys.readouterr().err.splitlines()
    said = "--tracing needs opentelemetry-sdk" if missing else "--tracing: OTEL_TRACES_EXPORTER"
    assert plain.startswith(f"npu-resolve serve: {said}")
    failed = json.loads(line)
    assert (failed["event"], failed["level"]) == ("start_failed", "ERROR")
    assert failed["error"] == plain.removeprefix("npu-resolve serve: ")


@pytest.mark.parametrize(
    ("environ", "names", "otlp_package"),
    [
        ({}, ("otlp",), "opentelemetry-exporter-otlp-proto-grpc"),
        ({"OTEL_TRACES_EXPORTER": " Console , otlp "}, ("console", "otlp"), "-grpc"),
        ({"OTEL_TRACES_EXPORTER": "none"}, ("none",), None),
        ({"OTEL_TRACES_EXPORTER": "console"}, ("console",), None),
        (
            {
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            },
            ("otlp",),
            "opentelemetry-exporter-otlp-proto-http",
        ),
        ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, ("otlp",), "-http"),
    ],
)
def test_the_exporters_and_the_package_they_need_follow_the_standard_variables(
    environ: dict[str, str],
    names: tuple[str, ...],
    otlp_package: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As the SDK reads them: comma-separated, any case, blank means otlp; the traces protocol
    before the general one. Only the OTLP exporter asked for must be installed."""
    assert _tracing.exporter_names(environ) == names
    assert _tracing.settings_problem(environ) is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)
    missing = _tracing.missing_packages(environ)
    assert missing[:2] == ["opentelemetry-sdk", "opentelemetry-instrumentation-grpc"]
    otlp = [package for package in missing if "otlp" in package]
    if otlp_package is None:
        assert otlp == []
    else:
        assert len(otlp) == 1 and otlp[0].endswith(otlp_package)


@pytest.mark.parametrize(
    "plaintext",
    [
        {},  # the default endpoint, http://localhost:4317
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317", "OTEL_EXPORTER_OTLP_INSECURE": "true"},
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
        {"OTEL_TRACES_EXPORTER": "console"},
    ],
)
def test_tls_files_the_exporter_would_not_read_do_not_stop_the_start(
    plaintext: dict[str, str],
) -> None:
    """A leftover CA variable beside a plaintext collector (or no OTLP exporter) is not read by
    the SDK: a server that served with it still does."""
    unread = {"OTEL_EXPORTER_OTLP_CERTIFICATE": "/no/ca.pem", **plaintext}
    assert _tracing.settings_problem(unread) is None


def test_over_grpc_a_client_key_without_a_ca_is_not_read_and_a_readable_ca_passes(
    tmp_path: Path,
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    tls = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4317"}
    assert _tracing.settings_problem({**tls, "OTEL_EXPORTER_OTLP_CERTIFICATE": str(ca)}) is None
    assert _tracing.settings_problem({**tls, "OTEL_EXPORTER_OTLP_CLIENT_KEY": "/no/key"}) is None
    both = {
        **tls,
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(ca),
        "OTEL_EXPORTER_OTLP_CLIENT_KEY": "/no/k",
    }
    assert "OTEL_EXPORTER_OTLP_CLIENT_KEY=/no/k" in str(_tracing.settings_problem(both))


def test_spans_go_where_otel_traces_exporter_says_and_a_stop_does_not_lose_them(
    tmp_path: Path,
) -> None:
    """OTEL_TRACES_EXPORTER=console prints each call's span; a worker leaves with os._exit,
    which skips the SDK's own flush at exit, so the spans it holds are sent as it stops (the
    batch would wait five seconds; the stop comes sooner)."""
    spans = tmp_path / "spans.out"
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "resolver-under-test"}
    server = ProcessServer(["--workers", "2", "--tracing"], env=env, stdout=spans)
    try:
        server.start(ready_events=2)
        with ResolverClient(server.target) as client:
            answer = client.resolve("atlas-a2", {"hccl_timeout": 600})
        assert answer.ok
        server.signal(signal.SIGTERM)
        assert server.wait() == 0, server.raw
    finally:
        server.stop()
    printed = spans.read_text()
    assert "/npu.resolver.v1.Resolver/Resolve" in printed, printed
    assert "resolver-under-test" in printed


def test_a_collector_that_does_not_answer_does_not_hold_the_stop() -> None:
    """The OTLP exporter retries a collector for OTEL_EXPORTER_OTLP_TIMEOUT; at a stop the spans
    held get FLUSH_S to leave, then are dropped, rather than the stop waiting out the retries
    (past a pod's grace period, the kubelet's SIGKILL would end it anyway)."""
    env = {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",  # nothing listens
        "OTEL_EXPORTER_OTLP_TIMEOUT": "60",
    }
    server = ProcessServer(["--tracing", "--drain-delay-seconds", "0"], env=env)
    try:
        server.start()
        with ResolverClient(server.target) as client:
            assert client.resolve("atlas-a2", {"hccl_timeout": 600}).ok
        began = time.monotonic()
        server.signal(signal.SIGTERM)
        assert server.wait(60) == 0, server.raw
        assert time.monotonic() - began < _tracing.FLUSH_S + 15, "the stop waited for the retries"
    finally:
        server.stop()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_otel_value_the_sdk_refuses_stops_the_start_with_exit_2(workers: str) -> None:
    """OTEL_EXPORTER_OTLP_TIMEOUT=abc made the exporter raise: a traceback and exit 1 for one
    worker, workers failing and restarted until they 'keep dying' for several. A start
    failure is said as one: the value, exit 2, no restarts."""
    env = {"OTEL_EXPORTER_OTLP_TIMEOUT": "abc"}
    server = ProcessServer(["--tracing", "--workers", workers], env=env)
    assert server.start_refused() == 2
    failed = server.events("start_failed")
    assert failed and "--tracing" in failed[0]["error"] and "abc" in failed[0]["error"], server.raw
    assert not server.events("worker_failed") and not server.events("workers_keep_dying")
    assert not any("Traceback" in line for line in server.raw), server.raw
