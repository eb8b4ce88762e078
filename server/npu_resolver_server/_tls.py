"""The server's TLS material: checked at start, and read again when the files change.

Certificates are renewed in place (cert-manager rewrites the Secret, and the kubelet swaps the
mounted files): gRPC asks before each new connection's handshake whether the certificates
changed, and a renewed pair is taken without a restart. A pair that does not hold together
(caught mid-rewrite, or a bad renewal) is refused and the last good one kept, as is a
certificate already expired: at start it stops the start, since no client would accept it.
The certificate's expiry is logged and exported, so that a renewal that stopped coming is seen
before it becomes an outage that health checks cannot show.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from npu_resolver_client.credentials import pair_problem

from ._cert_dates import not_after, utc_text
from .settings import ServerSettings

log = logging.getLogger("npu_resolver_server")


def file_stamp(path: Path) -> tuple[int, ...]:
    """What changes when a file is rewritten, swapped (a Secret's symlink is followed) or given
    other permissions (ctime): files read again on change compare these. OSError when gone."""
    s = os.stat(path)
    return (s.st_dev, s.st_ino, s.st_size, s.st_mtime_ns, s.st_ctime_ns)


class CertificateFiles:
    """The files of --tls-cert, --tls-key and --tls-client-ca, and what was last read of them."""

    def __init__(
        self,
        cert: Path,
        key: Path,
        client_ca: Path | None,
        *,
        on_loaded: Callable[[float | None], None] | None = None,
    ) -> None:
        """`on_loaded(expires)`: called with the certificate's notAfter (seconds since the
        epoch, None when it cannot be read) at start and after each renewal taken."""
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self._on_loaded = on_loaded
        self._lock = threading.Lock()  # handshakes may ask from several gRPC threads at once
        self._stamp = self._stamped()
        self._refused: object = None
        """The state of the files last refused (a stamp, or the error of a file gone)."""
        self.current = self._read()
        problem = self.problem(self.current)
        if problem:
            raise ValueError(problem)
        self._untaken = False
        """A pair taken that gRPC has not fetched yet."""
        self.expires = not_after(self.current[1])
        if self.expires is None:
            log.warning(
                "tls_expiry_unknown",
                extra={
                    "fields": {
                        "event": "tls_expiry_unknown",
                        "error": f"--tls-cert {cert}: its first certificate's notAfter cannot "
                        "be read; the expiry is neither checked nor exported",
                    }
                },
            )
        self._loaded()

    @property
    def renewable(self) -> bool:
        """Regular files only: a pipe (`<(vault read ...)`) can be read once."""
        return all(path.is_file() for path in self._paths())

    def _paths(self) -> list[Path]:
        return [self.cert, self.key, *([self.client_ca] if self.client_ca else [])]

    def _stamped(self) -> tuple[tuple[int, ...], ...]:
        """What changes when a file is rewritten, swapped (a Secret's symlink is followed) or
        given other permissions (ctime), so that each change is judged once."""
        return tuple(file_stamp(path) for path in self._paths())

    def _read(self) -> tuple[bytes, bytes, bytes | None]:
        client_ca = self.client_ca.read_bytes() if self.client_ca else None
        return self.key.read_bytes(), self.cert.read_bytes(), client_ca

    def problem(self, material: tuple[bytes, bytes, bytes | None]) -> str:
        key, cert, _ = material
        problem = pair_problem(cert, key, f"--tls-cert {self.cert}")
        if problem:
            return f"--tls-key {self.key} {problem}"
        expires = not_after(cert)
        if expires is not None and expires <= time.time():
            return (
                f"--tls-cert {self.cert} expired at {utc_text(expires)}: no client accepts it; "
                "give a renewed certificate"
            )
        return ""

    def configuration(self) -> grpc.ServerCertificateConfiguration:
        key, cert, client_ca = self.current
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=client_ca)

    def renewed(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's fetcher, called before each handshake: the configuration of a pair taken
        since its last call (by this call or by check()), else None (the one in use stays).
        Never raises."""
        with self._lock:
            self._take_changes()
            if not self._untaken:
                return None
            self._untaken = False
            return self.configuration()

    def check(self) -> None:
        """Judge changed files now, between handshakes (the server calls it every few seconds):
        a renewal is logged and its expiry reported while no client connects, since clients
        keep their connections; gRPC serves it from its next handshake."""
        with self._lock:
            self._take_changes()

    def _take_changes(self) -> None:
        try:
            stamp = self._stamped()
        except OSError as exc:  # a file gone (mid-swap, or for good): said once, not per call
            self._refuse(str(exc), str(exc))
            return
        if stamp in (self._stamp, self._refused):
            return
        try:
            material = self._read()
        except OSError as exc:  # unreadable (permissions): judged again once the files change
            self._refuse(stamp, str(exc))
            return
        problem = self.problem(material)
        if problem:
            self._refuse(stamp, problem)
            return
        self._stamp, self._refused, self.current = stamp, None, material
        self._untaken = True
        self.expires = not_after(material[1])
        log.info("tls_reloaded", extra={"fields": {"event": "tls_reloaded", **self.dates()}})
        self._loaded()

    def _loaded(self) -> None:
        """Report the pair taken; a failure to report it (a metric's file on a full disk) must
        not lose the renewal, which gRPC takes at its next handshake all the same."""
        if self._on_loaded is None:
            return
        try:
            self._on_loaded(self.expires)
        except Exception:
            log.exception("tls_expiry_not_reported", extra={"fields": self.dates()})

    def dates(self) -> dict[str, str]:
        """The certificate's expiry, for a log line (nothing when it cannot be read)."""
        return {} if self.expires is None else {"tls_not_after": utc_text(self.expires)}

    def _refuse(self, what: object, error: str) -> None:
        """Keep the pair in use; log the failure once for each state of the files."""
        if what != self._refused:
            self._refused = what
            log.warning("tls_reload_failed", extra={"fields": _failed(error)})


def _failed(error: str) -> dict[str, str]:
    return {
        "event": "tls_reload_failed",
        "error": error,
        "effect": "the certificates in use stay until the files hold a good pair",
    }


def certificate_files(
    settings: ServerSettings, on_loaded: Callable[[float | None], None] | None = None
) -> CertificateFiles | None:
    """The settings' TLS files, checked (None without TLS). `on_loaded`: as CertificateFiles
    takes it."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    return CertificateFiles(
        settings.tls_cert, settings.tls_key, settings.tls_client_ca, on_loaded=on_loaded
    )


def server_credentials(files: CertificateFiles) -> grpc.ServerCredentials:
    """TLS credentials from the files; renewed files are taken when they are regular ones."""
    mutual = files.client_ca is not None
    if not files.renewable:
        key, cert, client_ca = files.current
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=client_ca, require_client_auth=mutual
        )
    return grpc.dynamic_ssl_server_credentials(
        files.configuration(), files.renewed, require_client_authentication=mutual
    )
