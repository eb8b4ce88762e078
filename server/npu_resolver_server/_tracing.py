"""Optional OpenTelemetry tracing: a span per gRPC call, exported as the OTEL_* variables say.

Off by default and not a dependency: `pip install 'npu-config-resolver[tracing]'` brings the
packages. Exporter, endpoint, sampling and service name follow OpenTelemetry's standard
environment variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_SAMPLER, OTEL_SERVICE_NAME...).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Final

REQUIRED: Final = (
    ("opentelemetry.sdk", "opentelemetry-sdk"),
    ("opentelemetry.instrumentation.grpc", "opentelemetry-instrumentation-grpc"),
    ("opentelemetry.exporter.otlp.proto.grpc", "opentelemetry-exporter-otlp-proto-grpc"),
)


def missing_packages() -> list[str]:
    """The distributions tracing needs that are not installed."""
    missing = []
    for module, package in REQUIRED:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(package)
    return missing


def start_tracing() -> None:
    """Install a tracer provider with an OTLP exporter and instrument the grpc.aio server."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.grpc import GrpcAioInstrumentorServer
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME", "npu-resolver")
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    GrpcAioInstrumentorServer().instrument()
