"""When a PEM certificate expires: its notAfter, read from the DER the standard library decodes.

Python's ssl module reads a certificate's dates only from a peer it is connected to; this
reads the one field the server needs from its own certificate (RFC 5280: Certificate ->
tbsCertificate -> validity -> notAfter) rather than taking a cryptography library into every
installation of the package for it.
"""

from __future__ import annotations

import calendar
import re
import ssl
import time
from typing import Final

_PEM_BLOCK: Final = re.compile(
    # The first certificate block, as OpenSSL reads a chain: its marker lines alone, trailing
    # blanks allowed (a comment that quotes the marker is not one), and the TRUSTED and X509
    # forms OpenSSL also takes (a trusted certificate's DER is the certificate followed by its
    # trust settings).
    rb"^-----BEGIN (?P<kind>(?:TRUSTED |X509 )?CERTIFICATE)-----[ \t\r]*$"
    rb"(.*?)^-----END (?P=kind)-----",
    re.DOTALL | re.MULTILINE,
)
_SEQUENCE: Final = 0x30
_EXPLICIT_VERSION: Final = 0xA0
_UTC_TIME: Final = 0x17
_GENERALIZED_TIME: Final = 0x18


def _element(der: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of contents, end of contents) of the DER element at `at`."""
    tag, length = der[at], der[at + 1]
    start = at + 2
    if length & 0x80:  # long form: the next (length & 0x7f) bytes hold the length
        count = length & 0x7F
        if not 0 < count <= 4:
            raise ValueError("unsupported DER length")
        length = int.from_bytes(der[start : start + count], "big")
        start += count
    end = start + length
    if end > len(der):
        raise ValueError("DER element runs past its certificate")
    return tag, start, end


def _children(der: bytes, start: int, end: int) -> list[tuple[int, int, int]]:
    found = []
    at = start
    while at < end:
        element = _element(der, at)
        found.append(element)
        at = element[2]
    return found


def _seconds(tag: int, text: str) -> float:
    """A UTCTime (YYMMDDHHMMSSZ, 1950-2049) or GeneralizedTime (YYYYMMDDHHMMSSZ) as seconds
    since the epoch; the only forms RFC 5280 allows in a certificate."""
    if tag == _UTC_TIME:
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    elif tag != _GENERALIZED_TIME:
        raise ValueError("not a certificate time")
    parsed = time.strptime(text, "%Y%m%d%H%M%SZ")
    return float(calendar.timegm(parsed))


def not_after(pem_chain: bytes) -> float | None:
    """The first certificate's notAfter (seconds since the epoch), or None when it cannot be
    read (no PEM certificate, a damaged one): that certificate is refused on other grounds."""
    block = _PEM_BLOCK.search(pem_chain)
    if block is None:
        return None
    try:
        der = ssl.PEM_cert_to_DER_cert(
            "-----BEGIN CERTIFICATE-----\n"
            + block.group(2).decode("ascii").strip()
            + "\n"
            + "-----END CERTIFICATE-----\n"
        )
        tag, start, end = _element(der, 0)
        if tag != _SEQUENCE:
            return None
        tag, start, end = _element(der, start)  # tbsCertificate
        fields = _children(der, start, end)
        if fields and fields[0][0] == _EXPLICIT_VERSION:
            fields = fields[1:]
        # serialNumber, signature, issuer, validity
        tag, start, end = fields[3]
        if tag != _SEQUENCE:
            return None
        (_, _, _), (time_tag, time_start, time_end) = _children(der, start, end)[:2]
        return _seconds(time_tag, der[time_start:time_end].decode("ascii"))
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def utc_text(seconds: float) -> str:
    """A time as log lines and messages give it: 2026-12-07T20:58:00Z."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
