"""`make bench`: the resolver against the transport's ceiling, measured side by side in one run.

    python benchmarks/run.py            # quick form, under two minutes on 2 cores
    python benchmarks/run.py --full     # the README's figures: more requests, 3 rounds each

Servers are subprocesses on 127.0.0.1 (an echo server with the same method and messages, and
the resolver), driven one at a time by the same load generator in its own process
(benchmarks/load.py). Every loop is bounded in count and in time; every server is stopped by
its PID, also on failure. Writes benchmarks/results.json and prints a table. Exits 1 when a
call failed or a reply was lost, so that a broken server never yields a quiet table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: `python benchmarks/run.py`

from benchmarks import _procs  # noqa: E402
from benchmarks.core_bench import cli_start, core_figures, scaling  # noqa: E402
from benchmarks.handler_bench import handler_figures  # noqa: E402

RESULTS: Final = ROOT / "benchmarks" / "results.json"
INFLIGHT: Final = (1, 16, 64)
WORKERS_CHANNELS: Final = 8
"""Connections for the --workers comparison: the kernel spreads connections, not calls."""


@dataclass(frozen=True)
class Plan:
    mode: str
    core_count: int
    cli_runs: int
    requests: dict[int, int]
    """Timed calls per load point, by calls in flight."""
    warmup: int
    rounds: int
    """Each load point is run this many times, interleaved; the median round is reported."""
    workers_requests: int
    batch_calls: int
    batch_size: int
    rss_checkpoints: tuple[int, ...]
    time_limit_s: float
    """Upper bound on one load run's timed part."""


QUICK: Final = Plan(
    mode="quick",
    core_count=2000,
    cli_runs=5,
    requests={1: 800, 16: 2500, 64: 3000},
    warmup=200,
    rounds=1,
    workers_requests=3000,
    batch_calls=4,
    batch_size=1000,
    rss_checkpoints=(1000, 5000),
    time_limit_s=30.0,
)
FULL: Final = Plan(
    mode="full",
    core_count=20_000,
    cli_runs=15,
    requests={1: 3000, 16: 15_000, 64: 20_000},
    warmup=500,
    rounds=3,
    workers_requests=20_000,
    batch_calls=20,
    batch_size=1000,
    rss_checkpoints=(1000, 10_000, 50_000, 100_000),
    time_limit_s=240.0,
)


def _machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import grpc

    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": os.cpu_count() or 0,
        "cpu_model": model or platform.processor() or "unknown",
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "platform": platform.platform(terse=True),
    }


def _load(
    target: str,
    workload: str,
    requests: int,
    plan: Plan,
    *,
    inflight: int = 1,
    channels: int = 1,
    warmup: int | None = None,
    cpu_pids: Sequence[int] = (),
    tag: str,
) -> dict[str, Any]:
    """One run of the load generator in its own process; its JSON result."""
    argv = [
        sys.executable,
        "-m",
        "benchmarks.load",
        "--target",
        target,
        "--workload",
        workload,
        "--requests",
        str(requests),
        "--inflight",
        str(inflight),
        "--channels",
        str(channels),
        "--warmup",
        str(plan.warmup if warmup is None else warmup),
        "--time-limit",
        str(plan.time_limit_s),
        "--tag",
        tag,
        "--cpu-pids",
        ",".join(str(p) for p in cpu_pids),
    ]
    if workload == "batch":
        argv += ["--batch-size", str(plan.batch_size)]
    done = subprocess.run(
        argv,
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=plan.time_limit_s * 2 + 120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed ({' '.join(argv)}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median req/s, with every round's req/s alongside."""
    ordered = sorted(rounds, key=lambda r: float(r["rps"]))
    chosen = dict(ordered[len(ordered) // 2])
    chosen["rounds_rps"] = [r["rps"] for r in rounds]
    chosen["errors"] = sum(int(r["errors"]) for r in rounds)
    chosen["lost"] = sum(int(r["lost"]) for r in rounds)
    return chosen


def _cpu_ratio(echo: dict[str, Any], result: dict[str, Any]) -> float | None:
    """Echo's server CPU per call over this server's: 1.0 is the transport's own cost."""
    mine, ceiling = result["server_cpu_us_per_call"], echo["server_cpu_us_per_call"]
    return round(ceiling / mine, 2) if mine and ceiling else None


def _shown(ratio: float | None) -> str:
    return "" if ratio is None else f"{ratio:.2f}"


def _limit(result: dict[str, Any], nproc: int) -> str:
    """What bounds a run, from the CPU the client and the servers used in it."""
    client = float(result["client_cpu_cores"])
    server = float(result["server_cpu_cores"])
    other = float(result.get("other_cpu_cores") or 0.0)
    used = f"client {client:.2f} + servers {server:.2f} + other processes {other:.2f} cores"
    if client + server + other >= 0.85 * nproc:
        return (
            f"CPU: the {nproc} cores are busy ({used}); a second worker only gets the CPU the "
            f"client and the other processes leave"
        )
    if client >= 0.85:
        return f"the client: one process at {client:.2f} cores cannot send faster ({used})"
    return f"neither CPU nor client saturated ({used}): latency-bound"


def measure(plan: Plan, log_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": plan.mode, **_machine()}
    from npu_resolver_server import ServerSettings

    fields = ServerSettings.model_fields
    out["server_flags"] = (
        f"defaults (cache {fields['cache_entries'].default} entries, "
        f"log level {fields['log_level'].default})"
    )
    out["repeat_mix"] = "95% of requests from 300 recurring configs (cache warm), 5% one-offs"

    started = time.perf_counter()
    # 1. The core in process, before any server runs.
    out.update(core_figures(plan.core_count))
    out.update(scaling(plan.core_count // 2))
    out.update(handler_figures(plan.core_count))
    out.update(cli_start(plan.cli_runs))

    servers = {
        "echo": _procs.Server("echo", "benchmarks.echo_server", [], log_dir),
        "distinct": _procs.Server("resolver-distinct", "npu_resolver_server", [], log_dir),
        "repeat": _procs.Server("resolver-repeat", "npu_resolver_server", [], log_dir),
    }
    try:
        for server in servers.values():
            server.start()
        for server in servers.values():
            server.wait_ready()

        # 2. Echo and resolver under the same load, interleaved point by point.
        runs: dict[str, dict[int, list[dict[str, Any]]]] = {k: {} for k in servers}
        for round_ in range(plan.rounds):
            for n in INFLIGHT:
                for kind, server in servers.items():
                    workload = "repeat" if kind == "repeat" else "distinct"
                    runs[kind].setdefault(n, []).append(
                        _load(
                            server.target,
                            workload,
                            plan.requests[n],
                            plan,
                            inflight=n,
                            cpu_pids=server.pids,
                            tag=f"{kind}{round_}n{n}",
                        )
                    )
        points: dict[str, Any] = {}
        for n in INFLIGHT:
            echo = _median_round(runs["echo"][n])
            dist = _median_round(runs["distinct"][n])
            rep = _median_round(runs["repeat"][n])
            points[str(n)] = {"echo": echo, "distinct": dist, "repeat": rep}
            for suffix, result in (("", dist), ("_repeat", rep)):
                out[f"server_rps_n{n}{suffix}"] = result["rps"]
                out[f"server_p50_ms_n{n}{suffix}"] = result["p50_ms"]
                out[f"server_p99_ms_n{n}{suffix}"] = result["p99_ms"]
                out[f"ratio_to_echo_n{n}{suffix}"] = round(result["rps"] / echo["rps"], 2)
                out[f"server_cpu_us_per_call_n{n}{suffix}"] = result["server_cpu_us_per_call"]
                # The same ratio by server CPU per call: what the client process and the rest
                # of the machine do during a run moves it far less than req/s.
                out[f"cpu_ratio_to_echo_n{n}{suffix}"] = _cpu_ratio(echo, result)
            out[f"echo_rps_n{n}"] = echo["rps"]
            out[f"echo_p50_ms_n{n}"] = echo["p50_ms"]
            out[f"echo_p99_ms_n{n}"] = echo["p99_ms"]
            out[f"echo_cpu_us_per_call_n{n}"] = echo["server_cpu_us_per_call"]
        out["points"] = points
        servers["echo"].stop()
        servers["repeat"].stop()

        # 3. One worker against two, over several connections.
        two = _procs.Server(
            "resolver-2-workers", "npu_resolver_server", ["--workers", "2"], log_dir
        )
        two.start().wait_ready()
        one_worker = _load(
            servers["distinct"].target,
            "distinct",
            plan.workers_requests,
            plan,
            inflight=64,
            channels=WORKERS_CHANNELS,
            cpu_pids=servers["distinct"].pids,
            tag="w1",
        )
        two_workers = _load(
            two.target,
            "distinct",
            plan.workers_requests,
            plan,
            inflight=64,
            channels=WORKERS_CHANNELS,
            cpu_pids=two.pids,
            tag="w2",
        )
        two.stop()
        out["workers"] = {"1": one_worker, "2": two_workers}
        out["workers1_rps_n64"] = one_worker["rps"]
        out["workers2_rps_n64"] = two_workers["rps"]
        out["workers2_to_1"] = round(two_workers["rps"] / one_worker["rps"], 2)
        out["workers2_answering"] = len(two_workers["server_pids"])
        out["workers2_limit"] = _limit(two_workers, int(out["nproc"]))

        # 4. Batch against unary.
        batch = _load(
            servers["distinct"].target,
            "batch",
            plan.batch_calls,
            plan,
            cpu_pids=servers["distinct"].pids,
            tag="batch",
        )
        out["batch"] = batch
        out["batch_configs_per_s"] = batch["configs_per_s"]
        out["batch_to_unary"] = round(batch["configs_per_s"] / out["server_rps_n64"], 1)
        servers["distinct"].stop()

        # 5. Memory: a fresh server's RSS after 1,000 requests and after more.
        fresh = _procs.Server("resolver-rss", "npu_resolver_server", [], log_dir)
        fresh.start().wait_ready()
        rss: dict[str, float] = {}
        sent = 0
        for checkpoint in plan.rss_checkpoints:
            result = _load(
                fresh.target,
                "distinct",
                checkpoint - sent,
                plan,
                inflight=64,
                warmup=0,
                tag=f"rss{checkpoint}",
            )
            out.setdefault("rss_runs", []).append(result)
            sent += int(result["requests"])
            rss[str(sent)] = round(fresh.rss_mb(), 1)
        fresh.stop()
        first, last = next(iter(rss.values())), list(rss.values())[-1]
        out["rss_mb"] = rss
        out["rss_requests"] = sent
        out["rss_growth_mb"] = round(last - first, 1)
        if sent < 100_000:
            out["rss_note"] = f"{plan.mode} form: RSS after {sent:,} requests, not 100,000 (--full)"
        else:
            out["rss_note"] = (
                "every request distinct: none recurs, so none is kept in the answer cache"
            )
        every = [r for kind in runs.values() for per_n in kind.values() for r in per_n]
        every += [one_worker, two_workers, batch, *out["rss_runs"]]
        out["errors_total"] = sum(int(r["errors"]) for r in every)
        out["other_cpu_cores_max"] = max(float(r.get("other_cpu_cores") or 0) for r in every)
        out["lost_total"] = sum(int(r["lost"]) for r in every)
    finally:
        for server in servers.values():
            server.stop()
        _procs.stop_all()
    out["elapsed_s"] = round(time.perf_counter() - started, 1)
    out["plan"] = {**asdict(plan), "requests": {str(n): c for n, c in plan.requests.items()}}
    return out


def _row(cells: Sequence[object], widths: Sequence[int]) -> str:
    """The first two columns left-aligned, the figures right-aligned."""
    pairs = enumerate(zip(cells, widths, strict=True))
    return "  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w) for i, (c, w) in pairs)


def table(r: dict[str, Any], written_to: Path = RESULTS) -> str:
    lines = [
        f"npu-config-resolver benchmarks, {r['mode']} form, {r['date']}",
        f"{r['nproc']} cores ({r['cpu_model']}), Python {r['python']}, grpcio {r['grpcio']}; "
        f"server {r['server_flags']}",
        "",
        "unary Resolve, 1 connection, one load-generator process; requests per point: "
        + ", ".join(f"N={n}: {r['plan']['requests'][str(n)]:,}" for n in INFLIGHT)
        + (f"; median of {r['plan']['rounds']} rounds" if r["plan"]["rounds"] > 1 else ""),
    ]
    widths = (4, 8, 9, 8, 8, 6, 4, 8, 12, 11, 11)
    header = ("N", "server", "req/s", "p50 ms", "p99 ms", "errors", "lost", "vs echo")
    lines.append(_row((*header, "CPU µs/call", "CPU vs echo", "other CPU"), widths))
    for n in INFLIGHT:
        point = r["points"][str(n)]
        for kind in ("echo", "distinct", "repeat"):
            p = point[kind]
            ratio = "1.00" if kind == "echo" else f"{p['rps'] / point['echo']['rps']:.2f}"
            cpu = p["server_cpu_us_per_call"]
            lines.append(
                _row(
                    (
                        n,
                        kind,
                        f"{p['rps']:,.0f}",
                        f"{p['p50_ms']:.2f}",
                        f"{p['p99_ms']:.2f}",
                        p["errors"],
                        p["lost"],
                        ratio,
                        "" if cpu is None else f"{cpu:,.0f}",
                        _shown(1.0 if kind == "echo" else _cpu_ratio(point["echo"], p)),
                        f"{p['other_cpu_cores'] or 0:.2f} cores",
                    ),
                    widths,
                )
            )
    lines.append(f"  repeat: {r['repeat_mix']}")
    lines.append(
        "  CPU µs/call: server CPU per call; CPU vs echo: echo's CPU per call over this server's "
        "(steadier than req/s); other CPU: cores busy with processes other than the client and "
        "the server"
    )
    if r["other_cpu_cores_max"] > 0.2:
        lines.append(
            f"  NOTE: other processes used up to {r['other_cpu_cores_max']:.2f} cores during the "
            "runs; the figures are lower than an idle machine's"
        )
    w1, w2 = r["workers"]["1"], r["workers"]["2"]
    lines += [
        "",
        f"--workers 2 (distinct, N=64, {WORKERS_CHANNELS} connections): "
        f"{w2['rps']:,.0f} req/s vs 1 worker {w1['rps']:,.0f} req/s = {r['workers2_to_1']:.2f}x; "
        f"{r['workers2_answering']} workers answered",
        f"  limit: {r['workers2_limit']}",
        "",
        f"ResolveBatch, {r['batch']['batch_size']:,} distinct configs a call: "
        f"{r['batch_configs_per_s']:,.0f} configs/s = {r['batch_to_unary']:.1f}x unary "
        f"(distinct, N=64); server CPU {r['batch']['server_cpu_us_per_config']} µs/config",
        "",
        "core in process (µs per resolve)       p50      p99",
    ]
    for name in ("empty", "typical", "full"):
        lines.append(
            f"  {name:<35}{r[f'core_{name}_us_p50']:>7.1f}  {r[f'core_{name}_us_p99']:>7.1f}"
        )
    lines += [
        f"  plain-Python floor (full config)   {r['floor_full_us']:>7.1f}"
        f"    full / floor = {r['core_full_to_floor']}x",
        f"  scaling: {r['scaling_points_us']} µs by option count; slope "
        f"{r['scaling_slope_us_per_option']} µs/option, max deviation from a line "
        f"{r['scaling_max_deviation_from_line']:.0%}",
        *_handler_line(r),
        f"  CLI cold start {r['cli_start_ms']} ms vs `import pydantic` "
        f"{r['pydantic_import_ms']} ms = {r['cli_start_ratio']}x",
        "",
        "server RSS (MiB) after N requests: "
        + ", ".join(f"{int(k):,}: {r['rss_mb'][k]}" for k in sorted(r["rss_mb"], key=int))
        + f"; growth {r['rss_growth_mb']} MiB",
        f"  {r['rss_note']}",
        "",
        f"errors {r['errors_total']}, lost replies {r['lost_total']}; took {r['elapsed_s']} s; "
        f"written to {_shown_path(written_to)}",
    ]
    return "\n".join(lines)


def _shown_path(path: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(ROOT) if resolved.is_relative_to(ROOT) else resolved)


def _handler_line(r: dict[str, Any]) -> list[str]:
    """The handler's figures, in results written since they were measured."""
    if "handler_distinct_us" not in r:
        return []
    return [
        "  Resolve handler in process, µs per call p50: "
        f"distinct {r['handler_distinct_us']} (read {r['handler_stage_parse_us']} + "
        f"{r['handler_stage_build_us']}, core {r['handler_stage_core_us']}, "
        f"encode {r['handler_stage_encode_us']}), cached {r['handler_hit_us']}, "
        f"echo's {r['handler_echo_us']}"
    ]


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the `finally` that stops the servers


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--full", action="store_true", help="the README's figures (longer)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--print", action="store_true", help="print the table of the last results and stop"
    )
    args = parser.parse_args(argv)
    if args.print:
        print(table(json.loads(args.out.read_text(encoding="utf-8")), args.out))
        return 0
    signal.signal(signal.SIGTERM, _terminate)
    plan = FULL if args.full else QUICK
    log_dir = Path(tempfile.mkdtemp(prefix="npu-resolver-bench-"))
    try:
        results = measure(plan, log_dir)
    finally:
        _procs.stop_all()
        shutil.rmtree(log_dir, ignore_errors=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(table(results, args.out))
    if results["errors_total"] or results["lost_total"]:
        print("FAILED: calls failed or replies were lost under load", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
