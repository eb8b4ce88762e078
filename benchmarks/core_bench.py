"""In-process figures: the core's cost per resolve against a plain-Python floor, scaling shape,
and the CLI's cold start against importing pydantic. Every loop is bounded in count."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from npu_resolver import CATALOG, ResolveRequest, resolve

TYPICAL_CONFIG: dict[str, Any] = {
    "graph_run_mode": 1,
    "hccl_timeout": 3600,
    "precision_mode_v2": "mixed_float16",
    "iterations_per_loop": 10,
    "deterministic": 0,
    "enable_exception_dump": 1,
    "op_compiler_cache_mode": "enable",
    "op_compiler_cache_dir": "/cache/ops",
    "debug_dir": "/job/debug",
    "export_compile_stat": 2,
    "hcom_parallel": True,
    "input_fusion_size": 65536,
    "stream_sync_timeout": 4000000,
    "op_wait_timeout": 200,
    "event_sync_timeout": -1,
    "jit_compile": "auto",
    "mix_compile_mode": False,
    "variable_placement": "Device",
    "oo_constant_folding": True,
    "modify_mixlist": "/job/mixlist.json",
}
TYPICAL_ENV = {"ASCEND_WORK_PATH": "/job/work", "HOME": "/home/user", "ASCEND_DEVICE_ID": "3"}

FULL_CONFIG: dict[str, Any] = {
    **TYPICAL_CONFIG,
    "session_device_id": 1,
    "distribute": {},
    "memory_config": {},
    "external_weight": True,
    "input_batch_cpy": True,
    "ac_parallel_enable": "1",
    "compile_dynamic_mode": False,
    "all_tensor_not_empty": True,
    "op_debug_config": "/job/debug.cfg",
    "customize_dtypes": "/job/dtypes.cfg",
    "enable_reduce_precision": True,
    "dump_config": {},
    "quant_dumpable": "1",
    "fusion_switch_file": "/job/fusion_switch.cfg",
    "buffer_optimize": "l2_optimize",
    "op_precision_mode": "/job/op_precision.ini",
    "enable_scope_fusion_passes": "ScopeLayerNormPass",
    "stream_max_parallel_num": "DNN_VM_AICPU:10,AIcoreEngine:1",
    "is_tailing_optimization": False,
    "enable_small_channel": 0,
    "graph_max_parallel_model_num": 2,
    "profiling_config": {},
    "aoe_mode": "2",
    "work_path": "aoe",
    "aoe_config_file": "/job/tuning.cfg",
    "aicore_num": "2|4",
    "local_rank_id": 0,
    "local_device_list": "0,1",
    "op_execute_timeout": 90,
    "experimental_config": {},
    "shape_generalization_mode": "STRICT",
    "auto_multistream_parallel_mode": "cv",
    "enable_data_pre_proc": True,
    "variable_format_optimize": True,
    "op_debug_level": 0,
    "op_select_implmode": "high_precision",
    "optypelist_for_implmode": "Pooling",
    "dynamic_input": True,
    "dynamic_graph_execute_mode": "dynamic_execute",
    "dynamic_inputs_shape_range": "getnext:[128,3~5],[64];data:[]",
    "graph_memory_max_size": 1,
    "variable_memory_max_size": 1,
}


def _timed(fn: Callable[[], object], count: int) -> list[float]:
    samples = []
    clock = time.perf_counter_ns
    for _ in range(count):
        start = clock()
        fn()
        samples.append((clock() - start) / 1000.0)
    return samples


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def floor_us(config: dict[str, Any], count: int) -> float:
    """A plain-Python floor: look each option up and check its type, choices and range."""
    spec = {o.name: (o.choices, o.ranges[0] if o.ranges else None, o.type) for o in CATALOG.options}

    def check() -> int:
        accepted = 0
        for name, value in config.items():
            entry = spec.get(name)
            if entry is None:
                continue
            choices, rng, _kind = entry
            if choices and value not in choices:
                continue
            if rng is not None and isinstance(value, int) and not rng.contains(value):
                continue
            accepted += 1
        return accepted

    return statistics.median(_timed(check, count))


def core_figures(count: int) -> dict[str, float]:
    requests = {
        "empty": ResolveRequest(product="atlas-a2"),
        "typical": ResolveRequest(product="atlas-a2", config=TYPICAL_CONFIG, env=TYPICAL_ENV),
        "full": ResolveRequest(product="atlas-a2", config=FULL_CONFIG, env=TYPICAL_ENV),
    }
    out: dict[str, float] = {}
    for name, request in requests.items():
        for _ in range(200):
            resolve(request)
        samples = _timed(lambda r=request: resolve(r), count)  # type: ignore[misc]
        out[f"core_{name}_us_p50"] = round(_p(samples, 0.5), 2)
        out[f"core_{name}_us_p99"] = round(_p(samples, 0.99), 2)
    out["floor_full_us"] = round(floor_us(FULL_CONFIG, count), 2)
    out["core_full_to_floor"] = round(out["core_full_us_p50"] / out["floor_full_us"], 1)
    return out


def scaling(count: int) -> dict[str, Any]:
    """Cost against config size: the slope per option, and how far from a line it is."""
    names = list(FULL_CONFIG)
    sizes = [1, 10, 35, len(names)]
    points = []
    for size in sizes:
        config = {n: FULL_CONFIG[n] for n in names[:size]}
        request = ResolveRequest(product="atlas-a2", config=config)
        for _ in range(100):
            resolve(request)
        points.append((size, statistics.median(_timed(lambda r=request: resolve(r), count))))  # type: ignore[misc]
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    slope, intercept = statistics.linear_regression(xs, ys)
    worst = max(abs(y - (slope * x + intercept)) / y for x, y in points)
    return {
        "scaling_points_us": {str(x): round(y, 2) for x, y in points},
        "scaling_slope_us_per_option": round(slope, 3),
        "scaling_max_deviation_from_line": round(worst, 3),
    }


def _wall(argv: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, timeout=60)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def cli_start(runs: int) -> dict[str, float]:
    """`npu-resolve resolve` on the typical config against `python -c 'import pydantic'`."""
    args = [sys.executable, "-m", "npu_resolver._cli", "resolve", "--product", "atlas-a2"]
    for name, value in TYPICAL_CONFIG.items():
        args += ["--set", f"{name}={str(value).lower() if isinstance(value, bool) else value}"]
    args += ["--format", "json"]
    # Compare like with like: pydantic is installed with its bytecode compiled, as a pip
    # install of this project is; a development checkout (or PYTHONDONTWRITEBYTECODE) has none.
    root = Path(__file__).resolve().parents[1]
    folders = [str(root / name) for name in ("resolver", "server", "client")]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *folders], check=True, timeout=120)
    cli = _wall(args, runs)
    pydantic = _wall([sys.executable, "-c", "import pydantic"], runs)
    return {
        "cli_start_ms": round(cli * 1000, 1),
        "pydantic_import_ms": round(pydantic * 1000, 1),
        "cli_start_ratio": round(cli / pydantic, 2),
    }
