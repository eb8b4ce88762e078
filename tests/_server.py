"""Real resolver servers for the gRPC tests: in a thread of this process, or as a subprocess.

Both listen on 127.0.0.1 on a free port. Subprocess servers are stopped by their PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import pytest

from npu_resolver import PolicyLike
from npu_resolver_server import PolicyStore, ServerSettings

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThreadServer:
    """A grpc.aio resolver server running on its own event loop in a daemon thread."""

    def __init__(
        self,
        settings: ServerSettings | None = None,
        *,
        policy: PolicyLike | None = None,
        store: PolicyStore | None = None,
        metrics: Any = None,
    ) -> None:
        self.settings = settings or ServerSettings(port=0, grace_seconds=2.0)
        self.store = store if store is not None else PolicyStore.fixed(policy)
        self.metrics = metrics
        self.port = 0
        self.built: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._done: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        from npu_resolver_server import create_server

        try:
            self._loop = asyncio.get_running_loop()
            self._done = asyncio.Event()
            self.built = create_server(self.settings, store=self.store, metrics=self.metrics)
            await self.built.start()
            self.port = self.built.port
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            raise
        self._ready.set()
        await self._done.wait()
        await self.built.stop(self.settings.grace_seconds, delay=0)  # tests stop at once

    def start(self) -> ThreadServer:
        self._thread.start()
        if not self._ready.wait(15):
            raise TimeoutError("server did not start")
        if self._error is not None:
            raise self._error
        return self

    def run(self, coro: Any, timeout: float = 10) -> Any:
        """Run a coroutine on the server's loop (e.g. a drain) and return its result."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self) -> None:
        if self._loop is not None and self._done is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._done.set)
        self._thread.join(15)

    def __enter__(self) -> ThreadServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ProcessServer:
    """`python -m npu_resolver_server` as a child process; its log lines are collected."""

    def __init__(
        self,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        launcher: Sequence[str] = (),
        own_group: bool = False,
        stdout: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.stdout = stdout
        """A file for what the server prints on its standard output (nothing, by default)."""
        self.launcher = list(launcher)
        """A command that execs the server's (its arguments follow), as a job's launcher would."""
        self.own_group = own_group
        """In a process group of its own (a new session), so that a signal can go to the whole
        group, as Ctrl-C in a terminal or `kill -- -PGID` sends it."""
        self.args = ["--port", str(self.port), *args]
        self.env = {**os.environ, **(env or {})}
        self.lines: list[dict[str, Any]] = []
        self.raw: list[str] = []
        self.proc: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._lock:
                self.raw.append(line)
                with contextlib.suppress(ValueError):
                    self.lines.append(json.loads(line))

    def events(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            return [line for line in self.lines if line.get("event") == name]

    def wait_for(self, name: str, count: int = 1, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.events(name)
            if len(found) >= count:
                return found
            if self.proc is not None and self.proc.poll() is not None:
                time.sleep(0.1)
                break
            time.sleep(0.02)
        raise AssertionError(self._missing(f"no {count} {name!r} event(s)"))

    def _missing(self, what: str) -> str:
        """What a failed wait saw: the server's state and its last lines other than call
        records, which under load would fill any tail of the log."""
        state = "running" if self.proc is None or self.proc.poll() is None else "exited"
        with self._lock:
            others = [line for line in self.raw if '"event": "rpc"' not in line]
            calls = len(self.raw) - len(others)
        code = None if self.proc is None else self.proc.poll()
        tail = "".join(others[-40:])[-6000:]
        return f"{what}; server {state} (code {code}), {calls} call lines; other lines:\n{tail}"

    def start(self, ready_events: int = 1) -> ProcessServer:
        host = [] if "--host" in self.args else ["--host", "127.0.0.1"]
        out: int | IO[str] = subprocess.DEVNULL
        if self.stdout is not None:
            out = self.stdout.open("w")  # the child writes to its own copy; ours is closed below
        try:
            self.proc = subprocess.Popen(
                [*self.launcher, sys.executable, "-m", "npu_resolver_server", *host, *self.args],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=self.own_group,
            )
        finally:
            if not isinstance(out, int):
                out.close()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_for("serving", ready_events)
        return self

    def start_refused(self) -> int:
        """Start a server that must refuse to start, and return its exit status. One that
        serves after all, or is still starting, is stopped before the test fails."""
        try:
            self.start()
        except AssertionError:
            try:
                return self.wait()
            finally:
                self.stop()
        self.stop()
        raise AssertionError("the server started, where it had to refuse to")

    def signal_group(self, signum: int = signal.SIGTERM) -> None:
        """The signal to every process of the server's own group (its supervisor and workers)."""
        assert self.proc is not None and self.own_group
        os.killpg(self.proc.pid, signum)

    def signal(self, signum: int = signal.SIGTERM) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signum)

    def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        if self._reader is not None:
            self._reader.join(5)
        return code

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def __enter__(self) -> ProcessServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def grpc_server() -> Iterator[ThreadServer]:
    """One plain server (no policy) shared by the tests that only read."""
    with ThreadServer() as server:
        yield server


@pytest.fixture(scope="session")
def grpc_target(grpc_server: ThreadServer) -> str:
    return grpc_server.target


class SlowLink:
    """A TCP proxy that holds every chunk `delay` seconds each way: a link across a continent,
    or a server slow to answer a handshake."""

    def __init__(self, upstream: str, delay: float) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self._delay = delay
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await asyncio.sleep(self._delay)
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
