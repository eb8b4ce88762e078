"""`npu-resolve serve` and `python -m npu_resolver_server`: flags, settings, start.

Importing this module does not import grpc: with --workers N the processes are forked before
any grpc object exists.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from ._start_signals import STOPPED_DETAIL, StoppedWhileStartingError, hold_stops
from .settings import (
    DEFAULT_DRAIN_DELAY_SECONDS,
    DEFAULT_GRACE_SECONDS,
    DEFAULT_HOST,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_METRICS_PORT,
    DEFAULT_PORT,
    ENV_PREFIX,
    ServerSettings,
    load_settings,
)

_FLAGS = (
    "host",
    "port",
    "workers",
    "policy",
    "metrics_port",
    "grace_seconds",
    "drain_delay_seconds",
    "max_message_bytes",
    "max_concurrent_rpcs",
    "cache_entries",
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "admin_token_file",
    "protect_resolve",
    "health_port",
    "log_level",
    "call_log",
    "tracing",
)


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the `serve` flags. Unset flags fall back to NPU_RESOLVER_* variables."""
    env = ENV_PREFIX
    add = parser.add_argument
    add("--host", help=f"address to listen on (default {DEFAULT_HOST}; env {env}HOST)")
    add("--port", type=int, help=f"gRPC port (default {DEFAULT_PORT}; env {env}PORT)")
    add(
        "--workers",
        type=int,
        help=f"processes sharing the port with SO_REUSEPORT (default 1; env {env}WORKERS)",
    )
    add("--policy", metavar="FILE", help=f"policy file, hot-reloaded (env {env}POLICY)")
    add(
        "--metrics-port",
        type=int,
        metavar="P",
        help=f"Prometheus metrics port, 0 = off (conventionally {DEFAULT_METRICS_PORT}; "
        f"env {env}METRICS_PORT)",
    )
    add(
        "--grace-seconds",
        type=float,
        metavar="S",
        help=f"drain period on SIGTERM (default {DEFAULT_GRACE_SECONDS}; env {env}GRACE_SECONDS)",
    )
    add(
        "--drain-delay-seconds",
        type=float,
        metavar="S",
        help="on SIGTERM, NOT_SERVING while still answering this long before the drain "
        f"(default {DEFAULT_DRAIN_DELAY_SECONDS}; env {env}DRAIN_DELAY_SECONDS)",
    )
    add(
        "--max-message-bytes",
        type=int,
        metavar="N",
        help=f"largest request or reply (default {DEFAULT_MAX_MESSAGE_BYTES})",
    )
    add("--max-concurrent-rpcs", type=int, metavar="N", help="calls in progress at most")
    add("--cache-entries", type=int, metavar="N", help="answer cache size, 0 = off (default 4096)")
    add("--tls-cert", metavar="FILE", help="server certificate chain (PEM)")
    add("--tls-key", metavar="FILE", help="server private key (PEM)")
    add(
        "--tls-client-ca",
        metavar="FILE",
        help="CA for client certificates: turns on mutual TLS",
    )
    add(
        "--admin-token-file",
        metavar="FILE",
        help="file with the bearer token admin calls (ReloadPolicy) must present",
    )
    add(
        "--protect-resolve",
        action="store_true",
        default=None,
        help="require the bearer token on every resolver call too",
    )
    add(
        "--health-port",
        type=int,
        metavar="P",
        help="plaintext port serving only the health service (for probes when TLS is on)",
    )
    add("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), help="default INFO")
    add(
        "--call-log",
        choices=("all", "failed", "none"),
        help="which calls get their log line: all (default), failed (status not OK), none",
    )
    add(
        "--tracing",
        action="store_true",
        default=None,
        help="OpenTelemetry spans for every call, exported as OTEL_* variables say "
        "(needs: pip install 'npu-config-resolver[tracing]')",
    )


def settings_from_args(namespace: argparse.Namespace) -> ServerSettings:
    return load_settings(**{name: getattr(namespace, name, None) for name in _FLAGS})


def _explain(error: ValidationError) -> str:
    """Each problem as the flag (or NPU_RESOLVER_* variable) that set it, in plain words."""
    lines = []
    for item in error.errors():
        message = str(item["msg"]).removeprefix("Value error, ")
        message = message.replace("Input should be", "must be")
        if item["loc"]:
            name = str(item["loc"][0])
            variable = f"{ENV_PREFIX}{name.upper()}"
            flag = f"--{name.replace('_', '-')} (or {variable})" if name in _FLAGS else variable
            given = item["input"]
            shown = repr(given) if isinstance(given, str) and not given.strip() else given
            message = f"{flag} {shown}: {message}"
        lines.append(message)
    return "; ".join(lines)


def run_serve(namespace: argparse.Namespace) -> int:
    """Run the server as the flags say; returns the process exit status."""
    try:
        settings = settings_from_args(namespace)
    except ValidationError as exc:
        return _refused(_explain(exc))
    # gRPC's own lines (a failed TLS handshake, at INFO, for each plaintext connection or port
    # scan) are plain text among the JSON lines; read when gRPC loads, so set before that. The
    # operator's own GRPC_VERBOSITY still wins.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    hold_stops()  # until the supervisor or the worker's event loop takes them
    # A SIGHUP before the policy is first read asks for nothing that reading it will not do; its
    # default action would end the start (the worker and the supervisor take it over later).
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        _warn_unknown_variables(settings)
        if settings.tracing:
            from ._tracing import missing_packages, settings_problem

            problem = settings_problem(os.environ)
            if problem:
                return _refused(f"--tracing: {problem}")
            missing = missing_packages()
            if missing:
                return _refused(
                    f"--tracing needs {', '.join(missing)}; "
                    "install them with: pip install 'npu-config-resolver[tracing]'"
                )
        if settings.workers > 1:
            from ._supervisor import run_workers

            return run_workers(settings)
        from ._supervisor import ports_problem, say, show_from

        problem = ports_problem(settings)
        if problem:
            show_from(settings.log_level)
            say("start_failed", "ERROR", logger="npu_resolver_server", error=problem, worker=0)
            return 2
        from ._app import run_worker

        return run_worker(settings)
    except StoppedWhileStartingError as stop:
        from ._supervisor import say, show_from  # logging may not be set up yet

        show_from(settings.log_level)
        say(
            "stopped",
            logger="npu_resolver_server",
            signal=stop.signal_name,
            detail=STOPPED_DETAIL,
        )
        return 0


def _refused(problem: str) -> int:
    """A start refused for a setting, before anything starts: exit 2, the line a person reads,
    and the `start_failed` JSON line a log pipeline reads, as for a taken port (an ERROR, so
    written at any --log-level)."""
    from ._supervisor import say

    print(f"npu-resolve serve: {problem}", file=sys.stderr, flush=True)
    say("start_failed", "ERROR", logger="npu_resolver_server", error=problem)
    return 2


def _warn_unknown_variables(settings: ServerSettings) -> None:
    """A misspelt NPU_RESOLVER_* variable (NPU_RESOLVER_WORKER=2) sets nothing: said at start,
    with the close setting, rather than left for an operator to wonder why it had no effect."""
    from difflib import get_close_matches

    from ._supervisor import say, show_from

    known = {f"{ENV_PREFIX}{name.upper()}" for name in ServerSettings.model_fields}
    unknown = sorted(  # matched as the settings match them: regardless of case
        k for k in os.environ if k.upper().startswith(ENV_PREFIX) and k.upper() not in known
    )
    if not unknown:
        return
    show_from(settings.log_level)
    for name in unknown:
        close = get_close_matches(name.upper(), known, n=1)
        say(
            "unknown_setting_variable",
            "WARNING",
            logger="npu_resolver_server",
            variable=name,
            detail="not a setting of this server; it has no effect"
            + (f" (did you mean {close[0]}?)" if close else ""),
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="npu-resolve serve", description="Serve the resolver over gRPC.", allow_abbrev=False
    )
    add_serve_arguments(parser)
    args = list(sys.argv[1:] if argv is None else argv)
    # A flag that takes a value, given twice: argparse would keep the last silently, and which
    # port or policy was meant cannot be told (switches may repeat, as in the other commands).
    takes_value = {flag for a in parser._actions if a.nargs != 0 for flag in a.option_strings}
    named = [arg.split("=", 1)[0] for arg in args if arg.split("=", 1)[0] in takes_value]
    twice = sorted({flag for flag in named if named.count(flag) > 1})
    if twice:
        parser.error(f"{', '.join(twice)} given twice; give each flag once")
    return run_serve(parser.parse_args(args))
