"""The benchmark scripts' own behaviour: figures a user reads must come from what they claim."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from benchmarks import run
from benchmarks.handler_bench import handler_figures


def test_handler_figures_time_each_kind_of_call_and_leave_logging_as_it_was() -> None:
    root = logging.getLogger("npu_resolver_server")
    before = root.handlers[:], root.level, root.propagate
    figures = handler_figures(40)
    assert (root.handlers[:], root.level, root.propagate) == before
    assert all(value > 0 for value in figures.values()), figures
    # Which is faster is for the benchmark to print, not for a test on a shared machine to judge.
    assert set(figures) == {
        "handler_distinct_us",
        "handler_hit_us",
        "handler_echo_us",
        *(f"handler_stage_{name}_us" for name in ("parse", "build", "core", "encode")),
    }


def test_handler_figures_after_eviction_time_whole_calls_only() -> None:
    """`--evict-mb`: each call timed after other memory is read, as served; no stages."""
    root = logging.getLogger("npu_resolver_server")
    before = root.handlers[:], root.level, root.propagate
    figures = handler_figures(40, evict_mb=0.01)
    assert (root.handlers[:], root.level, root.propagate) == before
    assert all(value > 0 for value in figures.values()), figures
    assert set(figures) == {
        "evict_mb",
        "handler_distinct_us",
        "handler_hit_us",
        "handler_echo_us",
    }


def _results() -> dict[str, Any]:
    """Results as `measure` writes them, without the handler's figures (as before they were
    measured), every figure 1."""
    point = {
        "rps": 1.0,
        "p50_ms": 1.0,
        "p99_ms": 1.0,
        "errors": 0,
        "lost": 0,
        "server_cpu_us_per_call": 1.0,
        "other_cpu_cores": 0.0,
    }
    core = {f"core_{n}_us_{q}": 1.0 for n in ("empty", "typical", "full") for q in ("p50", "p99")}
    return {
        **dict.fromkeys(("mode", "date", "cpu_model", "python", "grpcio", "server_flags"), "x"),
        "nproc": 2,
        "plan": {"requests": {str(n): 1 for n in run.INFLIGHT}, "rounds": 1},
        "points": {
            str(n): dict.fromkeys(("echo", "distinct", "repeat"), point) for n in run.INFLIGHT
        },
        "repeat_mix": "x",
        "other_cpu_cores_max": 0.0,
        "workers": {"1": {"rps": 1.0}, "2": {"rps": 1.0}},
        "workers2_to_1": 1.0,
        "workers2_answering": 2,
        "workers2_limit": "x",
        "batch": {"batch_size": 1, "server_cpu_us_per_config": 1.0},
        "batch_configs_per_s": 1.0,
        "batch_to_unary": 1.0,
        **core,
        "floor_full_us": 1.0,
        "core_full_to_floor": 1.0,
        "scaling_points_us": {},
        "scaling_slope_us_per_option": 1.0,
        "scaling_max_deviation_from_line": 0.0,
        "cli_start_ms": 1.0,
        "pydantic_import_ms": 1.0,
        "cli_start_ratio": 1.0,
        "rss_mb": {"1000": 1.0, "100000": 3.0, "50000": 2.0},
        "rss_growth_mb": 2.0,
        "rss_note": "x",
        "errors_total": 0,
        "lost_total": 0,
        "elapsed_s": 1.0,
    }


def test_the_table_reads_results_written_before_the_handler_figures(tmp_path: Path) -> None:
    older = _results()
    text = run.table(older, tmp_path / "older.json")
    assert "Resolve handler in process" not in text
    assert text.endswith(f"written to {tmp_path / 'older.json'}")
    assert "1,000: 1.0, 50,000: 2.0, 100,000: 3.0" in text  # in order, as read back
    stages = {f"handler_stage_{n}_us": 1.0 for n in ("parse", "build", "core", "encode")}
    newer = {
        **older,
        **stages,
        "handler_distinct_us": 5.0,
        "handler_hit_us": 0.5,
        "handler_echo_us": 0.4,
    }
    assert "distinct 5.0 (read 1.0 + 1.0, core 1.0, encode 1.0), cached 0.5" in run.table(newer)
