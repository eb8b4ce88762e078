"""The benchmark scripts' own behaviour: figures a user reads must come from what they claim."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from benchmarks import run
from benchmarks.handler_bench import handler_figures


def test_handler_figures_time_each_kind_of_call_and_leave_logging_as_it_was() -> None:
    root = logging.getLogger("npu_resolver_server")
    before = root.handlers[:], root.level, root.propagate
    figures = handler_figures(40)
    assert (root.handlers[:], root.level, root.propagate) == before
    assert all(value > 0 for value in figures.values()), figures
    stages = sum(
        figures[f"handler_stage_{name}_us"] for name in ("parse", "build", "core", "encode")
    )
    # A cached answer skips all four stages; a distinct one goes through each.
    assert figures["handler_hit_us"] < figures["handler_stage_core_us"] < stages
    assert figures["handler_hit_us"] < figures["handler_distinct_us"]


def test_the_table_reads_results_written_before_the_handler_figures(tmp_path: Path) -> None:
    saved = json.loads(run.RESULTS.read_text(encoding="utf-8"))
    older = {k: v for k, v in saved.items() if not k.startswith("handler_")}
    text = run.table(older, tmp_path / "older.json")
    assert "Resolve handler in process" not in text
    assert text.endswith(f"written to {tmp_path / 'older.json'}")
    newer = {
        **older,
        **dict.fromkeys(
            (f"handler_stage_{n}_us" for n in ("parse", "build", "core", "encode")), 1.0
        ),
        "handler_distinct_us": 5.0,
        "handler_hit_us": 0.5,
        "handler_echo_us": 0.4,
    }
    assert "distinct 5.0 (read 1.0 + 1.0, core 1.0, encode 1.0), cached 0.5" in run.table(newer)
    rss = run.table({**older, "rss_mb": {"1000": 1.0, "100000": 3.0, "50000": 2.0}})
    assert "1,000: 1.0, 50,000: 2.0, 100,000: 3.0" in rss
