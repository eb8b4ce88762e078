"""The reliability suite: quick forms run with every `pytest`; soak forms only with `-m soak`.

Soak items are deselected (and counted as such in pytest's summary) unless the `-m` expression
names `soak`, so a plain `pytest` stays short without `addopts`. Each test reports one line of
figures through the `figures` fixture: the lines are printed at the end of the run. With
--record-figures (as `make soak` runs it) they are also written to benchmarks/reliability.json for
the README's reliability table; a plain test run leaves the checkout as it found it.
"""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

RELIABILITY_JSON = Path(__file__).resolve().parents[2] / "benchmarks" / "reliability.json"

_lines: dict[str, tuple[str, dict[str, Any]]] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "soak" in (config.getoption("markexpr", "") or ""):
        return
    soak = [item for item in items if item.get_closest_marker("soak") is not None]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if item.get_closest_marker("soak") is None]


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Callable[..., str]:
    """`figures("load", requests=..., errors=0)`: record this test's line of figures."""
    soak = request.node.get_closest_marker("soak") is not None

    def report(name: str, **values: Any) -> str:
        key = f"{name} (soak)" if soak else name
        line = f"reliability {key}: " + ", ".join(f"{k}={v}" for k, v in values.items())
        _lines[key] = (line, values)
        return line

    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _lines:
        return
    terminalreporter.write_sep("-", "reliability figures")
    for line, _values in _lines.values():
        terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if not _lines or not session.config.getoption("record_figures"):
        return
    data: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(RELIABILITY_JSON.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        data = {}
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    for key, (line, values) in _lines.items():
        data[key] = {"line": line, "date": stamp, **values}
    with contextlib.suppress(OSError):
        RELIABILITY_JSON.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
