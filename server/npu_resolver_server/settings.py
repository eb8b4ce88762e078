"""Server settings: command-line flags over `NPU_RESOLVER_*` environment variables over defaults.

The module constants are the values the deployment manifests rely on (ports, health service
name, drain period); tests check that the manifests agree with them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from npu_resolver import MAX_CONFIG_DEPTH, MAX_CONFIG_ITEMS
from npu_resolver_client.credentials import PemKind, pem_problem

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 50051
DEFAULT_METRICS_PORT: Final = 9464
"""The conventional metrics port; metrics are off unless --metrics-port is given."""
DEFAULT_GRACE_SECONDS: Final = 20.0
DEFAULT_DRAIN_DELAY_SECONDS: Final = 1.0
"""After SIGTERM, how long health says NOT_SERVING while calls are still accepted."""
DEFAULT_MAX_MESSAGE_BYTES: Final = 4 * 1024 * 1024
DEFAULT_CACHE_ENTRIES: Final = 4096
DEFAULT_MAX_STRUCT_DEPTH: Final = MAX_CONFIG_DEPTH
"""JSON nesting levels in a config, as the core counts them (protobuf stops near 30 levels:
every level is 3 messages); the same limits as in process, so both answer alike."""
DEFAULT_MAX_STRUCT_KEYS: Final = MAX_CONFIG_ITEMS
HEALTH_SERVICE: Final = "npu.resolver.v1.Resolver"
"""The gRPC service name; the standard health service reports it (and "") as SERVING."""
PID_METADATA_KEY: Final = "x-npu-resolver-pid"
"""Trailing metadata key carrying the pid of the worker process that answered."""
ENV_PREFIX: Final = "NPU_RESOLVER_"

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]
CallLog = Literal["all", "failed", "none"]


_GRPC_INT: Final = 2**31 - 1
"""gRPC takes its sizes and counts as a C int."""


class ServerSettings(BaseSettings):
    """Everything the server reads at start; flags are passed as init arguments and win."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", frozen=True, env_ignore_empty=True
    )
    """A variable set to "" (`NPU_RESOLVER_POLICY= npu-resolve serve`) counts as unset."""

    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    """0 picks a free port (single worker only)."""
    workers: int = Field(default=1, ge=1, le=256)
    policy: Path | None = None
    """Policy file; watched and reloaded when it changes or on SIGHUP."""
    policy_poll_seconds: float = Field(default=1.0, ge=0.05, le=86400, allow_inf_nan=False)
    metrics_port: int = Field(default=0, ge=0, le=65535)
    """Prometheus metrics HTTP port; 0 = off."""
    hung_worker_seconds: float = Field(default=15.0, ge=3, le=3600, allow_inf_nan=False)
    """Under --workers: a worker whose event loop has not turned for this long (stopped,
    or stuck) is killed and restarted; the longest call yields well within it. At least 3 s:
    a worker beats each second, and is seen beating at most a second later."""
    worker_start_seconds: float = Field(default=60.0, ge=3, le=3600, allow_inf_nan=False)
    """Under --workers: a worker that has not begun serving this long after it was started (a
    start stuck after the fork, a policy read that never returns) is killed and restarted.
    Generous: the slowest policy files at the size limit take about ten seconds to load."""
    grace_seconds: float = Field(default=DEFAULT_GRACE_SECONDS, ge=0, le=86400, allow_inf_nan=False)
    """Drain period on SIGTERM/SIGINT: in-flight calls get this long to finish."""
    drain_delay_seconds: float = Field(
        default=DEFAULT_DRAIN_DELAY_SECONDS, ge=0, le=3600, allow_inf_nan=False
    )
    """Before the drain: health reports NOT_SERVING and calls are still answered, so that
    health-checking balancers move traffic away before new calls are refused."""
    max_message_bytes: int = Field(default=DEFAULT_MAX_MESSAGE_BYTES, ge=1024, le=_GRPC_INT)
    max_concurrent_rpcs: int | None = Field(default=None, ge=1, le=_GRPC_INT)
    max_struct_depth: int = Field(default=DEFAULT_MAX_STRUCT_DEPTH, ge=1)
    max_struct_keys: int = Field(default=DEFAULT_MAX_STRUCT_KEYS, ge=1)
    """Total object keys across one request's config (and each batch item's)."""
    cache_entries: int = Field(default=DEFAULT_CACHE_ENTRIES, ge=0)
    """Answer cache size in replies; 0 disables the cache."""
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    """With a client CA, clients must present a certificate it signed (mutual TLS)."""
    admin_token_file: Path | None = None
    """File holding the bearer token admin calls (ReloadPolicy) must present."""
    protect_resolve: bool = False
    """When true, every call (not only admin ones) needs the bearer token."""
    health_port: int = Field(default=0, ge=0, le=65535)
    """Plaintext port serving only the health service (for probes when TLS is on); 0 = off."""
    log_level: LogLevel = "INFO"
    call_log: CallLog = "all"
    """Which calls get their INFO line: every one, the failed ones (a status other than OK),
    or none; at 1,800 calls a second a line each is about 0.5 MB/s a worker."""
    tracing: bool = False
    """OpenTelemetry tracing of every call (needs the `tracing` extra); off by default."""

    @field_validator(
        "policy", "tls_cert", "tls_key", "tls_client_ca", "admin_token_file", mode="before"
    )
    @classmethod
    def _named(cls, value: object) -> object:
        """`--policy ""` names no file (read as a path, it would be the current folder)."""
        if isinstance(value, str) and not value.strip():
            raise ValueError("is given no file name; name the file, or leave the flag out")
        return value

    @model_validator(mode="after")
    def _check(self) -> ServerSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key go together")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
        if self.protect_resolve and self.admin_token_file is None:
            raise ValueError("protecting resolve calls needs --admin-token-file")
        if self.workers > 1 and self.port == 0:
            raise ValueError("--workers above 1 needs a fixed --port (the workers share it)")
        ports = [p for p in (self.port, self.metrics_port, self.health_port) if p]
        if len(ports) != len(set(ports)):
            raise ValueError("--port, --metrics-port and --health-port must differ")
        for flag, path in (
            ("--tls-cert", self.tls_cert),
            ("--tls-key", self.tls_key),
            ("--tls-client-ca", self.tls_client_ca),
            ("--admin-token-file", self.admin_token_file),
        ):  # read once at start: a wrong path is said here, naming its flag
            kind = _PEM_KINDS.get(flag)
            problem = _file_problem(path, pem=kind)
            if problem:
                raise ValueError(f"{flag} {path} {problem}")
        return self

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None


_PEM_KINDS: Final[dict[str, PemKind]] = {
    "--tls-cert": "CERTIFICATE",
    "--tls-key": "PRIVATE KEY",
    "--tls-client-ca": "CERTIFICATE",
}


def _file_problem(path: Path | None, *, pem: PemKind | None) -> str:
    """Why a file the server reads at start cannot serve, or "". A pipe (`<(vault read ...)`)
    is taken as it is; a certificate or key in a regular file must be PEM, the only form gRPC
    reads, holding a certificate or a private key as its flag says (anything else, a key given
    for the certificate included, fails later as an address that cannot be bound)."""
    if path is None:
        return ""
    try:
        if not path.exists():
            return "does not exist"
        if path.is_dir():
            return "is a directory"
        if not path.is_file():
            return ""
        with path.open("rb") as file:
            head = file.read(1 << 20)
    except OSError as exc:  # no permission, most often: the server runs as another user
        return f"cannot be read: {exc.strerror or exc}"
    if pem:
        if b"-----BEGIN " not in head:
            return "is not PEM text (no -----BEGIN line)"
        return pem_problem(head, pem)
    return ""


def load_settings(**overrides: object) -> ServerSettings:
    """Settings from the environment, with `overrides` (flags) winning; None means not given."""
    given = {k: v for k, v in overrides.items() if v is not None}
    return ServerSettings(**given)  # type: ignore[arg-type]
