"""`serve --tracing` is opt-in: without the extra installed it says what to install.

Whether the extra is installed here does not matter: its absence is simulated."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from npu_resolver_server import _app, _cli, _tracing


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
