"""Optional OpenTelemetry tracing: a span per gRPC call, exported as the OTEL_* variables say.

Off by default and not a dependency: `pip install 'npu-config-resolver[tracing]'` brings the
packages. The exporters follow OpenTelemetry's standard variables: OTEL_TRACES_EXPORTER
(`otlp`, the default, `console`, `none`, or several joined by commas), the OTLP protocol
(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL: `grpc`, the default, or
`http/protobuf`), and whatever else the SDK reads itself (endpoint, headers, sampler, service
name...). A value this server cannot honour stops the start, rather than spans going quietly
elsewhere than the operator asked.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable, Mapping
from typing import Final
from urllib.parse import urlparse

REQUIRED: Final = (
    ("opentelemetry.sdk", "opentelemetry-sdk"),
    ("opentelemetry.instrumentation.grpc", "opentelemetry-instrumentation-grpc"),
)
OTLP_PACKAGES: Final = {
    "grpc": ("opentelemetry.exporter.otlp.proto.grpc", "opentelemetry-exporter-otlp-proto-grpc"),
    "http/protobuf": (
        "opentelemetry.exporter.otlp.proto.http",
        "opentelemetry-exporter-otlp-proto-http",
    ),
}
EXPORTERS: Final = ("otlp", "console", "none")
TLS_FILES: Final = ("CERTIFICATE", "CLIENT_KEY", "CLIENT_CERTIFICATE")
"""The OTLP exporter's TLS files, named by OTEL_EXPORTER_OTLP_TRACES_<kind>, else
OTEL_EXPORTER_OTLP_<kind>."""
FLUSH_S: Final = 2.0
"""How long the spans still held get to leave as a worker stops. An OTLP collector that does not
answer is retried for OTEL_EXPORTER_OTLP_TIMEOUT (10 s): its spans are lost rather than the stop
held that long."""


def exporter_names(environ: Mapping[str, str]) -> tuple[str, ...]:
    """OTEL_TRACES_EXPORTER read as the SDK reads it: comma-separated, blank means `otlp`."""
    names = [n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",")]
    return tuple(dict.fromkeys(n for n in names if n)) or ("otlp",)


def otlp_protocol(environ: Mapping[str, str]) -> str:
    """The OTLP protocol for traces: the traces variable first, then the general one."""
    for name in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = environ.get(name, "").strip().lower()
        if value:
            return value
    return "grpc"


def settings_problem(environ: Mapping[str, str]) -> str | None:
    """Why the exporter variables cannot be honoured, or None."""
    names = exporter_names(environ)
    unknown = [n for n in names if n not in EXPORTERS]
    if unknown:
        return (
            f"OTEL_TRACES_EXPORTER names {', '.join(unknown)}: this server exports to "
            f"{', '.join(EXPORTERS[:-1])} or {EXPORTERS[-1]}"
        )
    if "none" in names and len(names) > 1:
        return "OTEL_TRACES_EXPORTER: none cannot be given with an exporter"
    if "otlp" in names and otlp_protocol(environ) not in OTLP_PACKAGES:
        return (
            f"OTLP protocol {otlp_protocol(environ)}: this server sends traces over "
            f"{' or '.join(OTLP_PACKAGES)}"
        )
    if "otlp" in names:
        return unreadable_tls_file(environ)
    return None


def uses_tls(environ: Mapping[str, str]) -> bool:
    """Whether the OTLP exporter connects over TLS, as the SDK decides it: an https endpoint
    does; for gRPC, else the INSECURE variables, else any endpoint but http (the default,
    http://localhost:4317, does not)."""
    grpc = otlp_protocol(environ) == "grpc"
    endpoint = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or ("http://localhost:4317" if grpc else "http://localhost:4318")
    )
    scheme = urlparse(endpoint).scheme
    if scheme == "https" or not grpc:
        return scheme == "https"
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE"):
        insecure = environ.get(variable)
        if insecure is not None:
            return insecure.lower() != "true"
    return scheme != "http"


def tls_files(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The TLS files (variable, path) the OTLP exporter will read. Over gRPC, one set: the
    traces variables when their CERTIFICATE is set, else the general ones, and only with a
    CERTIFICATE; over HTTP, each file from its traces variable, else the general one."""
    if not uses_tls(environ):
        return []
    traces, general = "OTEL_EXPORTER_OTLP_TRACES_", "OTEL_EXPORTER_OTLP_"
    if otlp_protocol(environ) == "grpc":
        prefix = traces if environ.get(f"{traces}CERTIFICATE") else general
        if not environ.get(f"{prefix}CERTIFICATE"):
            return []
        named = [f"{prefix}{kind}" for kind in TLS_FILES]
    else:
        named = [
            f"{traces}{kind}" if environ.get(f"{traces}{kind}") else f"{general}{kind}"
            for kind in TLS_FILES
        ]
    return [(variable, environ[variable]) for variable in named if environ.get(variable)]


def unreadable_tls_file(environ: Mapping[str, str]) -> str | None:
    """A TLS file the exporter will read that cannot be read. The gRPC exporter logs a
    traceback and goes on with the system's CAs (not the operator's); the HTTP one fails every
    export: either way the spans do not go as asked."""
    for variable, path in tls_files(environ):
        try:
            with open(path, "rb") as file:
                file.read(1)
        except OSError as exc:
            return f"{variable}={path}: cannot read it ({exc.strerror or exc})"
    return None


def missing_packages(environ: Mapping[str, str] | None = None) -> list[str]:
    """The distributions tracing needs, as the exporter variables ask, that are not installed."""
    environ = os.environ if environ is None else environ
    needed = list(REQUIRED)
    if "otlp" in exporter_names(environ):
        needed.append(OTLP_PACKAGES.get(otlp_protocol(environ), OTLP_PACKAGES["grpc"]))
    missing = []
    for module, package in needed:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(package)
    return missing


def start_tracing(environ: Mapping[str, str] | None = None) -> Callable[[], None]:
    """Install a tracer provider with the exporters asked for and instrument the grpc.aio
    server. Returns what sends the spans still held, for at most FLUSH_S: a worker leaves with
    os._exit, which skips the SDK's own flush at exit (and that one has no bound)."""
    from opentelemetry import trace
    from opentelemetry.instrumentation.grpc import GrpcAioInstrumentorServer
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    environ = os.environ if environ is None else environ
    name = environ.get("OTEL_SERVICE_NAME", "npu-resolver")
    provider = TracerProvider(
        resource=Resource.create({"service.name": name}), shutdown_on_exit=False
    )
    for exporter_name in exporter_names(environ):
        exporter: SpanExporter
        if exporter_name == "console":
            exporter = ConsoleSpanExporter()
        elif exporter_name == "otlp" and otlp_protocol(environ) == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter as HttpExporter,
            )

            exporter = HttpExporter()
        elif exporter_name == "otlp":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

            exporter = OTLPSpanExporter()
        else:  # none
            continue
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    GrpcAioInstrumentorServer().instrument()  # type: ignore[no-untyped-call, unused-ignore]

    def flush() -> None:
        sending = threading.Thread(target=provider.shutdown, name="span-flush", daemon=True)
        sending.start()
        sending.join(FLUSH_S)

    return flush
