"""Sustained load against `serve --workers 2`: no failed call, no lost or mixed-up reply.

The load generator is the benchmarks' (benchmarks/load.py): every request carries a unique id
that its reply must contain. Nothing here asserts on speed; p99 is reported.
"""

from __future__ import annotations

import asyncio

import pytest

from benchmarks.load import distinct, run_load
from tests._server import ProcessServer
from tests.reliability._common import Figures

INFLIGHT = 64
CHANNELS = 8  # connections: the kernel spreads connections, not calls, over the workers


def _load(seconds: float, figures: Figures) -> None:
    with ProcessServer(["--workers", "2"]) as server:
        server.wait_for("serving", 2)
        workers = [int(e["pid"]) for e in server.events("serving")]
        result = asyncio.run(
            run_load(
                server.target,
                distinct(20_000, "load"),  # cycled when the run outlasts them
                inflight=INFLIGHT,
                requests=10_000_000,
                time_limit_s=seconds,
                channels=CHANNELS,
                timeout_s=30,
                warmup=distinct(100, "loadw"),
                cpu_pids=workers,
            )
        )
    line = figures(
        "load",
        requests=result["requests"],
        errors=result["errors"],
        lost=result["lost"],
        p50_ms=result["p50_ms"],
        p99_ms=result["p99_ms"],
        rps=result["rps"],
        seconds=result["elapsed_s"],
        inflight=INFLIGHT,
        workers_answering=len(result["server_pids"]),
    )
    assert result["requests"] > 0, line
    assert result["errors"] == 0, result["error_codes"]
    assert result["lost"] == 0, line


def test_load(figures: Figures) -> None:
    _load(3.0, figures)


@pytest.mark.soak
def test_load_soak(figures: Figures) -> None:
    _load(30.0, figures)
