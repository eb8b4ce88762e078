"""The policy in force, and its reloading.

The store holds one reference to the current policy; a request or a batch reads it once, so a
reload swaps it atomically between requests. The file is watched by polling its identity
(resolved symlink target, mtime_ns, ctime_ns, size, inode) about once a second, which also
catches the Kubernetes ConfigMap swap of the `..data` symlink, and reloaded on SIGHUP or the
ReloadPolicy call. A file that does not load keeps the last good policy; the error is logged,
shown by GetPolicy, and the gauge `npu_resolver_policy_reload_failing` is 1 until a good file
loads (health stays SERVING: the last good policy serves).

Reading the file cannot hang or exhaust memory (the default loader opens it without blocking,
refuses anything but a regular file and reads at most the size limit), but checking a large
policy takes a while: the watcher loads in a worker thread and applies the result on the event
loop. SIGHUP and ReloadPolicy load in a worker thread too (reload_async).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import npu_resolver
from npu_resolver import PolicyLike

log = logging.getLogger("npu_resolver_server.policy")

Loader = Callable[[Path], PolicyLike]
FileId = tuple[str, int, int, int, int]


class _Unset:
    """No identity seen yet (a file that is gone has the identity None)."""


_UNSET: Final = _Unset()


def _load_errors() -> tuple[type[Exception], ...]:
    from npu_resolver import PolicyError

    return (PolicyError, OSError, UnicodeDecodeError, ValueError)


@dataclass(frozen=True, slots=True)
class _Attempt:
    """One load of the file, possibly made in a worker thread; `seq` orders the attempts so
    that a slow one never replaces the result of one started after it."""

    seq: int
    file_id: FileId | None
    policy: PolicyLike | None
    error: Exception | None
    fails_jobs: tuple[str, ...] = ()


MAX_PROFILES_JUDGED: Final = 200
"""Profiles up to which a loaded policy is resolved on every product and mode (a few ms a
profile) to find what fails the jobs it reaches; past that, `npu-resolve policy check` does."""
MAX_FAILURES_LOGGED: Final = 10


def _fails_jobs(policy: PolicyLike) -> tuple[str, ...]:
    """What the policy's own values fail the jobs they reach with, where those jobs leave them
    be (a lock a mode refuses: `force_fp16` for training jobs, R-PM-3), as `npu-resolve policy
    check` says it: the file is valid, so it is loaded, but an operator must hear of it."""
    if not isinstance(policy, npu_resolver.Policy):
        return ()
    if len(policy.profile_names()) > MAX_PROFILES_JUDGED:
        log.info(
            "policy not judged for the jobs it fails; npu-resolve policy check does that",
            extra={
                "fields": {
                    "event": "policy_not_judged",
                    "policy_version": policy.version,
                    "profiles": len(policy.profile_names()),
                }
            },
        )
        return ()
    try:
        said = npu_resolver.diagnostics_from_policy(policy)
    except Exception:  # a warning's defect must not stop a load, which stays valid
        log.exception(
            "judging the policy for the jobs it fails went wrong",
            extra={"fields": {"event": "policy_judge_failed", "policy_version": policy.version}},
        )
        return ()
    return tuple(s.text for s in said if s.severity is npu_resolver.Severity.ERROR)


def _warn_fails_jobs(version: str, failures: tuple[str, ...]) -> None:
    if failures:
        log.warning(
            "the policy in force fails the jobs it reaches that leave these values be",
            extra={
                "fields": {
                    "event": "policy_fails_jobs",
                    "policy_version": version,
                    "errors": list(failures[:MAX_FAILURES_LOGGED]),
                    "count": len(failures),
                }
            },
        )


@dataclass(frozen=True, slots=True)
class ReloadOutcome:
    changed: bool
    version: str
    error: str = ""
    recovered: bool = False
    """The last good file is back after a refused one (logged as policy_reload_recovered)."""


@dataclass(frozen=True, slots=True)
class PolicyStatus:
    version: str
    canonical_text: str
    source: str
    profiles: tuple[str, ...]
    last_reload_error: str
    refused_version: str
    reload_failures: int


class PolicyStore:
    """The current policy (or None) with the outcome of the last load."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        loader: Loader | None = None,
        on_change: Callable[[PolicyStore], None] | None = None,
    ) -> None:
        self.path = path
        self._loader = loader if loader is not None else self._load_file
        self._listeners: list[Callable[[PolicyStore], None]] = []
        if on_change is not None:
            self._listeners.append(on_change)
        self.current: PolicyLike | None = None
        self.last_error = ""
        self.refused_version = ""
        self.failures = 0
        self._file_id: FileId | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = threading.RLock()
        self._started = 0
        self._applied = 0
        self._loading: asyncio.Future[ReloadOutcome] | None = None
        self._next_load: asyncio.Future[ReloadOutcome] | None = None

    def _load_file(self, path: Path) -> PolicyLike:
        """The default loader: a file still holding the bytes the policy in force came from
        gives that policy back unchecked, so that a reload of an unchanged file (a ReloadPolicy
        call, SIGHUP, a touch) costs a read, not the seconds a large policy takes to check."""
        current = self.current
        reuse = current if isinstance(current, npu_resolver.Policy) else None
        return npu_resolver.load_policy(path, reuse=reuse)

    @classmethod
    def fixed(cls, policy: PolicyLike | None) -> PolicyStore:
        """A store with a given policy and no file (tests, embedding)."""
        store = cls(None)
        store.current = policy
        return store

    @property
    def version(self) -> str:
        policy = self.current
        return policy.version if policy is not None else ""

    def _identify(self) -> FileId | None:
        assert self.path is not None
        try:
            target = os.path.realpath(self.path)
            st = os.stat(target)
        except OSError:
            return None
        # ctime too: a file made readable (chmod) after a refusal changes nothing else.
        return (target, st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)

    def load_initial(self) -> None:
        """Load the file at start; raises the loader's error when it is bad (no fallback yet)."""
        if self.path is None:
            return
        self._file_id = self._identify()
        self.current = self._loader(self.path)
        log.info(
            "policy loaded",
            extra={"fields": {"event": "policy_loaded", "policy_version": self.current.version}},
        )
        _warn_fails_jobs(self.current.version, _fails_jobs(self.current))
        self._changed()

    def reload(self) -> ReloadOutcome:
        """Reload the file now; on failure keep the last good policy and record why."""
        if self.path is None:
            return ReloadOutcome(False, self.version, "the server has no policy file")
        return self._apply(self._attempt())

    async def reload_async(self) -> ReloadOutcome:
        """reload(), with the reading and checking in a worker thread: a large policy takes
        seconds to check, and the event loop keeps answering meanwhile.

        Asks that come while a load runs share one load, the next, which starts once the
        running one ends (so it reads the file as it is after every one of them asked): a
        storm of ReloadPolicy calls or SIGHUPs costs two loads, not one each, and a stop
        waits for no queue of them."""
        if self.path is None:
            return ReloadOutcome(False, self.version, "the server has no policy file")
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._load())
            return await asyncio.shield(self._loading)
        if self._next_load is None:
            self._next_load = asyncio.ensure_future(self._load(after=self._loading))
        return await asyncio.shield(self._next_load)

    async def _load(self, after: asyncio.Future[ReloadOutcome] | None = None) -> ReloadOutcome:
        """One load; `after`: the load running when this one was asked for, awaited first."""
        if after is not None:
            await asyncio.wait([after])  # its outcome went to its own callers
            self._loading, self._next_load = self._next_load, None
        try:
            return self._apply(await asyncio.to_thread(self._attempt))
        finally:
            if self._next_load is None:
                self._loading = None

    def _attempt(self) -> _Attempt:
        """Load the file without touching the store (safe in a worker thread); any exception,
        a loader defect included, is the outcome rather than raised."""
        assert self.path is not None
        with self._lock:
            self._started += 1
            seq = self._started
        file_id = self._identify()  # before reading: a change during the load is seen next
        try:
            policy = self._loader(self.path)
        except Exception as exc:
            return _Attempt(seq, file_id, None, exc)
        current = self.current
        if current is not None and current.version == policy.version:
            return _Attempt(seq, file_id, policy, None)  # judged when it was first loaded
        return _Attempt(seq, file_id, policy, None, _fails_jobs(policy))

    def _apply(self, attempt: _Attempt) -> ReloadOutcome:
        with self._lock:
            if attempt.seq < self._applied:  # a later load has been applied meanwhile
                return ReloadOutcome(False, self.version, self.last_error)
            self._applied = attempt.seq
            self._file_id = attempt.file_id
            if attempt.error is not None:
                return self._refuse(attempt.error)
            policy = attempt.policy
            assert policy is not None
            refused = self.last_error
            self.last_error = ""
            self.refused_version = ""
            changed = self.current is None or policy.version != self.current.version
            self.current = policy  # one reference assignment: atomic for every request
            if changed:
                log.info(
                    "policy reloaded",
                    extra={
                        "fields": {"event": "policy_reloaded", "policy_version": policy.version}
                    },
                )
                _warn_fails_jobs(policy.version, attempt.fails_jobs)
            elif refused:  # the good file is back: the log's last word is not the refusal
                log.info(
                    "policy file readable again; the policy in force is unchanged",
                    extra={
                        "fields": {
                            "event": "policy_reload_recovered",
                            "policy_version": policy.version,
                        }
                    },
                )
            self._changed()
            return ReloadOutcome(changed, policy.version, recovered=bool(refused))

    def _refuse(self, exc: Exception) -> ReloadOutcome:
        # A loader defect must not take the last good policy away either: it is counted
        # and reported like a bad file, with its traceback in the log.
        expected = isinstance(exc, _load_errors())
        if not expected:
            log.error("policy loader failed unexpectedly", exc_info=exc)
        self.failures += 1
        self.last_error = (
            (str(exc) or type(exc).__name__)
            if expected
            else f"internal error while loading the policy ({type(exc).__name__}: {exc})"
        )
        self.refused_version = self._refused_digest(exc)
        log.error(
            "policy reload failed; keeping the last good policy",
            extra={
                "fields": {
                    "event": "policy_reload_failed",
                    "error": self.last_error,
                    "policy_version": self.version,
                }
            },
        )
        self._changed()
        return ReloadOutcome(False, self.version, self.last_error)

    def _refused_digest(self, exc: Exception) -> str:
        """The refused file's short hash: the one the default loader took of the bytes it read
        (none when it could not read them), else from a bounded read of the file."""
        if isinstance(exc, npu_resolver.PolicyError) and (
            exc.digest or isinstance(exc, npu_resolver.PolicyReadError)
        ):
            return exc.digest
        assert self.path is not None
        return npu_resolver.policy_file_digest(self.path)

    def add_listener(self, listener: Callable[[PolicyStore], None]) -> None:
        """Call `listener(store)` after every load or failed reload."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener(self)

    def check_file(self) -> ReloadOutcome | None:
        """Reload when the file's identity changed since the last load; None when unchanged."""
        if self.path is None:
            return None
        file_id = self._identify()
        if file_id is None or file_id == self._file_id:
            return None
        return self.reload()

    async def _watch(self, interval: float) -> None:
        """Reload once a changed file has settled: the same identity (inode, size, mtime) at
        two polls in a row, so that a file written in place in several writes is not read
        half-written (a rename, as a ConfigMap's, is whole at once and waits one poll). A file
        that stays gone is a failed reload, said once: the last good policy stays."""
        settling: FileId | _Unset | None = _UNSET
        while True:
            await asyncio.sleep(interval)
            try:
                file_id = self._identify()
                if file_id == self._file_id:
                    settling = _UNSET
                    continue
                if file_id != settling:
                    settling = file_id
                    continue
                settling = _UNSET
                attempt = await asyncio.to_thread(self._attempt)
                self._apply(attempt)
            except Exception:  # never let the watcher die
                log.exception("policy watch failed")

    def start_watching(self, interval: float = 1.0) -> None:
        if self.path is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch(interval))

    async def stop_watching(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def status(self) -> PolicyStatus:
        policy = self.current
        return PolicyStatus(
            version=policy.version if policy is not None else "",
            canonical_text=str(getattr(policy, "canonical_text", "")) if policy else "",
            source=str(self.path) if self.path is not None else "",
            profiles=tuple(policy.profile_names()) if policy is not None else (),
            last_reload_error=self.last_error,
            refused_version=self.refused_version,
            reload_failures=self.failures,
        )
