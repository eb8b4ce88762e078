"""The server as a process: `python -m npu_resolver_server`, stopped by PID.

Draining on SIGTERM, several workers on one port, metrics aggregated over workers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from npu_resolver import ResolveRequest
from npu_resolver_client import AsyncResolverClient, ResolverClient, ResolverClientError
from npu_resolver_server import HEALTH_SERVICE, _supervisor
from tests._server import ProcessServer, free_port

GOOD = ResolveRequest(product="atlas-training", config={"hccl_timeout": 600})


async def _burst(
    target: str, server: ProcessServer, calls: int, *, group: bool = False
) -> tuple[int, list[str]]:
    """`calls` concurrent batch calls; SIGTERM (to the server's whole process group with
    `group`) once the server is busy answering them."""
    batch = [
        ResolveRequest(product="atlas-a2", config={"hccl_timeout": 100 + i}) for i in range(40)
    ]
    answered = 0
    async with AsyncResolverClient(target, timeout=30) as client:
        await client.resolve("atlas-a2")  # connected

        async def one() -> str:
            nonlocal answered
            try:
                results = await client.resolve_batch(batch)
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}"
            answered += 1
            return "ok" if len(results) == len(batch) else "short"

        tasks = [asyncio.ensure_future(one()) for _ in range(calls)]
        deadline = time.monotonic() + 60  # only stops a hung test
        while answered < 3:
            if time.monotonic() > deadline or all(task.done() for task in tasks):
                for task in tasks:
                    task.cancel()
                done = [task.result() for task in tasks if task.done() and not task.cancelled()]
                raise AssertionError(f"not 3 batches answered before the signal: {done[:3]}")
            await asyncio.sleep(0.002)
        (server.signal_group if group else server.signal)(signal.SIGTERM)
        outcomes = await asyncio.gather(*tasks)
    return answered, list(outcomes)


def test_sigterm_during_a_burst_loses_no_call() -> None:
    with ProcessServer(["--grace-seconds", "15"]) as server:
        _answered, outcomes = asyncio.run(_burst(server.target, server, 60))
        assert outcomes == ["ok"] * 60, [o for o in outcomes if o != "ok"][:3]
        assert server.wait() == 0
        assert server.events("draining") and server.events("stopped")
    calls = server.events("rpc")
    assert sum(1 for c in calls if c["method"] == "ResolveBatch") == 60
    assert all("env" not in c and "config" not in c for c in calls)


def test_sigterm_to_the_whole_process_group_drains_every_worker_once() -> None:
    """Ctrl-C in a terminal, `kill -- -PGID` and systemd's control-group kill signal the
    supervisor and each worker, which then also gets the supervisor's copy: one stop, drained
    (not the second signal that means 'stop now', which would fail the calls in flight)."""
    with ProcessServer(["--workers", "2", "--grace-seconds", "15"], own_group=True) as server:
        server.wait_for("serving", 2)
        _answered, outcomes = asyncio.run(_burst(server.target, server, 60, group=True))
        assert outcomes == ["ok"] * 60, [o for o in outcomes if o != "ok"][:3]
        assert server.wait() == 0
        assert len(server.events("draining")) == 2, server.raw


def test_a_second_ctrl_c_soon_after_the_first_stops_a_single_process_server_at_once() -> None:
    """Only under --workers does a worker get copies of one signal; a server of one process
    gets a second signal only from someone asking again, and it stops now."""
    with ProcessServer(["--drain-delay-seconds", "30"]) as server:
        server.signal(signal.SIGINT)
        server.wait_for("draining")  # the first was handled: the second is a signal of its own
        server.signal(signal.SIGINT)
        server.wait_for("draining", 2)
        # Stopped well before the 30 s drain delay would have ended (wait raises otherwise).
        assert server.wait(20) == 0, server.raw
        assert server.events("stopped"), server.raw


@pytest.mark.parametrize("delay", ["0", "0.5"])
def test_health_watch_sees_not_serving_then_ends_without_holding_the_drain(delay: str) -> None:
    """An open Watch (client-side health checking keeps one a channel) sees NOT_SERVING, then
    ends when the drain begins: it does not hold the exit for the grace period. With no
    NOT_SERVING delay too."""
    args = ["--grace-seconds", "20", "--drain-delay-seconds", delay]
    with ProcessServer(args) as server, grpc.insecure_channel(server.target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        watch = stub.Watch(health_pb2.HealthCheckRequest(service=HEALTH_SERVICE), timeout=60)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        server.signal(signal.SIGTERM)
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        # The stream ends with OK: the server ended it. A Watch that held the drain would be
        # cut when the grace period ran out, and this would raise (CANCELLED or UNAVAILABLE).
        assert list(watch) == []
        assert server.wait(timeout=60) == 0  # a safety timeout only: fails a hung server
    (draining,) = server.events("draining")
    assert (draining["grace_seconds"], draining["drain_delay_seconds"]) == (20, float(delay))
    assert server.events("stopped")


def test_health_check_says_not_serving_while_calls_are_still_answered() -> None:
    """The drain delay: a probe sees NOT_SERVING after SIGTERM, and calls still get answers,
    so a health-checking balancer moves traffic away before new calls are refused."""
    # A delay long enough that a slow machine still probes and calls within it.
    with ProcessServer(["--drain-delay-seconds", "6", "--grace-seconds", "5"]) as server:
        with grpc.insecure_channel(server.target) as channel, ResolverClient(server.target) as c:
            stub = health_pb2_grpc.HealthStub(channel)
            check = health_pb2.HealthCheckRequest(service=HEALTH_SERVICE)
            assert stub.Check(check, timeout=5).status == health_pb2.HealthCheckResponse.SERVING
            server.signal(signal.SIGTERM)
            server.wait_for("draining")
            deadline = time.monotonic() + 4
            status = health_pb2.HealthCheckResponse.SERVING
            while status == health_pb2.HealthCheckResponse.SERVING and time.monotonic() < deadline:
                status = stub.Check(check, timeout=5).status
                time.sleep(0.05)
            assert status == health_pb2.HealthCheckResponse.NOT_SERVING
            assert c.resolve_request(GOOD).options["hccl_timeout"] == 544  # still answering
        assert server.wait(timeout=60) == 0  # a safety timeout only: fails a hung server
    (draining,) = server.events("draining")
    assert (draining["drain_delay_seconds"], draining["grace_seconds"]) == (6, 5)
    assert server.events("stopped")


def test_a_call_refused_before_any_handler_logs_who_asked_and_for_what(tmp_path: Path) -> None:
    """An audit of the call log can tell who tried the admin call without the token, and which
    path a caller of no method here asked for: their lines carry the peer and the path (cut,
    and written as JSON, so a hostile path forges nothing); the path is never a label."""
    token = tmp_path / "token"
    token.write_text("t0k")
    args = ["--admin-token-file", str(token), "--protect-resolve"]
    with ProcessServer(args) as server:
        server.wait_for("serving")
        with grpc.insecure_channel(server.target) as channel:
            for path in (
                "/npu.resolver.v1.Resolver/ReloadPolicy",
                "/npu.resolver.v1.Resolver/Nope",
                '/x.Y/Z\n{"event": "forged"}',
            ):
                with pytest.raises(grpc.RpcError):
                    channel.unary_unary(path)(b"", timeout=5)
        server.signal(signal.SIGTERM)
        assert server.wait() == 0
    refused, made_up, unknown = server.events("rpc")
    assert (refused["method"], refused["code"]) == ("ReloadPolicy", "UNAUTHENTICATED")
    assert refused["peer"].startswith("ipv4:127.0.0.1:") and "path" not in refused
    assert (made_up["method"], made_up["code"]) == ("unknown", "UNAUTHENTICATED")
    assert made_up["path"] == "/npu.resolver.v1.Resolver/Nope"
    assert (unknown["method"], unknown["code"]) == ("unknown", "UNIMPLEMENTED")
    assert unknown["path"] == '/x.Y/Z\n{"event": "forged"}' and unknown["peer"]
    assert not server.events("forged")


def test_a_sighup_that_finds_the_policy_file_as_it_was_is_acknowledged(tmp_path: Path) -> None:
    """An operator who sends SIGHUP sees it taken: the same file logs policy_reload_unchanged;
    a refused file and the good one put back say so in their own lines (failed, recovered),
    not as unchanged."""
    policy = tmp_path / "policy.toml"
    good = "[profiles.default.defaults]\nhccl_timeout = 3600\n"
    policy.write_text(good)
    env = {"NPU_RESOLVER_POLICY_POLL_SECONDS": "3600"}  # only the signal reloads
    with ProcessServer(["--policy", str(policy)], env=env) as server:
        (serving,) = server.wait_for("serving")
        server.signal(signal.SIGHUP)
        (unchanged,) = server.wait_for("policy_reload_unchanged")
        assert unchanged["policy_version"] == serving["policy_version"]
        policy.write_text("bad = [[[")
        server.signal(signal.SIGHUP)
        server.wait_for("policy_reload_failed")
        policy.write_text(good)
        server.signal(signal.SIGHUP)
        server.wait_for("policy_reload_recovered")
        server.signal(signal.SIGTERM)
        assert server.wait() == 0
    assert len(server.events("policy_reload_unchanged")) == 1


def test_bad_policy_refuses_to_start(tmp_path: Path) -> None:
    bad = tmp_path / "policy.toml"
    bad.write_text("[profiles.default.defaults]\nno_such_option = 1\n")
    server = ProcessServer(["--policy", str(bad)])
    assert server.start_refused() == 2
    failed = server.events("start_failed")
    assert failed and "no_such_option" in failed[0]["error"]
    plain = [line for line in server.raw if not line.startswith("{")]
    assert plain == [
        f"npu-resolve serve: --policy (or NPU_RESOLVER_POLICY) {bad} refused:\n",
        "  - [profiles.default.defaults] no_such_option: unknown option\n",
    ]


def test_a_policy_refused_at_start_is_said_plainly_once_for_all_workers(tmp_path: Path) -> None:
    """A person starting the server reads why, as for a refused setting: the flag, the file
    and each problem on its line, beside the start_failed JSON line; written once, by the first
    worker, however many there are; an unreadable file is said as not read."""
    bad = tmp_path / "policy.toml"
    bad.write_text("[profiles.default.defaults]\nhccl_timeot = 1\n")
    server = ProcessServer(["--workers", "4", "--policy", str(bad)])
    assert server.start_refused() == 2
    plain = [line for line in server.raw if not line.startswith("{")]
    assert plain == [
        f"npu-resolve serve: --policy (or NPU_RESOLVER_POLICY) {bad} refused:\n",
        "  - [profiles.default.defaults] hccl_timeot: unknown option; did you mean "
        "'hccl_timeout'?\n",
    ]
    missing = ProcessServer(["--policy", str(tmp_path / "none.toml")])
    assert missing.start_refused() == 2
    assert [line for line in missing.raw if not line.startswith("{")] == [
        f"npu-resolve serve: --policy (or NPU_RESOLVER_POLICY) {tmp_path / 'none.toml'}: "
        "cannot read: No such file or directory\n"
    ]


def test_two_workers_share_the_port_and_metrics(tmp_path: Path) -> None:
    metrics_port = free_port()
    policy = tmp_path / "policy.toml"
    policy.write_text("[profiles.default.defaults]\nop_debug_level = 0\n")
    args = ["--workers", "2", "--metrics-port", str(metrics_port), "--policy", str(policy)]
    with ProcessServer(args) as server:
        server.wait_for("serving", 2)
        pids: set[str] = set()
        deadline = time.monotonic() + 20
        calls = 0
        while len(pids) < 2 and time.monotonic() < deadline:
            # A new channel (connection) each time: the kernel spreads connections over workers.
            with ResolverClient(server.target) as client:
                assert client.resolve_request(GOOD).ok
                pids.add(client.last_server_pid)
                calls += 1
        assert len(pids) == 2, "both workers answer"
        workers = {str(e["pid"]) for e in server.events("serving")}
        assert pids == workers

        page = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
        text = page.read().decode()
        line = next(
            line
            for line in text.splitlines()
            if line.startswith("npu_resolver_requests_total{")
            and 'method="Resolve"' in line
            and 'code="OK"' in line
        )
        assert float(line.rsplit(" ", 1)[1]) == calls
        assert "npu_resolver_policy_info{" in text
        # Each worker's resident memory, which no process_* series shows under --workers.
        series = 'npu_resolver_worker_resident_memory_bytes{pid="%s"}'
        deadline = time.monotonic() + 5  # each worker sets it with its heartbeat, every second
        while time.monotonic() < deadline:
            page = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
            if all(series % pid in page.read().decode() for pid in workers):
                break
            time.sleep(0.1)
        memory = [_metric(metrics_port, series % pid) for pid in workers]
        assert all(20e6 < value < 2e9 for value in memory), memory

        # One bad push, refused by both workers, is one reload failure.
        policy.write_text("bad = [[[")
        server.signal(signal.SIGHUP)
        server.wait_for("policy_reload_failed", 2)
        assert _reload_failures(metrics_port, 1) == 1
        # While the file on disk is refused, a gauge says so: a worker or pod started now
        # would not start, though the running ones serve the last good policy.
        assert _metric_soon(metrics_port, "npu_resolver_policy_reload_failing", 1) == 1
        policy.write_text("[profiles.default.defaults]\nop_debug_level = 0\n")
        server.signal(signal.SIGHUP)
        server.wait_for("policy_reload_recovered", 2)
        assert _metric_soon(metrics_port, "npu_resolver_policy_reload_failing", 0) == 0

        # Another policy in force: its version's series reads 1, the one it replaced 0.
        (old,) = {e["policy_version"] for e in server.events("policy_loaded")}
        policy.write_text("[profiles.default.defaults]\nop_debug_level = 1\n")
        server.signal(signal.SIGHUP)
        (new,) = {e["policy_version"] for e in server.wait_for("policy_reloaded", 2)}
        assert new != old
        assert _metric_soon(metrics_port, f'npu_resolver_policy_info{{version="{new}"}}', 1) == 1
        assert _metric_soon(metrics_port, f'npu_resolver_policy_info{{version="{old}"}}', 0) == 0

        supervisor = server.pid
        server.signal(signal.SIGTERM)
        assert server.wait() == 0
        assert len(server.events("worker_exited")) == 2
        assert all(e["code"] == 0 for e in server.events("worker_exited"))
        assert supervisor == server.pid


def test_workers_remove_the_temporary_folders_a_killed_supervisor_left(tmp_path: Path) -> None:
    """A supervisor killed outright leaves its metrics and marks folders; in a pod, /tmp
    outlives the container, and each restart would add a few MiB. The next supervisor removes
    those whose supervisor is gone, keeps a running one's, and removes its own when it stops."""
    import subprocess

    ended = subprocess.Popen(["true"])
    ended.wait()  # a pid no process has now
    stale = [tmp_path / f"npu-resolver-{kind}-{ended.pid}-x1" for kind in ("metrics", "workers")]
    running = tmp_path / f"npu-resolver-metrics-{os.getpid()}-x2"  # this test runs: alive
    other = tmp_path / f"npu-resolver-metrics-{ended.pid}"  # not a name the server writes
    for folder in (*stale, running, other):
        folder.mkdir()
        (folder / "counter_1.db").write_bytes(b"0" * 1024)
    args = ["--workers", "2", "--metrics-port", str(free_port())]
    with ProcessServer(args, env={"TMPDIR": str(tmp_path)}) as server:
        server.wait_for("serving", 2)
        assert not any(folder.exists() for folder in stale)
        assert running.exists() and other.exists()
        own = sorted(p.name for p in tmp_path.glob(f"npu-resolver-*-{server.pid}-*"))
        assert [name.split("-")[2] for name in own] == ["metrics", "workers"], own
        server.signal(signal.SIGTERM)
        assert server.wait() == 0
    assert not list(tmp_path.glob(f"npu-resolver-*-{server.pid}-*"))


def _metric(metrics_port: int, name: str) -> float:
    """A series without labels, as the metrics page shows it now."""
    page = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
    line = next(line for line in page.read().decode().splitlines() if line.startswith(name + " "))
    return float(line.rsplit(" ", 1)[1])


def _metric_soon(metrics_port: int, name: str, expected: float) -> float:
    """The series once it shows `expected` (a worker sets it just after its log line), or what
    it shows after 5 s."""
    deadline = time.monotonic() + 5
    while _metric(metrics_port, name) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return _metric(metrics_port, name)


def _reload_failures(metrics_port: int, expected: float) -> float:
    """The counter once it reaches `expected` (a worker counts just after its log line), or
    after 5 s, read again a moment later so that a count too many would show too."""
    deadline = time.monotonic() + 5
    while _reload_failures_now(metrics_port) < expected and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    return _reload_failures_now(metrics_port)


def _reload_failures_now(metrics_port: int) -> float:
    page = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
    line = next(
        line
        for line in page.read().decode().splitlines()
        if line.startswith("npu_resolver_policy_reload_failures_total ")
    )
    return float(line.rsplit(" ", 1)[1])


def last_pid(serving: list[dict[str, Any]], worker: int) -> int:
    """The pid of `worker` among the `serving` events."""
    return next(int(e["pid"]) for e in serving if e["worker"] == worker)


def test_reload_failures_are_counted_while_the_worker_that_counted_is_down(
    tmp_path: Path,
) -> None:
    """One worker counts the failures all workers see alike. When it is killed and its restart
    fails on the bad file, a further bad push is still counted, by a worker that serves, and
    the workers gauges show the server running one worker of two, then none."""
    metrics_port = free_port()
    policy = tmp_path / "policy.toml"
    policy.write_text("[profiles.default.defaults]\nop_debug_level = 0\n")
    env = {"NPU_RESOLVER_POLICY_POLL_SECONDS": "3600"}  # only the signal reloads
    args = ["--workers", "2", "--metrics-port", str(metrics_port), "--policy", str(policy)]
    with ProcessServer(args, env=env) as server:
        serving = server.wait_for("serving", 2)
        assert _metric_soon(metrics_port, "npu_resolver_workers_serving", 2) == 2
        assert _metric(metrics_port, "npu_resolver_workers_configured") == 2
        for text, failures in (("bad = [[[", 1), ("worse = ]]]", 2)):
            staged = tmp_path / "staged.toml"
            staged.write_text(text)
            staged.replace(policy)
            seen = len(server.events("policy_reload_failed"))
            server.signal(signal.SIGHUP)
            server.wait_for("policy_reload_failed", seen + (2 if failures == 1 else 1))
            assert _reload_failures(metrics_port, failures) == failures, server.raw[-10:]
            if failures == 1:  # the first worker goes; its restart fails on the bad file
                first = next(int(e["pid"]) for e in serving if e["worker"] == 0)
                os.kill(first, signal.SIGKILL)
                server.wait_for("worker_restart_failed")
                assert _metric_soon(metrics_port, "npu_resolver_workers_serving", 1) == 1
                assert _metric(metrics_port, "npu_resolver_workers_configured") == 2
                # A restart that could not start counted nothing: its metric files are gone
                # (one a try, every 5 s, while the file stays refused).
                failed = [
                    e["worker_pid"]
                    for e in server.events("worker_exited")
                    if e["code"] == 2 and e["worker"] == 0
                ]
                (folder,) = Path(tempfile.gettempdir()).glob(f"npu-resolver-metrics-{server.pid}-*")
                assert failed and not [p for p in failed if list(folder.glob(f"*_{p}.db"))]
                assert list(folder.glob(f"*_{last_pid(serving, 1)}.db"))  # a serving one's
        # The last worker goes too: the supervisor, which serves the page, says none serves.
        last = next(int(e["pid"]) for e in serving if e["worker"] == 1)
        os.kill(last, signal.SIGKILL)
        assert _metric_soon(metrics_port, "npu_resolver_workers_serving", 0) == 0
        assert _metric(metrics_port, "npu_resolver_workers_configured") == 2
        # What the serving count no longer shows once workers are back: how many ended, why.
        exits = 'npu_resolver_worker_exits_total{reason="%s"}'
        assert _metric(metrics_port, exits % "died") == 2
        assert _metric(metrics_port, exits % "start_failed") >= 1
        assert _metric(metrics_port, exits % "hung") == 0


def test_a_worker_stopped_by_a_signal_of_its_own_is_not_counted_as_an_exit() -> None:
    """SIGTERM to one worker: it drains and exits 0, is restarted, and is no failure: not for
    the worker_exits counter (whose every increase an alert reads), nor for the budget of
    restarts that stops a server whose workers keep dying (5 a minute): an operator recycling
    workers one by one, six times here, took the whole server down."""
    metrics_port = free_port()
    args = ["--workers", "2", "--metrics-port", str(metrics_port)]
    args += ["--drain-delay-seconds", "0", "--grace-seconds", "0"]
    with ProcessServer(args) as server:
        serving = server.wait_for("serving", 2)
        for round_ in range(6):
            os.kill(int(serving[-1]["pid"]), signal.SIGTERM)
            serving = server.wait_for("serving", 3 + round_, timeout=30)
        assert not server.events("workers_keep_dying")
        assert server.proc is not None and server.proc.poll() is None
        exits = 'npu_resolver_worker_exits_total{reason="%s"}'
        assert [_metric(metrics_port, exits % r) for r in ("died", "hung", "start_failed")] == [
            0,
            0,
            0,
        ]
        server.signal(signal.SIGTERM)
        assert server.wait() == 0


def test_one_worker_says_it_is_the_one_serving() -> None:
    metrics_port = free_port()
    with ProcessServer(["--metrics-port", str(metrics_port)]) as server:
        server.wait_for("serving")
        assert _metric_soon(metrics_port, "npu_resolver_workers_serving", 1) == 1
        assert _metric(metrics_port, "npu_resolver_workers_configured") == 1


def test_reload_policy_under_workers_reaches_every_worker(tmp_path: Path) -> None:
    """One worker answers the call; every worker reads the file (the watcher is slowed here,
    so only the call can have told them)."""
    policy = tmp_path / "policy.toml"
    policy.write_text("[profiles.default.defaults]\nhccl_timeout = 3600\n")
    metrics_port = free_port()
    args = ["--workers", "2", "--policy", str(policy), "--metrics-port", str(metrics_port)]
    env = {"NPU_RESOLVER_POLICY_POLL_SECONDS": "3600"}
    with ProcessServer(args, env=env) as server:
        server.wait_for("serving", 2)
        # No admin token: ReloadPolicy is open, and the server says so once.
        assert len(server.events("reload_unprotected")) == 1
        staged = tmp_path / "staged.toml"
        staged.write_text("[profiles.default.defaults]\nhccl_timeout = 7200\n")
        staged.replace(policy)
        with ResolverClient(server.target) as client:
            result = client.reload_policy()
        assert result.changed and not result.error
        reloaded = server.wait_for("policy_reloaded", 2)
        assert {e["pid"] for e in reloaded} == {e["pid"] for e in server.events("serving")}
        answers: dict[str, object] = {}
        deadline = time.monotonic() + 20
        while len(answers) < 2 and time.monotonic() < deadline:
            with ResolverClient(server.target) as client:  # a new connection: any worker
                answer = client.resolve("atlas-a2")
                answers[client.last_server_pid] = answer.options["hccl_timeout"]
        assert answers and set(answers.values()) == {7200}, answers
        assert len(answers) == 2
        # One series per policy version across the workers; only the one in force reads 1.
        page = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
        info = [
            line
            for line in page.read().decode().splitlines()
            if line.startswith("npu_resolver_policy_info{")
        ]
        assert len(info) == 2 and not any("pid=" in line for line in info), info
        assert [line.rsplit(" ", 1)[1] for line in info if line.endswith(" 1.0")] == ["1.0"]
        assert f'version="{result.version}"' in next(x for x in info if x.endswith(" 1.0"))
        # Every line of the log is JSON, a policy change under --workers included (where
        # prometheus_client warns, in a line of its own, of a series it cannot remove).
        assert [line for line in server.raw if not line.startswith("{")] == []

        # A failed call is one reload failure, whichever worker answered it.
        policy.write_text("bad = [[[")
        answered: list[str] = []
        while len(set(answered)) < 2 and len(answered) < 40:
            with ResolverClient(server.target) as client:  # a new connection: any worker
                assert client.reload_policy().error
                answered.append(client.last_server_pid)
        assert len(set(answered)) == 2, answered
        page = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
        failures = next(
            line
            for line in page.read().decode().splitlines()
            if line.startswith("npu_resolver_policy_reload_failures_total ")
        )
        assert float(failures.rsplit(" ", 1)[1]) == len(answered), answered


def _slow_policy(hccl_timeout: int, profiles: int = 4000) -> str:
    """A policy whose load takes a few hundred milliseconds (every profile locks a value)."""
    lines = ["[profiles.default.defaults]", f"hccl_timeout = {hccl_timeout}"]
    for i in range(profiles):
        lines += [f"[profiles.team{i}.locked]", f"hccl_timeout = {1000 + i}"]
    return "\n".join(lines) + "\n"


def test_reload_policy_under_workers_answers_once_every_worker_has_read_the_file(
    tmp_path: Path,
) -> None:
    """The call's reply means the policy is in force: the caller's next requests meet it
    whichever worker takes them, even while a large file takes the other worker a while."""
    policy = tmp_path / "policy.toml"
    policy.write_text(_slow_policy(3600))
    env = {"NPU_RESOLVER_POLICY_POLL_SECONDS": "3600"}  # only the call can tell them
    with ProcessServer(["--workers", "2", "--policy", str(policy)], env=env) as server:
        server.wait_for("serving", 2, timeout=60)
        staged = tmp_path / "staged.toml"
        staged.write_text(_slow_policy(7200))
        staged.replace(policy)
        with ResolverClient(server.target, timeout=30) as client:
            result = client.reload_policy()
        assert result.changed and not result.error
        answers: list[tuple[str, str, object]] = []
        deadline = time.monotonic() + 20
        while len({pid for pid, _, _ in answers}) < 2 and time.monotonic() < deadline:
            with ResolverClient(server.target) as client:  # a new connection: any worker
                answer = client.resolve("atlas-a2")
                answers.append(
                    (client.last_server_pid, answer.policy_version, answer.options["hccl_timeout"])
                )
        assert len({pid for pid, _, _ in answers}) == 2, answers
        assert {(version, value) for _, version, value in answers} == {(result.version, 7200)}
        assert not server.events("reload_not_confirmed")


def test_get_policy_counts_failed_reloads_server_wide_whichever_worker_answers(
    tmp_path: Path,
) -> None:
    """GetPolicy's reload_failures is the server's: each failed ReloadPolicy call counts once,
    and the count never goes back when the next call reaches the other worker (each worker
    counted its own: a caller polling it saw 8, 9, 8)."""
    policy = tmp_path / "policy.toml"
    policy.write_text("[profiles.default.defaults]\nhccl_timeout = 3600\n")
    env = {"NPU_RESOLVER_POLICY_POLL_SECONDS": "3600"}  # only the calls read the file
    with ProcessServer(["--workers", "2", "--policy", str(policy)], env=env) as server:
        server.wait_for("serving", 2)
        policy.write_text("[profiles.default.defaults\n")
        counts: list[int] = []
        pids: set[str] = set()
        calls = 0
        deadline = time.monotonic() + 60
        while (calls < 12 or len(pids) < 2) and calls < 60 and time.monotonic() < deadline:
            with ResolverClient(server.target, timeout=10) as client:  # a new connection
                assert client.reload_policy().error
                calls += 1
                counts.append(client.get_policy().reload_failures)
                pids.add(client.last_server_pid)
        assert len(pids) == 2, counts
        assert counts == list(range(1, calls + 1))


def test_a_stop_while_the_workers_load_the_policy_is_a_clean_stop(tmp_path: Path) -> None:
    """A worker still starting ends by the stop signal itself (its handlers are not set yet):
    that is the stop asked for, exit 0, not a worker failure (exit 1, WARNING lines)."""
    policy = tmp_path / "policy.toml"
    policy.write_text(_slow_policy(3600, profiles=12000))  # a load of about a second

    def loading(server: ProcessServer) -> None:
        server.wait_for("worker_started", 2)  # the workers then read the file a while

    server = _stopped_before_serving(["--workers", "2", "--policy", str(policy)], loading)
    exits = server.events("worker_exited")
    assert len(exits) == 2 and {e["level"] for e in exits} == {"INFO"}, server.raw


def _stopped_before_serving(
    args: list[str], loading: Callable[[ProcessServer], None]
) -> ProcessServer:
    """A server sent SIGTERM once `loading` returns, stopped with exit 0 before it served. A
    test paused for seconds on a loaded machine sends its stop after the load, which tests
    nothing (and is no failure): it tries again, three times in all."""
    for _ in range(3):
        server = ProcessServer(args)
        try:
            server.start(ready_events=0)
            loading(server)
            server.signal(signal.SIGTERM)
            assert server.wait() == 0, server.raw
        finally:
            server.stop()
        if not server.events("serving"):
            return server
    raise AssertionError(f"the stop came too late to test this, three times: {server.raw}")


def _catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler of its own for the signal (/proc's SigCgt mask)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(line for line in status.splitlines() if line.startswith("SigCgt:"))[7:], 16)
    return bool(caught >> (signum - 1) & 1)


def test_a_stop_while_one_worker_loads_the_policy_ends_it_at_once_and_cleanly(
    tmp_path: Path,
) -> None:
    """As a container's PID 1 a process has no default action for SIGTERM: a stop before the
    event loop takes it would be ignored, and the pod would wait out its grace period. The
    server takes it from its first steps: exit 0 with a 'stopped' line, nothing to drain."""
    policy = tmp_path / "policy.toml"
    policy.write_text(_slow_policy(3600, profiles=12000))

    def loading(server: ProcessServer) -> None:  # once the start takes SIGTERM, not before
        assert server.proc is not None
        deadline = time.monotonic() + 30
        while not _catches(server.proc.pid, signal.SIGTERM):
            assert time.monotonic() < deadline and server.proc.poll() is None, server.raw
            time.sleep(0.005)

    server = _stopped_before_serving(["--policy", str(policy)], loading)
    stopped = server.events("stopped")
    assert stopped and stopped[0]["signal"] == "SIGTERM", server.raw
    assert not any("Traceback" in line for line in server.raw), server.raw


def test_a_stop_that_lands_inside_a_codec_still_names_its_signal() -> None:
    """The start encodes host names ('idna'); a SIGTERM landing there reached the 'stopped' line
    as "encoding with 'idna' codec failed (…: SIGTERM)", Python's re-raise of it, not SIGTERM."""
    import codecs

    from npu_resolver_server._start_signals import (
        StoppedWhileStartingError,
        _stop_while_starting,
        stop_held,
    )

    def stop_inside(data: object, errors: str = "strict") -> NoReturn:
        _stop_while_starting(signal.SIGTERM, None)
        raise AssertionError("the stop handler returned")

    def search(name: str) -> codecs.CodecInfo | None:
        return codecs.CodecInfo(stop_inside, stop_inside, name=name) if name == "stopping" else None

    codecs.register(search)
    try:
        with pytest.raises(StoppedWhileStartingError) as stop:
            "host".encode("stopping")
    finally:
        codecs.unregister(search)
        assert stop_held() == "SIGTERM"  # noted too; forgotten here, as this process serves on
    assert "codec failed" in str(stop.value)  # the re-raise this test is about
    assert stop.value.signal_name == "SIGTERM"


_LOST_STOP = """
import asyncio, json, os, signal, sys
from npu_resolver_server import ServerSettings, _logging
from npu_resolver_server._app import serve
from npu_resolver_server._start_signals import hold_stops
from npu_resolver_server._supervisor import run_workers

_logging.configure("INFO", "all")  # as a worker's start sets it up


def send_stop() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(10_000):  # the handler runs here, where Python only reports its exception
        pass


class SendsStop:
    def __del__(self) -> None:
        send_stop()


async def one_worker(settings: ServerSettings) -> int:
    asyncio.get_running_loop().call_soon(send_stop)  # in an event-loop callback
    await asyncio.sleep(0.1)
    return await asyncio.wait_for(serve(settings), 20)


settings = ServerSettings(port=int(sys.argv[2]), workers=2 if sys.argv[1] == "workers" else 1)
hold_stops()
if sys.argv[1] == "workers":
    SendsStop()  # in a finalizer
    code = run_workers(settings)
else:
    code = asyncio.run(one_worker(settings))
print(json.dumps(code))
"""


@pytest.mark.parametrize("where", ["one", "workers"])
def test_a_stop_whose_exception_python_only_reports_is_still_a_stop(where: str) -> None:
    """A stop raises while the server starts; raised in an event-loop callback or a finalizer,
    Python reports the exception and goes on, and the server served on, deaf to the stop it
    was sent (under a supervisor, each worker took the inherited stop and was restarted, over
    and over). The stop is noted too: the process that takes the signals over ends at once."""
    import subprocess

    done = subprocess.run(
        [sys.executable, "-c", _LOST_STOP, where, str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "StoppedWhileStartingError" in done.stderr, done.stderr  # reported, not raised
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", done.stdout
    assert "stopped" in done.stderr and "nothing to drain" in done.stderr, done.stderr
    for event in ("serving", "draining", "worker_started"):
        assert event not in done.stderr, done.stderr


def test_a_reload_asked_for_while_the_workers_load_the_policy_is_neither_fatal_nor_lost(
    tmp_path: Path,
) -> None:
    """SIGHUP's default action ends a process: a reload asked for (a ReloadPolicy call, a
    config manager) while a worker still loads a large policy once killed it. It is now noted
    and carried out once the worker serves."""
    policy = tmp_path / "policy.toml"
    policy.write_text(_slow_policy(3600))
    env = {"NPU_RESOLVER_POLICY_POLL_SECONDS": "3600"}  # only the signal can tell them
    server = ProcessServer(["--workers", "2", "--policy", str(policy)], env=env)
    try:
        server.start(ready_events=0)
        server.wait_for("worker_started", 2)
        staged = tmp_path / "staged.toml"
        staged.write_text(_slow_policy(7200))
        staged.replace(policy)
        server.signal(signal.SIGHUP)  # the workers are still reading the first file
        server.wait_for("serving", 2, timeout=60)
        latest: dict[str, object] = {}
        deadline = time.monotonic() + 20
        while set(latest.values()) != {7200} or len(latest) < 2:
            assert time.monotonic() < deadline, latest
            with ResolverClient(server.target) as client:  # a new connection: any worker
                answer = client.resolve("atlas-a2")
                latest[client.last_server_pid] = answer.options["hccl_timeout"]
        assert not server.events("worker_exited")
        server.signal(signal.SIGTERM)
        assert server.wait() == 0
    finally:
        server.stop()


def test_reload_policy_replies_within_its_deadline_while_a_worker_cannot_read_the_file(
    tmp_path: Path,
) -> None:
    """A worker that never catches up (stopped here) delays the reply until just before the
    call's deadline, never fails it, and is named in the log."""
    policy = tmp_path / "policy.toml"
    policy.write_text("[profiles.default.defaults]\nhccl_timeout = 3600\n")
    # The stopped worker stands for one slow to read the file: not one to kill as hung.
    env = {"NPU_RESOLVER_POLICY_POLL_SECONDS": "3600", "NPU_RESOLVER_HUNG_WORKER_SECONDS": "3600"}
    with ProcessServer(["--workers", "2", "--policy", str(policy)], env=env) as server:
        running, stopped = (int(e["pid"]) for e in server.wait_for("serving", 2))
        os.kill(stopped, signal.SIGSTOP)
        try:
            policy.write_text("[profiles.default.defaults]\nhccl_timeout = 7200\n")
            result = None
            deadline = time.monotonic() + 60
            while result is None and time.monotonic() < deadline:
                with ResolverClient(server.target, timeout=1) as client:  # any worker
                    try:
                        client.resolve("atlas-a2")
                    except ResolverClientError:
                        continue  # the stopped worker took the connection
                    assert client.last_server_pid == str(running)
                    started = time.monotonic()
                    result = client.reload_policy(timeout=6)
                    waited = time.monotonic() - started
            assert result is not None and result.changed and not result.error
            # It waited for the stopped worker until just before the deadline (half a second
            # before it), and replied in time: the call did not fail.
            assert waited >= 4
            late = server.wait_for("reload_not_confirmed")
            assert late[0]["worker_pids"] == [stopped]
        finally:
            os.kill(stopped, signal.SIGCONT)
        server.wait_for("policy_reloaded", 2)  # the stopped worker reads it once resumed


def test_a_taken_metrics_port_stops_the_start_with_exit_2(tmp_path: Path) -> None:
    """Like a taken gRPC port: a start_failed line and exit 2, no traceback, with one worker
    or several; the line is an ERROR, written under --log-level ERROR (an alert on errors sees
    why the server never started), and nothing below that level is."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for workers in ("1", "2"):
            server = ProcessServer(
                ["--workers", workers, "--metrics-port", str(port), "--log-level", "ERROR"]
            )
            assert server.start_refused() == 2
            failed = server.events("start_failed")
            assert failed and f"metrics port {port}" in failed[0]["error"], server.raw
            assert failed[0]["level"] == "ERROR", server.raw
            assert not any("Traceback" in line for line in server.raw)
            levels = {json.loads(line)["level"] for line in server.raw if line.startswith("{")}
            assert levels == {"ERROR"}, server.raw


def test_workers_do_not_join_another_server_already_on_the_port() -> None:
    """SO_REUSEPORT lets a server's workers share its port; a second `--workers` server on a
    port another one serves must not quietly take part of its calls: exit 2, as one worker."""
    with ProcessServer(["--workers", "2"]) as first:
        first.wait_for("serving", 2)
        second = ProcessServer(["--workers", "2"])
        second.port = first.port
        second.args = ["--port", str(first.port), "--workers", "2"]
        assert second.start_refused() == 2
        failed = second.events("start_failed")
        assert failed and f"port {first.port}" in failed[0]["error"], second.raw
        assert not second.events("worker_started")
        with ResolverClient(first.target) as client:
            assert client.resolve_request(GOOD).ok


def test_one_worker_on_a_taken_port_says_why_in_json() -> None:
    """gRPC says only "Failed to bind", and writes its reason in a line of its own format that a
    JSON log pipeline drops: the server says the port, the host and the reason itself."""
    with ProcessServer() as first:
        second = ProcessServer(["--log-level", "ERROR"])
        second.port = first.port
        second.args = ["--port", str(first.port), "--host", "127.0.0.1", "--log-level", "ERROR"]
        assert second.start_refused() == 2
        (failed,) = second.events("start_failed")
        assert failed["error"] == f"port {first.port} on 127.0.0.1: Address already in use"
        assert all(line.startswith("{") for line in second.raw), second.raw


def _running(pid: int) -> bool:
    """A process that exists and is not a zombie waiting to be reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def test_workers_stop_when_their_supervisor_is_killed() -> None:
    """Killed with SIGKILL, the supervisor cannot forward a stop: its workers notice they were
    orphaned and drain and stop, rather than serve on with no one to restart or reload them."""
    env = {"NPU_RESOLVER_DRAIN_DELAY_SECONDS": "0", "NPU_RESOLVER_GRACE_SECONDS": "1"}
    with ProcessServer(["--workers", "2"], env=env) as server:
        workers = [int(e["pid"]) for e in server.wait_for("serving", 2)]
        server.signal(signal.SIGKILL)
        deadline = time.monotonic() + 20
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_running(pid) for pid in workers)
        assert len(server.wait_for("supervisor_gone", 2)) == 2  # their last lines may lag
        draining = server.wait_for("draining", 2)
        assert [e["signal"] for e in draining] == ["none: the supervisor is gone"] * 2


IGNORING_SIGCHLD = (
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); "
    "os.execv(sys.argv[1], sys.argv[1:])",
)


def test_a_killed_worker_is_restarted_even_when_the_launcher_ignores_sigchld() -> None:
    """An ignored SIGCHLD is inherited across exec; left so, the kernel would reap a dead worker
    before the supervisor saw it: no restart, and an exit status of 0 that hides the death."""
    env = {"NPU_RESOLVER_DRAIN_DELAY_SECONDS": "0", "NPU_RESOLVER_GRACE_SECONDS": "1"}
    with ProcessServer(["--workers", "2"], env=env, launcher=IGNORING_SIGCHLD) as server:
        victim = int(server.wait_for("serving", 2)[0]["pid"])
        os.kill(victim, signal.SIGKILL)
        exited = server.wait_for("worker_exited")
        assert (exited[0]["worker_pid"], exited[0]["code"]) == (victim, -signal.SIGKILL)
        assert victim not in {e["pid"] for e in server.wait_for("serving", 3)[2:]}
        server.signal(signal.SIGTERM)
        assert server.wait(20) == 0


def test_a_certificate_and_a_key_that_do_not_match_stop_the_start_saying_so(
    tmp_path: Path,
) -> None:
    """gRPC reports such a pair as a failure to bind the port; the server names the files,
    and exits 2 whether it runs one worker or several."""
    import trustme

    ca = trustme.CA()
    ca.issue_cert("localhost").cert_chain_pems[0].write_to_path(tmp_path / "cert.pem")
    ca.issue_cert("localhost").private_key_pem.write_to_path(tmp_path / "key.pem")
    tls = ["--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem")]
    for workers in ("1", "2"):
        server = ProcessServer(["--workers", workers, *tls])
        assert server.start_refused() == 2, server.raw
        failed = server.events("start_failed")
        assert failed and "does not belong to --tls-cert" in failed[0]["error"], server.raw


def test_plaintext_calls_to_a_tls_port_leave_only_json_lines_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gRPC writes a failed handshake as a plain-text INFO line: each plaintext client or port
    scan put one among the JSON lines a log pipeline parses."""
    import trustme

    ca = trustme.CA()
    issued = ca.issue_cert("localhost", "127.0.0.1")
    issued.private_key_pem.write_to_path(tmp_path / "key.pem")
    (tmp_path / "cert.pem").write_bytes(b"".join(b.bytes() for b in issued.cert_chain_pems))
    tls = ["--tls-cert", str(tmp_path / "cert.pem"), "--tls-key", str(tmp_path / "key.pem")]
    suppress = contextlib.suppress
    monkeypatch.delenv("GRPC_VERBOSITY", raising=False)  # the server's own default
    with ProcessServer(["--workers", "2", *tls]) as server:
        server.wait_for("serving", 2)
        for _ in range(3):
            with grpc.insecure_channel(server.target) as channel, suppress(grpc.RpcError):
                channel.unary_unary("/npu.resolver.v1.Resolver/ListProducts")(b"", timeout=2)
        server.signal(signal.SIGTERM)
        assert server.wait() == 0, server.raw
    assert server.raw and all(line.startswith("{") for line in server.raw), server.raw


def test_the_supervisors_modules_load_no_grpc() -> None:
    """--workers forks its workers before any gRPC object exists (gRPC does not survive a fork):
    the settings, the CLI and the supervisor must not import it, nor anything they use (the
    client's credential checks among them)."""
    import subprocess
    import sys

    code = (
        "import sys, npu_resolver_server, npu_resolver_server._cli, "
        "npu_resolver_server._supervisor, npu_resolver_server.settings, "
        "npu_resolver_client.credentials\n"
        "print(sorted(m for m in sys.modules if m == 'grpc' or m.startswith('grpc.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def _ignores_sighup(pid: int) -> bool:
    """Whether the process ignores SIGHUP now (bit 0 of SigIgn, signal 1)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & 1)
    return False


def test_a_sighup_while_the_server_starts_does_not_end_it() -> None:
    """A SIGHUP asks for the policy file to be read again: one that comes before the server
    first reads it (a ConfigMap update at a pod's start) must not kill the start with the
    signal's default action; the start reads the file anyway."""
    for _attempt in range(3):  # this process, descheduled, may look only once it serves
        server = ProcessServer().start(ready_events=0)
        try:
            deadline = time.monotonic() + 20
            while not _ignores_sighup(server.pid):
                assert time.monotonic() < deadline, "SIGHUP was never held during the start"
                assert server.proc is not None and server.proc.poll() is None
                time.sleep(0.001)
            if server.events("serving"):  # the window was missed: start another
                continue
            server.signal(signal.SIGHUP)  # held from before the server serves
            server.wait_for("serving")
            with ResolverClient(server.target) as client:
                assert client.resolve_request(GOOD).options["hccl_timeout"] == 544
        finally:
            server.stop()
        assert server.wait() == 0
        return
    raise AssertionError("each of 3 servers was serving before the test could signal it")


def _listening_inodes(port: int) -> set[str]:
    """The socket inodes listening on `port` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text(encoding="ascii").splitlines()[1:]:
                fields = row.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                    found.add(fields[9])
    return found


def _holds(pid: int, inodes: set[str]) -> bool:
    links = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            links.add(os.readlink(fd))
    return any(f"socket:[{inode}]" in links for inode in inodes)


def test_only_the_supervisor_holds_the_metrics_port() -> None:
    """Workers are forked after the supervisor listens for metrics: a worker that kept the
    socket would hold the port open, answering nothing, after a supervisor killed outright."""
    metrics_port = free_port()
    with ProcessServer(["--workers", "2", "--metrics-port", str(metrics_port)]) as server:
        workers = [int(e["pid"]) for e in server.wait_for("serving", 2)]
        inodes = _listening_inodes(metrics_port)
        assert inodes and _holds(server.pid, inodes)
        assert not any(_holds(pid, inodes) for pid in workers)
        page = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
        assert b"npu_resolver_policy_info" in page.read()


def test_a_hung_worker_is_killed_and_restarted() -> None:
    """A worker that stops turning its event loop (here SIGSTOP) keeps its share of new
    connections and answers none; the supervisor sees its heartbeat stop, kills it and starts
    another, and every connection is answered again."""
    env = {"NPU_RESOLVER_HUNG_WORKER_SECONDS": "3"}
    metrics_port = free_port()
    with ProcessServer(["--workers", "2", "--metrics-port", str(metrics_port)], env=env) as server:
        frozen, other = (int(e["pid"]) for e in server.wait_for("serving", 2))
        os.kill(frozen, signal.SIGSTOP)
        try:
            (hung,) = server.wait_for("worker_hung", timeout=30)
        finally:  # a stopped process outlives every stop signal but this one
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen, signal.SIGKILL)
        assert hung["worker_pid"] == frozen and hung["level"] == "ERROR"
        assert hung["silent_s"] >= 3
        restarted = server.wait_for("serving", 3, timeout=30)[2]
        assert int(restarted["pid"]) not in (frozen, other)
        for _ in range(10):  # new connections, spread by the kernel over both workers
            with ResolverClient(server.target, timeout=5) as client:
                assert client.resolve_request(GOOD).ok
                assert client.last_server_pid in {str(other), str(restarted["pid"])}
        assert not _running(frozen)
        exits = 'npu_resolver_worker_exits_total{reason="%s"}'
        assert (_metric(metrics_port, exits % "hung"), _metric(metrics_port, exits % "died")) == (
            1,
            0,
        )
        server.signal(signal.SIGTERM)
        assert server.wait() == 0


def test_a_worker_still_there_past_the_stops_grace_is_killed_and_the_stop_ends() -> None:
    """A worker that cannot drain (here SIGSTOP) held the supervisor forever: a pod then ended
    by the kubelet's SIGKILL with nothing in the log. Past the drain delay, the grace and a
    margin it is killed as hung (phase stopping), and the exit status says the stop was not
    clean."""
    args = ["--workers", "2", "--drain-delay-seconds", "0", "--grace-seconds", "1"]
    with ProcessServer(args) as server:
        frozen, other = (int(e["pid"]) for e in server.wait_for("serving", 2))
        os.kill(frozen, signal.SIGSTOP)
        began = time.monotonic()
        try:
            server.signal(signal.SIGTERM)
            assert server.wait(60) == 1, server.raw
        finally:  # a stopped process outlives every stop signal but this one
            with contextlib.suppress(ProcessLookupError):
                os.kill(frozen, signal.SIGKILL)
        (hung,) = server.events("worker_hung")
        assert hung["worker_pid"] == frozen and hung["phase"] == "stopping", hung
        assert hung["silent_s"] >= 1 + _supervisor.STOP_MARGIN_S
        assert time.monotonic() - began < 30
        exits = {e["worker_pid"]: e["code"] for e in server.events("worker_exited")}
        assert exits == {other: 0, frozen: -signal.SIGKILL}, server.raw


def test_a_worker_stuck_before_it_serves_is_killed_and_restarted(tmp_path: Path) -> None:
    """A worker stopped while it still starts (here SIGSTOP while it reads a large policy,
    before its first heartbeat; in the field, a start stuck after the fork) never beats: it is
    killed once its start allowance (NPU_RESOLVER_WORKER_START_SECONDS) passes, and another is
    started that serves."""
    env = {"NPU_RESOLVER_HUNG_WORKER_SECONDS": "3", "NPU_RESOLVER_WORKER_START_SECONDS": "6"}
    policy = tmp_path / "policy.toml"
    policy.write_text(_slow_policy(600, profiles=12000))  # its reading holds the start ~1 s
    server = ProcessServer(["--workers", "2", "--policy", str(policy)], env=env)
    server.start(ready_events=0)
    stopped = 0
    try:
        stopped = int(server.wait_for("worker_started")[0]["worker_pid"])
        os.kill(stopped, signal.SIGSTOP)
        (hung,) = server.wait_for("worker_hung", timeout=30)
        assert hung["worker_pid"] == stopped and hung["phase"] == "starting"
        assert hung["silent_s"] >= 6
        serving = [int(e["pid"]) for e in server.wait_for("serving", 2, timeout=30)]
        assert stopped not in serving
        assert not _running(stopped)
        with ResolverClient(server.target, timeout=5) as client:
            assert client.resolve_request(GOOD).ok
    finally:
        if stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGKILL)
        server.stop()
    assert server.proc is not None and server.proc.returncode == 0


def test_a_whole_server_stopped_and_resumed_kills_no_worker() -> None:
    """Ctrl-Z then fg, or a paused container: the supervisor stopped too, so the workers'
    silence meanwhile is not theirs to answer for; silence is what the supervisor watched."""
    env = {"NPU_RESOLVER_HUNG_WORKER_SECONDS": "3"}
    with ProcessServer(["--workers", "2"], env=env, own_group=True) as server:
        server.wait_for("serving", 2)
        server.signal_group(signal.SIGSTOP)
        time.sleep(6)
        server.signal_group(signal.SIGCONT)
        time.sleep(4)  # past the limit again: a worker judged on the pause would be gone
        for _ in range(4):
            with ResolverClient(server.target, timeout=5) as client:
                assert client.resolve_request(GOOD).ok
        assert not server.events("worker_hung")
        assert len(server.events("serving")) == 2  # no worker was restarted


def test_a_whole_server_paused_during_its_stop_is_no_overdue_stop() -> None:
    """Ctrl-C then Ctrl-Z, or a container paused as it stops: the time nobody ran is not the
    workers' delay (the supervisor killed both as hung and exited 1)."""
    args = ["--workers", "2", "--drain-delay-seconds", "1", "--grace-seconds", "0"]
    with ProcessServer(args, own_group=True) as server:
        server.wait_for("serving", 2)
        server.signal(signal.SIGTERM)
        server.wait_for("draining", 2)
        server.signal_group(signal.SIGSTOP)
        time.sleep(1 + _supervisor.STOP_MARGIN_S + 2)
        server.signal_group(signal.SIGCONT)
        code = server.wait()
        if code != 0 or server.events("worker_hung"):  # every line: which stop clock was wrong
            pytest.fail(f"exit {code}:\n" + "\n".join(server.raw))


def test_a_draining_worker_is_not_taken_for_a_hung_one() -> None:
    """A worker told to stop drains its calls for up to its grace period, longer than the
    supervisor's patience with silence: it beats through the drain and is not killed."""
    import threading

    from grpc_reflection.v1alpha import reflection_pb2

    env = {"NPU_RESOLVER_HUNG_WORKER_SECONDS": "3"}
    with ProcessServer(["--workers", "2", "--grace-seconds", "7"], env=env) as server:
        workers = [int(e["pid"]) for e in server.wait_for("serving", 2)]
        release = threading.Event()

        def held() -> Iterator[reflection_pb2.ServerReflectionRequest]:
            yield reflection_pb2.ServerReflectionRequest(list_services="")
            release.wait(30)  # then kept open, and in flight, through the drain

        channels = [grpc.insecure_channel(server.target) for _ in range(8)]
        calls = [
            channel.stream_stream(
                "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
            )(held(), timeout=20)
            for channel in channels
        ]
        for call in calls:
            assert next(call).list_services_response.service  # answered: in flight at a worker
        killed = time.monotonic()
        for pid in workers:  # each worker alone, as an operator recycling it would
            os.kill(pid, signal.SIGTERM)
        exited = server.wait_for("worker_exited", 2, timeout=30)
        drained = time.monotonic() - killed
        release.set()
        # A worker held a call through its drain, past the 3 s of silence the supervisor
        # allows (else this test proves nothing), and still was not taken for a hung one.
        assert drained > 3
        for call in calls:
            call.cancel()
        for channel in channels:
            channel.close()
        assert not server.events("worker_hung")
        assert [e["code"] for e in exited] == [0, 0]


def test_a_hung_worker_is_found_after_every_worker_was_recycled() -> None:
    """Every worker stopped and started again while the supervisor runs on: the folder the
    heartbeats go to is the supervisor's, so the new workers' silence is still watched (the
    last worker to stop had removed it, and hung workers went unseen from then on)."""
    env = {"NPU_RESOLVER_HUNG_WORKER_SECONDS": "3"}
    with ProcessServer(["--workers", "2"], env=env) as server:
        for pid in (int(e["pid"]) for e in server.wait_for("serving", 2)):
            os.kill(pid, signal.SIGTERM)  # each recycled, as an operator would
        restarted = [int(e["pid"]) for e in server.wait_for("serving", 4, timeout=60)[2:]]
        os.kill(restarted[0], signal.SIGSTOP)
        try:
            (hung,) = server.wait_for("worker_hung", timeout=30)
            assert hung["worker_pid"] == restarted[0]
        finally:  # a stopped process outlives every stop signal but this one
            with contextlib.suppress(ProcessLookupError):
                os.kill(restarted[0], signal.SIGKILL)
