"""Faults under load, against the server as a process (stopped by PID).

Already covered elsewhere, and not repeated here: a SIGTERM during a burst of batch calls
(test_grpc_process), an oversize request (RESOURCE_EXHAUSTED), the nesting and width limits'
status codes, a 1 ms deadline on an idle server, invalid UTF-8 in an env value, and a bad policy
reload without load (test_grpc_service, test_grpc_policy). These tests add what those leave
out: the same faults while calls are in flight, what happens to the calls themselves, memory,
and every other string field of the wire.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from benchmarks.load import (
    RESOLVE,
    channel_options,
    distinct,
    percentile,
    request_id,
    run_load,
    typical_request,
)
from npu_resolver import ResolveRequest
from npu_resolver_client import AsyncResolverClient, ResolverClientError
from npu_resolver_client.wire import pb
from tests._server import ProcessServer, ThreadServer
from tests.reliability._common import Figures, field


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} for {pid}")


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


# --------------------------------------------------------------------------- SIGTERM


REFUSED_PAUSE_S = 0.02


async def _sigterm_under_load(server: ProcessServer, grace: float) -> dict[str, Any]:
    """64 callers keep calling through SIGTERM, the drain and the exit."""
    items = distinct(50_000, "term")
    opened = [grpc.aio.insecure_channel(server.target, options=channel_options()) for _ in range(4)]
    stubs = [ch.unary_unary(RESOLVE) for ch in opened]
    state: dict[str, Any] = {"next": 0, "stop": False, "exited_at": None, "begun_after": 0}
    ok = wrong = 0
    codes: Counter[str] = Counter()
    after_exit: Counter[str] = Counter()
    latencies: list[float] = []

    async def caller() -> None:
        nonlocal ok, wrong
        while not state["stop"] and state["next"] < len(items):
            index = state["next"]
            state["next"] += 1
            payload, ident = items[index]
            began = time.monotonic()
            if state["exited_at"] is not None:
                state["begun_after"] += 1
            try:
                reply = await stubs[index % len(stubs)](payload, timeout=grace + 10)
            except grpc.aio.AioRpcError as error:
                codes[error.code().name] += 1
                if state["exited_at"] is not None and began >= state["exited_at"]:
                    after_exit[error.code().name] += 1
                # A refused caller waits before its next call, as a client's retry policy
                # does: a drain that takes the whole grace then leaves requests for the calls
                # after the exit (at full speed, 64 callers spent 50,000 in 11 s of refusals).
                await asyncio.sleep(REFUSED_PAUSE_S)
                continue
            latencies.append(time.monotonic() - began)
            ok += 1
            wrong += ident not in reply

    try:
        for stub in stubs:  # connected before the load starts
            await stub(items[0][0], timeout=10)
        ok += len(stubs)
        state["next"] = 1
        tasks = [asyncio.ensure_future(caller()) for _ in range(64)]
        await asyncio.sleep(1.0)
        server.signal(signal.SIGTERM)
        term_at = time.monotonic()
        assert server.proc is not None
        while server.proc.poll() is None and time.monotonic() - term_at < grace + 10:
            await asyncio.sleep(0.01)
        state["exited_at"] = time.monotonic()
        drain = state["exited_at"] - term_at
        # Calls made after the exit: the callers may all be inside calls begun before it (the
        # client retries UNAVAILABLE for about 1.5 s), so wait until some have begun since.
        deadline = time.monotonic() + 10
        while state["begun_after"] < 8 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        state["stop"] = True
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=grace + 20)
    finally:
        await asyncio.gather(*(ch.close() for ch in opened))
    return {
        "ok": ok,
        "wrong": wrong,
        "codes": codes,
        "after_exit": after_exit,
        "drain_s": drain,
        "p99_ms": _ms(percentile(latencies, 0.99)),
    }


def test_sigterm_during_load(figures: Figures) -> None:
    grace = 10.0
    server = ProcessServer(["--workers", "2", "--grace-seconds", str(grace)])
    with server:
        server.wait_for("serving", 2)
        outcome = asyncio.run(_sigterm_under_load(server, grace))
        code = server.wait(grace + 10)
    answered = [
        e for e in server.events("rpc") if e.get("method") == "Resolve" and e.get("code") == "OK"
    ]
    codes = outcome["codes"]
    line = figures(
        "sigterm",
        requests=outcome["ok"] + sum(codes.values()),
        answered=outcome["ok"],
        refused_unavailable=codes["UNAVAILABLE"],
        cancelled_while_queued=codes["CANCELLED"],
        errors=sum(n for c, n in codes.items() if c not in ("UNAVAILABLE", "CANCELLED")),
        lost=outcome["wrong"] + len(answered) - outcome["ok"],
        p99_ms=outcome["p99_ms"],
        drain_ms=_ms(outcome["drain_s"]),
        exit_code=code,
    )
    assert code == 0, line
    assert set(codes) <= {"UNAVAILABLE", "CANCELLED"}, codes
    assert outcome["after_exit"]["UNAVAILABLE"] > 0, "calls after the exit are refused"
    assert set(outcome["after_exit"]) == {"UNAVAILABLE"}, outcome["after_exit"]
    assert outcome["wrong"] == 0
    # Every call a worker's handler answered reached its caller; none was cut off.
    assert len(answered) == outcome["ok"], line
    assert all(e["code"] == 0 for e in server.events("worker_exited")), line
    if codes["CANCELLED"]:
        # Calls already received but not yet handed to a handler when stop() begins are
        # failed with CANCELLED by gRPC core (grpc/grpc#41785). The project's client retries
        # CANCELLED (another replica answers); with one server, as here, there is none.
        pytest.xfail(f"{codes['CANCELLED']} calls queued at SIGTERM got CANCELLED: {line}")


# --------------------------------------------------------------------------- SIGKILL


async def _kill_a_worker(server: ProcessServer, seconds: float) -> dict[str, Any]:
    """Calls through the client (its retry policy on) while one worker is SIGKILLed."""
    local_pool = [("grpc.use_local_subchannel_pool", 1)]  # one connection per client
    clients = [AsyncResolverClient(server.target, timeout=10, options=local_pool) for _ in range(8)]
    errors: Counter[str] = Counter()
    latencies: list[float] = []
    pids_after: set[str] = set()
    state: dict[str, Any] = {"next": 0, "killed_at": None}
    wrong = 0
    try:
        landed: Counter[str] = Counter()
        for client in clients:
            await client.resolve("atlas-a2")
            landed[client.last_server_pid] += 1
        own = {str(e["worker_pid"]) for e in server.events("worker_started")}
        # Another process listening on the same port with SO_REUSEPORT would take calls too.
        assert set(landed) <= own, f"calls answered by {set(landed) - own}, not this server"
        victim = int(landed.most_common(1)[0][0])
        deadline = time.monotonic() + seconds

        async def caller() -> None:
            nonlocal wrong
            while time.monotonic() < deadline:
                index = state["next"]
                state["next"] += 1
                ident = request_id("kill", index)
                request = ResolveRequest(
                    product="atlas-a2", config={"hccl_timeout": 600 + index}, workdir=ident
                )
                client = clients[index % len(clients)]
                began = time.monotonic()
                try:
                    result = await client.resolve_request(request)
                except ResolverClientError as error:
                    errors[error.code.name] += 1
                    continue
                latencies.append(time.monotonic() - began)
                wrong += not result.paths["exception_dump_dir"].startswith(ident)
                if state["killed_at"] is not None and began > state["killed_at"]:
                    pids_after.add(client.last_server_pid)

        tasks = [asyncio.ensure_future(caller()) for _ in range(64)]
        await asyncio.sleep(seconds / 3)
        os.kill(victim, signal.SIGKILL)
        state["killed_at"] = time.monotonic()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=seconds + 60)
    finally:
        await asyncio.gather(*(client.close() for client in clients))
    return {
        "requests": state["next"],
        "errors": errors,
        "wrong": wrong,
        "victim": victim,
        "landed": landed,
        "pids_after": pids_after,
        "p99_ms": _ms(percentile(latencies, 0.99)),
        "max_ms": _ms(max(latencies, default=0.0)),
    }


def _state(pid: int) -> str:
    """A process's state line from /proc, for a failure to say whether it died."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return f"{pid} is gone"
    return next((line for line in status.splitlines() if line.startswith("State:")), status)


def _worker_killed(seconds: float, figures: Figures) -> None:
    with ProcessServer(["--workers", "2"]) as server:
        server.wait_for("serving", 2)
        outcome = asyncio.run(_kill_a_worker(server, seconds))
        try:
            exited = server.wait_for("worker_exited")
        except AssertionError as error:
            victim = _state(outcome["victim"])
            raise AssertionError(f"{error}\nthe killed worker: {victim}") from None
        restarted = server.wait_for("serving", 3)
        assert exited[0]["worker_pid"] == outcome["victim"]
        assert exited[0]["code"] == -signal.SIGKILL
        assert {e["pid"] for e in restarted[2:]}.isdisjoint({outcome["victim"]})
    line = figures(
        "worker sigkill",
        requests=outcome["requests"],
        errors=sum(outcome["errors"].values()),
        lost=outcome["wrong"],
        p99_ms=outcome["p99_ms"],
        max_ms=outcome["max_ms"],
        restarted=True,
    )
    assert outcome["wrong"] == 0, line
    assert str(outcome["victim"]) not in outcome["pids_after"], "a dead worker answered"
    assert set(outcome["errors"]) <= {"UNAVAILABLE"}, (outcome["errors"], line)
    # The client's retry policy and quick reconnect hide the dead worker entirely.
    assert not outcome["errors"], line


def test_worker_sigkill(figures: Figures) -> None:
    _worker_killed(3.0, figures)


@pytest.mark.soak
def test_worker_sigkill_soak(figures: Figures) -> None:
    _worker_killed(30.0, figures)


# --------------------------------------------------------------------------- limits, memory


def _struct_nested(depth: int) -> bytes:
    """config.dump_config = {"k": {"k": ... "x"}}, `depth` objects deep, written by hand."""
    value = field(3, b"x")  # Value.string_value
    for _ in range(depth):
        value = field(5, field(1, field(1, b"k") + field(2, value)))  # struct_value.fields[k]
    entry = field(1, b"dump_config") + field(2, value)
    return field(1, b"atlas-a2") + field(2, field(1, entry))  # product, config.fields


def _abusive() -> dict[str, bytes]:
    wide = pb.ResolveRequest(product="atlas-a2")
    wide.config.update({f"k{i}": i for i in range(100_000)})
    return {
        "struct_objects_1000_deep": _struct_nested(1000),
        "struct_100000_keys": wide.SerializeToString(),
        "json_objects_1000_deep": pb.ResolveRequest(
            product="atlas-a2",
            config_json='{"dump_config":' + '{"k":' * 1000 + "1" + "}" * 1001,
        ).SerializeToString(),
        "json_100000_keys": pb.ResolveRequest(
            product="atlas-a2", config_json=json.dumps({f"k{i}": i for i in range(100_000)})
        ).SerializeToString(),
    }


def _limits(rounds: int, figures: Figures) -> tuple[str, list[float], float]:
    """`rounds` times each abusive request; the server's RSS growth (MiB) after each round."""
    payloads = _abusive()
    slowest: dict[str, float] = {}
    growth: list[float] = []
    with ProcessServer() as server, grpc.insecure_channel(server.target) as channel:
        call = channel.unary_unary(RESOLVE)
        good = typical_request(request_id("limits", 0), 600).SerializeToString()
        call(good, timeout=10)
        base_rss = _status_kb(server.pid, "VmRSS")
        for _ in range(rounds):
            for name, payload in payloads.items():
                began = time.perf_counter()
                with pytest.raises(grpc.RpcError) as info:
                    call(payload, timeout=10)
                took = time.perf_counter() - began
                slowest[name] = max(slowest.get(name, 0.0), took)
                error: Any = info.value
                assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, (name, error.details())
            growth.append((_status_kb(server.pid, "VmRSS") - base_rss) / 1024)
        peak_mb = (_status_kb(server.pid, "VmHWM") - base_rss) / 1024
        assert call(good, timeout=10)  # unharmed
    line = figures(
        "limits",
        requests=rounds * len(payloads),
        errors=0,
        slowest_ms={k: _ms(v) for k, v in slowest.items()},
        peak_extra_rss_mb=round(peak_mb, 1),
        rss_growth_mb=round(growth[-1], 1),
        rss_growth_mb_half_way=round(growth[rounds // 2 - 1], 1),
    )
    return line, growth, peak_mb


def test_limits_are_fast_and_memory_bounded(figures: Figures) -> None:
    line, growth, peak_mb = _limits(5, figures)
    # Bounded: each refused request (up to ~2 MB on the wire) costs tens of MB at its peak and
    # leaves nothing behind beyond the allocator's pools (which swing by ~20 MB here).
    assert peak_mb < 256, line
    assert growth[-1] < 64, line


@pytest.mark.soak
def test_limits_leave_nothing_behind_soak(figures: Figures) -> None:
    """160 refused requests of up to 2 MB: once the allocator has its pools, RSS stays flat.
    While refusals went through `context.abort`, each request stayed in memory until a full
    collection: some 2 MiB a request, 50 MiB over the second half of this run."""
    line, growth, _ = _limits(40, figures)
    assert growth[-1] - growth[len(growth) // 2 - 1] < 16, line


# --------------------------------------------------------------------------- large requests


def _large_request() -> pb.ResolveRequest:
    """Four attachments near their 1 MiB limit (about 3.6 MB): half a second of resolving."""
    ops = range(50_000)
    attachments = {
        "op_precision_mode": "[ByOpType]\n"
        + "".join(f"MatMul{i}=enable_float_32_execution\n" for i in range(25_000)),
        "customize_dtypes": "".join(
            f"OpType::Relu{i}:InputDtype:float16,OutputDtype:float16\n" for i in range(17_000)
        ),
        "modify_mixlist": json.dumps({"black-list": {"to-add": [f"MatMul{i}" for i in ops]}}),
        "op_debug_config": "op_debug_config = oom\nop_debug_list = "
        + ",".join(f"GatherV{i}" for i in range(70_000)),
    }
    config = {name: f"/job/{name}" for name in attachments} | {"precision_mode_v2": "mixed_float16"}
    return pb.ResolveRequest(
        product="atlas-a2", config_json=json.dumps(config), attachments=attachments
    )


async def _large_requests_beside_probes(target: str, seconds: float) -> dict[str, Any]:
    """Four callers sending large requests back to back; meanwhile a health probe (with the
    deploy's 2 s timeout) and a small Resolve every 50 ms."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    large = _large_request().SerializeToString()
    small = typical_request(request_id("small", 0), 600).SerializeToString()
    end = time.monotonic() + seconds
    took: dict[str, list[float]] = {"large": [], "probe": [], "small": []}
    failed: Counter[str] = Counter()
    async with grpc.aio.insecure_channel(target, options=channel_options()) as channel:
        resolve = channel.unary_unary(RESOLVE)
        health = health_pb2_grpc.HealthStub(channel)
        await resolve(small, timeout=10)

        async def timed(kind: str, call: Any, pause: float) -> None:
            while time.monotonic() < end:
                began = time.monotonic()
                try:
                    await call()
                    took[kind].append(time.monotonic() - began)
                except grpc.aio.AioRpcError as error:
                    failed[f"{kind} {error.code().name}"] += 1
                await asyncio.sleep(pause)

        await asyncio.gather(
            *[timed("large", lambda: resolve(large, timeout=30), 0) for _ in range(4)],
            timed("probe", lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=2), 0.05),
            timed("small", lambda: resolve(small, timeout=2), 0.05),
        )
    return {"took": took, "failed": failed, "large_bytes": len(large)}


def test_large_requests_leave_health_probes_answered(figures: Figures) -> None:
    """A request of megabytes of attachments takes half a second to resolve: resolved on the
    worker's event loop, four of them in a row held every probe and small call behind them
    (probes at p50 477 ms, up to 1.4 s, near the deploy's 2 s probe timeout; small calls
    1.8 s). They are resolved on a thread of their own, one at a time, while the loop answers
    the rest: every probe within half that timeout."""
    with ProcessServer() as server:
        outcome = asyncio.run(_large_requests_beside_probes(server.target, 4.0))
        internal = server.events("internal")
    took, failed = outcome["took"], outcome["failed"]
    line = figures(
        "large requests beside probes",
        requests=sum(map(len, took.values())) + sum(failed.values()),
        errors=sum(failed.values()),
        large=len(took["large"]),
        large_mb=round(outcome["large_bytes"] / 1e6, 2),
        probe_p50_ms=_ms(percentile(took["probe"], 0.5)),
        probe_max_ms=_ms(max(took["probe"], default=0.0)),
        small_p50_ms=_ms(percentile(took["small"], 0.5)),
        small_max_ms=_ms(max(took["small"], default=0.0)),
    )
    assert not failed, line
    assert took["large"] and len(took["probe"]) >= 10 and len(took["small"]) >= 10, line
    assert max(took["probe"]) < 1.0, line
    assert not internal, internal


# --------------------------------------------------------------------------- deadlines


async def _tiny_deadlines(target: str) -> tuple[dict[str, Any], Counter[str]]:
    """Background load, and meanwhile calls with a 1 ms deadline (unary and 500-item batches)."""
    codes: Counter[str] = Counter()
    batch = pb.ResolveBatchRequest(
        requests=[typical_request(request_id("tinyb", i), 600 + i) for i in range(500)]
    ).SerializeToString()

    async def tiny() -> None:
        async with grpc.aio.insecure_channel(target, options=channel_options()) as channel:
            unary = channel.unary_unary(RESOLVE)
            batched = channel.unary_unary("/npu.resolver.v1.Resolver/ResolveBatch")
            for index, (payload, _ident) in enumerate(distinct(200, "tiny")):
                method, body = (batched, batch) if index % 20 == 0 else (unary, payload)
                try:
                    await method(body, timeout=0.001)
                    codes["OK"] += 1
                except grpc.aio.AioRpcError as error:
                    codes[error.code().name] += 1

    background, _ = await asyncio.gather(
        run_load(
            target,
            distinct(20_000, "tinyload"),
            inflight=16,
            requests=20_000,
            time_limit_s=2.0,
            warmup=distinct(20, "tinyw"),
        ),
        tiny(),
    )
    return background, codes


def test_tiny_deadlines_under_load(figures: Figures) -> None:
    with ProcessServer() as server:
        background, codes = asyncio.run(_tiny_deadlines(server.target))
        after = asyncio.run(
            run_load(
                server.target, distinct(200, "after"), inflight=8, requests=200, time_limit_s=10
            )
        )
        internal = server.events("internal")
    line = figures(
        "deadline 1ms",
        requests=background["requests"] + sum(codes.values()),
        errors=background["errors"] + after["errors"],
        lost=background["lost"] + after["lost"],
        tiny_codes=dict(codes),
        p99_ms=background["p99_ms"],
    )
    assert set(codes) <= {"OK", "DEADLINE_EXCEEDED"}, codes
    assert codes["DEADLINE_EXCEEDED"] > 0, codes
    assert background["errors"] == 0 and background["lost"] == 0, line
    assert after["errors"] == 0 and after["ok"] == 200, after  # the server is unharmed
    assert not internal, internal


# --------------------------------------------------------------------------- invalid UTF-8


@pytest.fixture(scope="module")
def plain_server() -> Iterator[ThreadServer]:
    with ThreadServer() as running:
        yield running


def _with_struct(config: dict[str, Any]) -> pb.ResolveRequest:
    message = pb.ResolveRequest(product="atlas-a2")
    message.config.update(config)
    return message


MARK = "~~"  # two bytes, replaced by two bytes that are not UTF-8: lengths stay right
NOT_UTF8 = b"\xc3\x28"
_STRING_FIELDS: dict[str, tuple[str, Any]] = {
    "product": ("Resolve", pb.ResolveRequest(product=MARK)),
    "env key": ("Resolve", pb.ResolveRequest(product="atlas-a2", env={MARK: "1"})),
    "workdir": ("Resolve", pb.ResolveRequest(product="atlas-a2", workdir=MARK)),
    "profile": ("Resolve", pb.ResolveRequest(product="atlas-a2", profile=MARK)),
    "attachment name": (
        "Resolve",
        pb.ResolveRequest(product="atlas-a2", attachments={MARK: "{}"}),
    ),
    "attachment text": (
        "Resolve",
        pb.ResolveRequest(product="atlas-a2", attachments={"modify_mixlist": MARK}),
    ),
    "config_json": ("Resolve", pb.ResolveRequest(product="atlas-a2", config_json='{"a":"~~"}')),
    "struct key": ("Resolve", _with_struct({MARK: 1})),
    "struct string": ("Resolve", _with_struct({"a": MARK})),
    "diff env value": (
        "Diff",
        pb.DiffRequest(products=["atlas-a2", "atlas-a3"], env={"HCCL_EXEC_TIMEOUT": MARK}),
    ),
    "describe product": ("DescribeCatalog", pb.DescribeCatalogRequest(product=MARK)),
}


def test_invalid_utf8_in_every_string_field(plain_server: ThreadServer, figures: Figures) -> None:
    codes: Counter[str] = Counter()
    with grpc.insecure_channel(plain_server.target) as channel:
        for name, (method, message) in _STRING_FIELDS.items():
            raw = message.SerializeToString()
            assert raw.count(MARK.encode()) == 1, name
            call = channel.unary_unary(f"/npu.resolver.v1.Resolver/{method}")
            with pytest.raises(grpc.RpcError) as info:
                call(raw.replace(MARK.encode(), NOT_UTF8), timeout=10)
            error: Any = info.value
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, (name, error.details())
            assert "UTF-8" in error.details(), (name, error.details())
            codes[error.code().name] += 1
        # A batch never fails as a whole for one bad item: that item alone is refused.
        batch = pb.ResolveBatchRequest(
            requests=[
                pb.ResolveRequest(product="atlas-a2"),
                pb.ResolveRequest(product="atlas-a2", env={"HCCL_EXEC_TIMEOUT": MARK}),
            ]
        ).SerializeToString()
        call = channel.unary_unary(
            "/npu.resolver.v1.Resolver/ResolveBatch",
            response_deserializer=pb.ResolveBatchResponse.FromString,
        )
        results = call(batch.replace(MARK.encode(), NOT_UTF8), timeout=10).results
        assert [r.WhichOneof("result") for r in results] == ["response", "status"]
        assert results[1].status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "UTF-8" in results[1].status.message
        codes[grpc.StatusCode.INVALID_ARGUMENT.name] += 1
        good = typical_request(request_id("utf8", 0), 600).SerializeToString()
        assert channel.unary_unary(RESOLVE)(good, timeout=10)  # still serving
    figures(
        "invalid utf-8", fields=len(_STRING_FIELDS) + 1, invalid_argument=codes["INVALID_ARGUMENT"]
    )


# --------------------------------------------------------------------------- policy


POLICY_A = "[profiles.default.defaults]\nop_debug_level = 0\n"
POLICY_B = "[profiles.default.defaults]\nop_debug_level = 1\n"
GARBAGE = "this is [not toml\n\x00\x01"


def _replace(path: Path, text: str) -> None:
    """What a ConfigMap update or an editor's save does: write aside, rename over."""
    aside = path.with_suffix(".tmp")
    aside.write_text(text)
    os.replace(aside, path)


async def _wait_event(server: ProcessServer, name: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(server.events(name)) < count:
        assert time.monotonic() < deadline, f"no {name!r} event"
        await asyncio.sleep(0.01)


async def _garbage_mid_load(server: ProcessServer, policy: Path) -> dict[str, Any]:
    calls: list[tuple[float, float, str]] = []  # began, ended, policy version
    failures: list[str] = []
    marks: dict[str, float] = {}
    stop = asyncio.Event()
    counter = iter(range(10_000_000))

    async with AsyncResolverClient(server.target, timeout=10) as client:
        start_version = (await client.get_policy()).policy_version

        async def caller() -> None:
            while not stop.is_set():
                index = next(counter)
                ident = request_id("policy", index)
                request = ResolveRequest(
                    product="atlas-a2", config={"hccl_timeout": 600 + index}, workdir=ident
                )
                began = time.monotonic()
                try:
                    result = await client.resolve_request(request)
                except ResolverClientError as error:
                    failures.append(str(error))
                    continue
                if not result.paths["exception_dump_dir"].startswith(ident):
                    failures.append(f"reply of another request for {ident}")
                calls.append((began, time.monotonic(), result.policy_version))

        tasks = [asyncio.ensure_future(caller()) for _ in range(32)]
        await asyncio.sleep(0.5)
        _replace(policy, GARBAGE)
        await _wait_event(server, "policy_reload_failed", 1, 10)
        marks["refused"] = time.monotonic()
        await asyncio.sleep(0.5)
        marks["b_written"] = time.monotonic()
        _replace(policy, POLICY_B)
        await _wait_event(server, "policy_reloaded", 1, 10)
        marks["b_loaded"] = time.monotonic()
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)
        final = await client.get_policy()
    return {
        "calls": calls,
        "failures": failures,
        "marks": marks,
        "a": start_version,
        "b": final.policy_version,
        "reload_failures": final.reload_failures,
    }


def test_policy_replaced_with_garbage_mid_load(tmp_path: Path, figures: Figures) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY_A)
    poll = {"NPU_RESOLVER_POLICY_POLL_SECONDS": "0.05"}
    with ProcessServer(["--policy", str(policy)], env=poll) as server:
        outcome = asyncio.run(_garbage_mid_load(server, policy))
    a, b, marks, calls = outcome["a"], outcome["b"], outcome["marks"], outcome["calls"]
    under_garbage = [
        v for began, ended, v in calls if marks["refused"] <= began and ended < marks["b_written"]
    ]
    after_b = [v for began, _ended, v in calls if began > marks["b_loaded"]]
    line = figures(
        "policy garbage",
        requests=len(calls) + len(outcome["failures"]),
        errors=len(outcome["failures"]),
        lost=0,
        answered_under_garbage=len(under_garbage),
        reload_failures=outcome["reload_failures"],
    )
    assert not outcome["failures"], outcome["failures"][:3]
    assert a and b and a != b
    assert under_garbage and set(under_garbage) == {a}, "the last good policy stays in force"
    assert after_b and set(after_b) == {b}
    assert {v for _b, _e, v in calls} == {a, b}
    assert outcome["reload_failures"] == 1, line
