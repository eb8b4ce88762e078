"""The load generator both the echo server and the resolver are measured with.

One asyncio process, N calls in flight over C channels (each its own HTTP/2 connection), a fixed
request count and a time limit, both bounding the run. Requests are serialized before the clock
starts and replies are not parsed: the client costs the same whichever server answers. Every
request carries a unique id (its workdir and ASCEND_WORK_PATH) that the answer must contain;
a reply without its id is counted as lost, like a call that never came back.

    python -m benchmarks.load --target 127.0.0.1:50051 --workload distinct \
        --requests 5000 --inflight 64

prints one JSON object: requests, ok, errors (by code), lost, req/s, p50/p99 in ms, the CPU
this client used and, with --cpu-pids, the CPU the server processes used in the timed part.
The reliability tests import `run_load` and the workload builders from here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import grpc

from benchmarks.core_bench import TYPICAL_CONFIG, TYPICAL_ENV
from npu_resolver_client.wire import pb

RESOLVE: Final = "/npu.resolver.v1.Resolver/Resolve"
RESOLVE_BATCH: Final = "/npu.resolver.v1.Resolver/ResolveBatch"
PID_METADATA_KEY: Final = "x-npu-resolver-pid"
HOT_CONFIGS: Final = 300
"""A launcher's working set: the configs its jobs keep asking for."""
HOT_SHARE: Final = 0.95
"""Share of a launcher's requests that repeat a working-set config; the rest are one-offs."""
MAX_MESSAGE_BYTES: Final = 64 * 1024 * 1024
CLOCK_TICKS: Final = os.sysconf("SC_CLK_TCK")

Item = tuple[bytes, bytes]
"""A serialized ResolveRequest and the id its reply must contain."""


def request_id(tag: str, index: int) -> str:
    """Fixed width, so that no id is a prefix of another."""
    return f"/jobs/{tag}/{index:08d}"


def typical_request(ident: str, hccl_timeout: int) -> pb.ResolveRequest:
    """The typical training config, made unique by its id (workdir and ASCEND_WORK_PATH)."""
    config = {**TYPICAL_CONFIG, "hccl_timeout": hccl_timeout}
    return pb.ResolveRequest(
        product="atlas-a2",
        config_json=json.dumps(config, separators=(",", ":")),
        env={**TYPICAL_ENV, "ASCEND_WORK_PATH": ident},
        workdir=ident,
    )


def _item(ident: str, hccl_timeout: int) -> Item:
    return typical_request(ident, hccl_timeout).SerializeToString(), ident.encode()


def distinct(count: int, tag: str) -> list[Item]:
    """`count` requests of which no two are byte-equal (id and hccl_timeout vary)."""
    return [_item(request_id(tag, i), 600 + i % 16_000) for i in range(count)]


def working_set() -> list[Item]:
    """The launcher's recurring configs: the same bytes in every run."""
    return [_item(request_id("hot", k), 600 + k) for k in range(HOT_CONFIGS)]


def repeating(count: int, tag: str, seed: int = 8) -> list[Item]:
    """A launcher's mix: HOT_SHARE of the requests repeat the working set, the rest are new."""
    hot = working_set()
    rng = random.Random(seed)
    items: list[Item] = []
    for i in range(count):
        if rng.random() < HOT_SHARE:
            items.append(hot[rng.randrange(len(hot))])
        else:
            items.append(_item(request_id(tag, i), 20_000 + i % 16_000))
    return items


def batch_request(size: int, tag: str) -> tuple[bytes, list[str]]:
    """One ResolveBatchRequest of `size` distinct typical configs, and their ids in order."""
    ids = [request_id(tag, i) for i in range(size)]
    batch = pb.ResolveBatchRequest(
        requests=[typical_request(ident, 600 + i) for i, ident in enumerate(ids)]
    )
    return batch.SerializeToString(), ids


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU of these processes so far (0 for one that is gone)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLOCK_TICKS


def box_busy_seconds() -> float:
    """CPU time every core of the machine has spent busy so far (all processes)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
    except OSError:
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle, iowait
    return (sum(fields[:8]) - idle) / CLOCK_TICKS  # guest time is already counted in user


def percentile(samples: Sequence[float], q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def channel_options() -> list[tuple[str, Any]]:
    """No retries (a failure must show), large messages, and a connection of its own."""
    return [
        ("grpc.enable_retries", 0),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.use_local_subchannel_pool", 1),
    ]


@dataclass
class _Tally:
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    mismatched: int = 0
    started: int = 0
    finished: int = 0


async def _pids(stubs: Sequence[Any], item: Item, timeout_s: float) -> list[str]:
    """The worker pid answering each channel (from the trailing metadata)."""
    seen = []
    for stub in stubs:
        call = stub(item[0], timeout=timeout_s)
        try:
            await call
            metadata = await call.trailing_metadata()
        except grpc.RpcError:
            continue
        seen += [str(v) for k, v in metadata or () if k == PID_METADATA_KEY]
    return seen


async def _drive(
    stubs: Sequence[Any],
    items: Sequence[Item],
    *,
    inflight: int,
    requests: int,
    deadline: float,
    timeout_s: float,
    tally: _Tally,
) -> None:
    """`inflight` callers share one counter; each stops at `requests` or at `deadline`."""
    next_index = 0
    clock = time.perf_counter

    async def caller() -> None:
        nonlocal next_index
        while next_index < requests and clock() < deadline:
            index = next_index
            next_index += 1
            payload, ident = items[index % len(items)]
            stub = stubs[index % len(stubs)]
            tally.started += 1
            start = clock()
            try:
                reply = await stub(payload, timeout=timeout_s)
            except grpc.RpcError as error:
                code = error.code() if isinstance(error, grpc.aio.AioRpcError) else None
                tally.errors[code.name if code is not None else "UNKNOWN"] += 1
                tally.finished += 1
                continue
            tally.latencies.append(clock() - start)
            tally.finished += 1
            if ident not in reply:
                tally.mismatched += 1

    tasks = [asyncio.ensure_future(caller()) for _ in range(max(1, inflight))]
    # Every call has its own deadline, so this outer bound is only a guard against a hang.
    _done, pending = await asyncio.wait(tasks, timeout=deadline - clock() + timeout_s + 5)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


async def run_load(
    target: str,
    items: Sequence[Item],
    *,
    inflight: int,
    requests: int,
    time_limit_s: float,
    channels: int = 1,
    timeout_s: float = 30.0,
    warmup: Sequence[Item] = (),
    cpu_pids: Sequence[int] = (),
) -> dict[str, Any]:
    """Unary Resolve calls: `requests` of them (cycling over `items`) or `time_limit_s`,
    whichever ends first. `warmup` is sent first and not counted."""
    opened = [
        grpc.aio.insecure_channel(target, options=channel_options())
        for _ in range(max(1, channels))
    ]
    try:
        stubs = [ch.unary_unary(RESOLVE) for ch in opened]
        if warmup:
            await _drive(
                stubs,
                warmup,
                inflight=inflight,
                requests=len(warmup),
                deadline=time.perf_counter() + time_limit_s,
                timeout_s=timeout_s,
                tally=_Tally(),
            )
        pids = await _pids(stubs, warmup[0] if warmup else items[0], timeout_s)
        tally = _Tally()
        server_cpu = cpu_seconds(cpu_pids)
        client_cpu = time.process_time()
        box = box_busy_seconds()
        start = time.perf_counter()
        await _drive(
            stubs,
            items,
            inflight=inflight,
            requests=requests,
            deadline=start + time_limit_s,
            timeout_s=timeout_s,
            tally=tally,
        )
        elapsed = time.perf_counter() - start
        client_cpu = time.process_time() - client_cpu
        server_cpu = cpu_seconds(cpu_pids) - server_cpu
        box = box_busy_seconds() - box
    finally:
        await asyncio.gather(*(ch.close() for ch in opened))
    ok = len(tally.latencies)
    errors = sum(tally.errors.values())
    unfinished = tally.started - tally.finished
    return {
        "inflight": inflight,
        "channels": len(opened),
        "requests": tally.started,
        "ok": ok - tally.mismatched,
        "errors": errors,
        "error_codes": dict(tally.errors),
        "lost": tally.mismatched + unfinished,
        "mismatched": tally.mismatched,
        "unfinished": unfinished,
        "elapsed_s": round(elapsed, 3),
        "rps": round(tally.finished / elapsed, 1) if elapsed > 0 else 0.0,
        "p50_ms": round(percentile(tally.latencies, 0.50) * 1000, 3),
        "p99_ms": round(percentile(tally.latencies, 0.99) * 1000, 3),
        "max_ms": round(max(tally.latencies, default=0.0) * 1000, 3),
        "client_cpu_cores": round(client_cpu / elapsed, 2) if elapsed > 0 else 0.0,
        "server_cpu_cores": round(server_cpu / elapsed, 2) if elapsed > 0 else 0.0,
        "other_cpu_cores": (
            round(max(0.0, box - client_cpu - server_cpu) / elapsed, 2)
            if elapsed > 0 and cpu_pids
            else None
        ),
        "server_cpu_us_per_call": (
            round(server_cpu / tally.finished * 1e6, 1) if tally.finished and cpu_pids else None
        ),
        "server_pids": sorted(set(pids)),
    }


def _check_batch(reply: bytes, ids: Sequence[str]) -> int:
    """How many items of a batch reply are missing or not their request's answer."""
    response = pb.ResolveBatchResponse.FromString(reply)
    wrong = abs(len(response.results) - len(ids))
    for result, ident in zip(response.results, ids, strict=False):
        answered = result.WhichOneof("result") == "response"
        if not answered or result.response.paths.get("exception_dump_dir") != ident:
            wrong += 1
    return wrong


async def run_batch(
    target: str,
    size: int,
    calls: int,
    *,
    tag: str,
    time_limit_s: float,
    timeout_s: float = 60.0,
    cpu_pids: Sequence[int] = (),
) -> dict[str, Any]:
    """`calls` ResolveBatch calls of `size` distinct configs, one at a time; replies are checked
    after the clock stops."""
    payloads = [batch_request(size, f"{tag}-{c}") for c in range(calls)]
    replies: list[tuple[bytes, list[str]]] = []
    errors: Counter[str] = Counter()
    async with grpc.aio.insecure_channel(target, options=channel_options()) as channel:
        stub = channel.unary_unary(RESOLVE_BATCH)
        warm, _ = batch_request(min(size, 50), f"{tag}-warm")
        await stub(warm, timeout=timeout_s)
        server_cpu = cpu_seconds(cpu_pids)
        start = time.perf_counter()
        deadline = start + time_limit_s
        latencies = []
        for payload, ids in payloads:
            if time.perf_counter() >= deadline:
                break
            begin = time.perf_counter()
            try:
                replies.append((await stub(payload, timeout=timeout_s), ids))
            except grpc.aio.AioRpcError as error:
                errors[error.code().name] += 1
                continue
            latencies.append(time.perf_counter() - begin)
        elapsed = time.perf_counter() - start
        server_cpu = cpu_seconds(cpu_pids) - server_cpu
    configs = size * len(replies)
    return {
        "batch_size": size,
        "calls": len(replies) + sum(errors.values()),
        "errors": sum(errors.values()),
        "error_codes": dict(errors),
        "lost": sum(_check_batch(reply, ids) for reply, ids in replies),
        "elapsed_s": round(elapsed, 3),
        "configs_per_s": round(configs / elapsed, 1) if elapsed > 0 else 0.0,
        "call_p50_ms": round(percentile(latencies, 0.5) * 1000, 1),
        "server_cpu_us_per_config": (
            round(server_cpu / configs * 1e6, 1) if configs and cpu_pids else None
        ),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Drive a resolver or echo server with load.")
    parser.add_argument("--target", required=True)
    parser.add_argument("--workload", choices=("distinct", "repeat", "batch"), required=True)
    parser.add_argument("--requests", type=int, required=True, help="calls (batch: batch calls)")
    parser.add_argument("--inflight", type=int, default=1)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=200, help="uncounted calls sent first")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds, at most")
    parser.add_argument("--timeout", type=float, default=30.0, help="deadline of each call")
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--tag", default=f"r{os.getpid()}", help="makes the ids of a run unique")
    parser.add_argument("--cpu-pids", default="", help="server pids whose CPU to account")
    args = parser.parse_args(argv)
    if not args.target.startswith("127.0.0.1:"):
        parser.error("the load generator only drives 127.0.0.1")
    pids = [int(p) for p in args.cpu_pids.split(",") if p]
    if args.workload == "batch":
        result = asyncio.run(
            run_batch(
                args.target,
                args.batch_size,
                args.requests,
                tag=args.tag,
                time_limit_s=args.time_limit,
                timeout_s=args.timeout,
                cpu_pids=pids,
            )
        )
    else:
        if args.workload == "distinct":
            items = distinct(args.requests, args.tag)
            warmup = distinct(args.warmup, f"{args.tag}w")
        else:
            items = repeating(args.requests, args.tag)
            # A launcher's steady state: its working set has recurred, so it is cached (a reply
            # is kept from its request's second sight).
            warmup = working_set() * 2
        result = asyncio.run(
            run_load(
                args.target,
                items,
                inflight=args.inflight,
                requests=args.requests,
                time_limit_s=args.time_limit,
                channels=args.channels,
                timeout_s=args.timeout,
                warmup=warmup,
                cpu_pids=pids,
            )
        )
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
