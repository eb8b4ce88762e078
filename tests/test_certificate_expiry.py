"""The serving certificate's expiry: read from the file, exported, and never served expired.

A certificate whose renewal stopped coming fails every client's handshake while health checks
(plaintext, on their own port) still say SERVING; the expiry is therefore a metric to alert on
before it passes, a start with an expired certificate stops with the reason, and a renewal
that is already expired is refused like a key that does not fit."""

from __future__ import annotations

import base64
import datetime
import logging
import os
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from npu_resolver_client import ResolverClient
from npu_resolver_server import ServerSettings
from npu_resolver_server._cert_dates import not_after, utc_text
from npu_resolver_server._metrics import Metrics
from npu_resolver_server._tls import CertificateFiles
from tests._server import ProcessServer, ThreadServer

trustme = pytest.importorskip("trustme")
x509 = pytest.importorskip("cryptography.x509")

PAST = datetime.datetime(2021, 1, 1)


def _issued(ca: Any, not_after: datetime.datetime | None = None, key_type: Any = None) -> Any:
    dates = {} if not_after is None else {"not_before": datetime.datetime(2020, 1, 1)}
    if not_after is not None:
        dates["not_after"] = not_after
    kind = {} if key_type is None else {"key_type": key_type}
    return ca.issue_cert("localhost", "127.0.0.1", **dates, **kind)


def _install(folder: Path, issued: Any) -> tuple[Path, Path]:
    """Written whole, then renamed into place, as a Secret's files change."""
    paths = (folder / "tls.crt", folder / "tls.key")
    chain = b"".join(blob.bytes() for blob in issued.cert_chain_pems)
    for path, pem in zip(paths, (chain, issued.private_key_pem.bytes()), strict=True):
        path.with_suffix(".new").write_bytes(pem)
        os.replace(path.with_suffix(".new"), path)
    return paths


@pytest.mark.parametrize(
    "expires",
    [
        datetime.datetime(2021, 1, 1),  # UTCTime, as certificates before 2050 carry it
        datetime.datetime(2049, 12, 31, 23, 59, 59),
        datetime.datetime(2050, 1, 1),  # GeneralizedTime from 2050 on (RFC 5280)
        datetime.datetime(2120, 5, 6, 7, 8, 9),
        None,  # trustme's own default
    ],
)
@pytest.mark.parametrize("key", ["ECDSA", "RSA"])
def test_the_expiry_is_read_as_an_x509_library_reads_it(
    expires: datetime.datetime | None, key: str
) -> None:
    issued = _issued(trustme.CA(), expires, getattr(trustme.KeyType, key))
    chain = b"".join(blob.bytes() for blob in issued.cert_chain_pems)
    leaf = x509.load_pem_x509_certificate(chain)  # the first certificate: the server's own
    assert not_after(chain) == leaf.not_valid_after_utc.timestamp()


@pytest.mark.parametrize(
    "pem",
    [
        b"",
        b"not a certificate",
        b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        b"-----BEGIN CERTIFICATE-----\nMIIBCgKCAQEA\n-----END CERTIFICATE-----\n",
    ],
)
def test_an_expiry_that_cannot_be_read_is_none_not_an_error(pem: bytes) -> None:
    assert not_after(pem) is None


def test_a_start_with_an_expired_certificate_stops_saying_when_it_expired(
    tmp_path: Path,
) -> None:
    cert, key = _install(tmp_path, _issued(trustme.CA(), PAST))
    server = ProcessServer(["--tls-cert", str(cert), "--tls-key", str(key)])
    assert server.start_refused() == 2, server.raw
    failed = server.events("start_failed")
    assert failed, server.raw
    assert f"--tls-cert {cert} expired at 2021-01-01T00:00:00Z" in failed[0]["error"]


def test_an_expired_renewal_is_refused_and_the_pair_in_use_serves_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = trustme.CA()
    good = _issued(ca)
    cert, key = _install(tmp_path, good)
    loaded: list[float | None] = []
    files = CertificateFiles(cert, key, None, on_loaded=loaded.append)
    expires = not_after(good.cert_chain_pems[0].bytes())
    assert expires is not None and loaded == [expires] and files.expires == expires
    _install(tmp_path, _issued(ca, PAST))
    with caplog.at_level(logging.WARNING, logger="npu_resolver_server"):
        assert files.renewed() is None
        assert files.renewed() is None  # judged once per change of the files, said once
    errors = [r.fields["error"] for r in caplog.records if r.getMessage() == "tls_reload_failed"]  # type: ignore[attr-defined]
    assert len(errors) == 1 and "expired at 2021-01-01T00:00:00Z" in errors[0], errors
    assert loaded == [expires] and files.expires == expires  # the pair in use stays
    renewed = _issued(ca, datetime.datetime(2099, 1, 1))
    _install(tmp_path, renewed)
    with caplog.at_level(logging.INFO, logger="npu_resolver_server"):
        assert files.renewed() is not None
    said = [r.fields for r in caplog.records if r.getMessage() == "tls_reloaded"]  # type: ignore[attr-defined]
    assert said == [{"event": "tls_reloaded", "tls_not_after": "2099-01-01T00:00:00Z"}]
    assert loaded == [expires, not_after(renewed.cert_chain_pems[0].bytes())]


def test_the_expiry_is_a_metric_of_the_serving_certificate(tmp_path: Path) -> None:
    issued = _issued(trustme.CA(), datetime.datetime(2099, 3, 4, 5, 6, 7))
    cert, key = _install(tmp_path, issued)
    registry = CollectorRegistry()
    settings = ServerSettings(port=0, grace_seconds=2.0, tls_cert=cert, tls_key=key)
    with ThreadServer(settings, metrics=Metrics(registry)) as server:
        roots = issued.cert_chain_pems[-1].bytes()
        target = f"localhost:{server.port}"
        with ResolverClient(target, root_certificates=roots, timeout=5) as client:
            assert client.resolve("atlas-a2").ok
        assert server.built.tls_not_after == not_after(cert.read_bytes())
    value = registry.get_sample_value("npu_resolver_tls_certificate_expiry_timestamp_seconds")
    assert value is not None and utc_text(value) == "2099-03-04T05:06:07Z"


def test_without_tls_there_is_no_expiry_series() -> None:
    registry = CollectorRegistry()
    with ThreadServer(metrics=Metrics(registry)):
        pass
    assert (
        registry.get_sample_value("npu_resolver_tls_certificate_expiry_timestamp_seconds") is None
    )


def test_a_renewal_is_judged_and_reported_between_handshakes_then_served_at_the_next(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Clients keep their connections, so a renewal may see no handshake for hours: check()
    takes it (logged, expiry reported) and gRPC's next fetch serves it, once."""
    ca = trustme.CA()
    cert, key = _install(tmp_path, _issued(ca))
    loaded: list[float | None] = []
    files = CertificateFiles(cert, key, None, on_loaded=loaded.append)
    renewed = _issued(ca, datetime.datetime(2098, 7, 6))
    _install(tmp_path, renewed)
    with caplog.at_level(logging.INFO, logger="npu_resolver_server"):
        files.check()
        files.check()  # nothing changed since
    said = [r.getMessage() for r in caplog.records]
    assert said == ["tls_reloaded"] and utc_text(loaded[-1] or 0) == "2098-07-06T00:00:00Z"
    assert files.renewed() is not None  # the pair check() took, fetched by gRPC once
    assert files.renewed() is None


def test_a_renewal_whose_report_fails_is_still_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = trustme.CA()
    cert, key = _install(tmp_path, _issued(ca))
    failing = [False]

    def report(expires: float | None) -> None:
        if failing[0]:
            raise OSError(28, "No space left on device")

    files = CertificateFiles(cert, key, None, on_loaded=report)
    failing[0] = True
    _install(tmp_path, _issued(ca, datetime.datetime(2097, 1, 1)))
    with caplog.at_level(logging.ERROR, logger="npu_resolver_server"):
        assert files.renewed() is not None
    assert [r.getMessage() for r in caplog.records] == ["tls_expiry_not_reported"]
    assert files.expires is not None and utc_text(files.expires) == "2097-01-01T00:00:00Z"


def test_the_server_reports_a_renewal_while_its_clients_keep_their_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from npu_resolver_server import _app

    monkeypatch.setattr(_app, "TLS_CHECK_S", 0.1)
    ca = trustme.CA()
    cert, key = _install(tmp_path, _issued(ca, datetime.datetime(2096, 1, 1)))
    registry = CollectorRegistry()
    name = "npu_resolver_tls_certificate_expiry_timestamp_seconds"
    settings = ServerSettings(port=0, grace_seconds=2.0, tls_cert=cert, tls_key=key)
    with ThreadServer(settings, metrics=Metrics(registry)):
        assert utc_text(registry.get_sample_value(name) or 0) == "2096-01-01T00:00:00Z"
        _install(tmp_path, _issued(ca, datetime.datetime(2099, 9, 9)))
        deadline = time.monotonic() + 10
        while registry.get_sample_value(name) != not_after(cert.read_bytes()):
            assert time.monotonic() < deadline, "the renewal was not reported"
            time.sleep(0.05)


def _pem(kind: str, der: bytes) -> bytes:
    body = base64.encodebytes(der).decode("ascii")
    return f"-----BEGIN {kind}-----\n{body}-----END {kind}-----\n".encode()


@pytest.mark.parametrize(
    "form",
    [
        "as issued",
        "CRLF lines",
        "blanks after the marker",
        "a comment quoting the marker first",
        "TRUSTED",
        "X509",
    ],
)
def test_the_first_certificate_is_found_in_every_form_openssl_reads(form: str) -> None:
    """The expiry read is the leaf's, the certificate OpenSSL serves: never an intermediate's
    after a block this reader would skip."""
    issued = _issued(trustme.CA(), PAST)
    leaf, *rest = (blob.bytes() for blob in issued.cert_chain_pems)
    der = ssl.PEM_cert_to_DER_cert(leaf.decode("ascii"))
    first = {
        "as issued": leaf,
        "CRLF lines": leaf.replace(b"\n", b"\r\n"),
        "blanks after the marker": leaf.replace(b"CERTIFICATE-----\n", b"CERTIFICATE----- \t\n", 1),
        "a comment quoting the marker first": b"# -----BEGIN CERTIFICATE----- below\n" + leaf,
        "TRUSTED": _pem("TRUSTED CERTIFICATE", der + b"\x30\x00"),  # with empty trust settings
        "X509": _pem("X509 CERTIFICATE", der),
    }[form]
    assert utc_text(not_after(first + b"".join(rest)) or 0) == "2021-01-01T00:00:00Z"
