"""Servers for the benchmarks: subprocesses on 127.0.0.1, stopped by PID whatever happens.

Each server logs to a file (never a pipe that could fill up and stall it); readiness is its
`serving` log line(s). `stop()` sends SIGTERM, waits, then SIGKILLs the process and the worker
pids it reported. Every started server is also stopped at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[1]
HOST: Final = "127.0.0.1"
START_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 20.0

_live: set[Server] = set()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def rss_mb(pid: int) -> float:
    """VmRSS of a process, in MiB (0 when it is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _clean_env() -> dict[str, str]:
    """This environment without NPU_RESOLVER_* settings: servers run with their defaults."""
    return {k: v for k, v in os.environ.items() if not k.startswith("NPU_RESOLVER_")}


class Server:
    """One server process (a resolver with its flags, or the echo server)."""

    def __init__(self, name: str, module: str, args: Sequence[str], log_dir: Path) -> None:
        self.name = name
        self.port = free_port()
        self.argv = [sys.executable, "-m", module, "--port", str(self.port), *args]
        if module == "npu_resolver_server":
            self.argv += ["--host", HOST]
        self.workers = int(args[list(args).index("--workers") + 1]) if "--workers" in args else 1
        self.log = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.worker_pids: list[int] = []

    @property
    def target(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pids(self) -> list[int]:
        """The processes that serve calls (the workers, or the one process)."""
        return self.worker_pids or ([self.proc.pid] if self.proc is not None else [])

    def _events(self, name: str) -> list[dict[str, Any]]:
        found = []
        with contextlib.suppress(OSError), self.log.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                if f'"{name}"' in line:
                    with contextlib.suppress(ValueError):
                        event = json.loads(line)
                        if event.get("event") == name:
                            found.append(event)
        return found

    def start(self) -> Server:
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=_clean_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # a Ctrl-C reaches us, and we stop it in order
            )
        _live.add(self)
        return self

    def wait_ready(self) -> Server:
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            serving = self._events("serving")
            if len(serving) >= self.workers:
                self.worker_pids = [int(e["pid"]) for e in serving] if self.workers > 1 else []
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = self.log.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise RuntimeError(f"{self.name} did not start ({self.argv}):\n{tail}")

    def rss_mb(self) -> float:
        return sum(rss_mb(pid) for pid in self.pids)

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT_S; returns the exit status."""
        _live.discard(self)
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for pid in self.worker_pids:  # normally gone already: the supervisor drains them
            if Path(f"/proc/{pid}").exists():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        return proc.returncode


def stop_all() -> None:
    for server in list(_live):
        server.stop()


atexit.register(stop_all)
