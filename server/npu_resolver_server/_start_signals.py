"""Signals that come while a process starts, before its event loop takes them over.

A reload asked for (SIGHUP) is noted and carried out once the worker serves. A stop (SIGTERM,
SIGINT) ends the start at once, by an exception; it is noted as well, because an exception
raised where Python only reports it (an event-loop callback, a finalizer) would be lost, and
the server would go on to serve a stop it was sent.
"""

from __future__ import annotations

import signal
from types import FrameType

STOPPED_DETAIL = "the stop came while the server started: nothing to drain"
"""The 'stopped' line's detail for a stop before serving, whichever process took it."""

_sighup: list[bool] = [False]
_stops: list[str] = []


class StoppedWhileStartingError(BaseException):
    """A stop signal before the server serves: nothing to drain. A BaseException, so that no
    handler of start failures takes it for one."""

    @property
    def signal_name(self) -> str:
        """The signal's name, also when the stop came inside a codec (the 'idna' of a host name):
        Python re-raises it there as a new one of the same type, with the codec's message and
        the stop as its cause."""
        stop: BaseException = self
        while isinstance(stop.__cause__, StoppedWhileStartingError):
            stop = stop.__cause__
        return str(stop)


def hold_stops() -> None:
    """Until the event loop takes them: as a container's PID 1 the process has no default
    action for SIGTERM, which would be ignored while it starts; and a stop right after the
    first warnings is a stop, not a traceback."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _stop_while_starting)


def _stop_while_starting(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    _stops.append(name)
    raise StoppedWhileStartingError(name)


def stop_held() -> str | None:
    """The first stop that came while held, if its exception did not end the start (and
    forget it)."""
    first = _stops[0] if _stops else None
    _stops.clear()
    return first


def hold_sighup() -> None:
    """Until a worker's event loop takes SIGHUP, note one instead of dying of it (its default
    action): a reload asked for while the worker loads its policy, which can take seconds, must
    neither kill it nor be lost."""
    signal.signal(signal.SIGHUP, _note_sighup)


def _note_sighup(signum: int, frame: FrameType | None) -> None:
    _sighup[0] = True


def sighup_held() -> bool:
    """Whether a SIGHUP came while held (and forget it)."""
    held, _sighup[0] = _sighup[0], False
    return held
