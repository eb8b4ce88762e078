"""The checks the client makes of its bearer token and TLS files, where the mistake is made.

The CLI's `--token-file`, `--tls-ca`, `--tls-cert` and `--tls-key` use the same checks, so a
flag and a constructor argument are refused alike.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Final, Literal

__all__ = ["PemKind", "checked_pair", "checked_pem", "checked_token", "pair_problem", "pem_problem"]


def checked_token(token: str) -> str:
    """A bearer token fit for its header. One read from a file keeps its newline, which gRPC
    refuses only at the first call (INTERNAL: Invalid metadata): it is stripped, and a token
    that cannot travel in a header is a ValueError here, where the mistake is made."""
    if not isinstance(token, str):  # bytes read from a file, say: a TypeError naming it
        raise TypeError(
            f"token must be a str, not {type(token).__name__}"
            + ("; decode it first (token.decode())" if isinstance(token, bytes) else "")
        )
    token = token.strip()
    if not token:
        raise ValueError("token is empty (or only whitespace); pass token=None for no token")
    for index, char in enumerate(token):
        if not " " <= char <= "~":
            raise ValueError(
                f"token holds {char!r} at position {index}, which an HTTP header value cannot "
                "carry (only printable ASCII: no control characters, no non-ASCII)"
            )
    return token


PemKind = Literal["CERTIFICATE", "PRIVATE KEY"]
"""What a PEM file must hold: a CA bundle and a certificate chain hold certificates, a key file
a private key (PKCS#8 or a traditional RSA or EC one)."""

_BLOCK: Final = re.compile(rb"-----BEGIN ([A-Z0-9 ]{1,64})-----")
_THING: Final = {"CERTIFICATE": "certificate", "PRIVATE KEY": "private key"}
_BEGIN: Final = {
    "CERTIFICATE": "-----BEGIN CERTIFICATE-----",
    "PRIVATE KEY": "-----BEGIN ...PRIVATE KEY-----",
}


def _holds(data: bytes, label: str, kind: PemKind) -> bool:
    """Whether a block of this label, begun and ended, is what `kind` asks for (not an
    ENCRYPTED PRIVATE KEY: gRPC takes no passphrase)."""
    fits = label == kind if kind == "CERTIFICATE" else label.endswith(kind)
    fits = fits and not label.startswith("ENCRYPTED")
    return fits and b"-----END " + label.encode("ascii") + b"-----" in data


def pem_problem(data: bytes, kind: PemKind | None = None) -> str:
    """Why `data` cannot serve as PEM holding `kind`, or "" when it can. A key given where a
    certificate goes (or the other way round) is PEM all the same, and gRPC would refuse it only
    when it opens the connection, as a server it cannot reach."""
    if not (b"-----BEGIN " in data and b"-----END " in data):
        return "is not PEM text (no -----BEGIN and -----END lines)"
    if kind is None:
        return ""
    labels = list(dict.fromkeys(m.decode("ascii") for m in _BLOCK.findall(data)))
    if any(_holds(data, label, kind) for label in labels):
        return ""
    if kind == "PRIVATE KEY" and "ENCRYPTED PRIVATE KEY" in labels:
        return (
            "holds an ENCRYPTED PRIVATE KEY, which gRPC cannot use (it takes no passphrase); "
            "give the key decrypted (openssl pkey -in KEY -out PLAIN), in a file only the "
            "server's user can read"
        )
    found = ", ".join(labels) if labels else "no complete block"
    other: PemKind = "PRIVATE KEY" if kind == "CERTIFICATE" else "CERTIFICATE"
    swapped = (
        f" (a {_THING[other]} where the {_THING[kind]} goes?)"
        if any(_holds(data, label, other) for label in labels)
        else ""
    )
    return (
        f"holds no {_THING[kind]}: no {_BEGIN[kind]} block, only {found}{swapped}; "
        f"give the PEM file of the {_THING[kind]}"
    )


def checked_pem(what: str, data: bytes | None, kind: PemKind | None = None) -> bytes | None:
    """Certificates and keys as gRPC takes them, PEM text, and with `kind` holding that kind
    of block. Anything else (DER, a path given as bytes, an empty file, a key given for a
    certificate) fails only at the first call, as if the server could not be reached: it is a
    ValueError here naming `what`, where the mistake is made."""
    if data is not None:
        problem = pem_problem(data, kind)
        if problem:
            raise ValueError(f"{what} {problem}")
    return data


def pair_problem(
    certificate_chain: bytes, private_key: bytes, chain: str = "the certificate_chain"
) -> str:
    """Why the key cannot serve with the chain's first certificate (`chain` names it), or ""
    when it can or that cannot be told here (no memory files on this system). gRPC finds a key
    of another certificate or algorithm, a damaged one or an encrypted one only when it opens a
    connection, and says so as a server it cannot reach (a server: as a port it cannot bind).
    The check is OpenSSL's own, on copies held in memory (no file is written)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # judge the pair, not the key's strength
    try:
        with ExitStack() as files:
            chain_path = files.enter_context(_in_memory(certificate_chain))
            key_path = files.enter_context(_in_memory(private_key))
            context.load_cert_chain(chain_path, key_path, password=_no_passphrase)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            return (
                f"does not belong to {chain}'s first certificate (their public keys differ): "
                "give the key the certificate was issued for"
            )
        why = f"OpenSSL: {exc.reason}" if exc.reason else "OpenSSL cannot read the pair"
        return (  # a key of another algorithm, a damaged key or certificate, ...
            f"cannot serve with {chain}'s first certificate ({why}): give the key the "
            "certificate was issued for, as PEM"
        )
    except _PassphraseAskedError:
        return "is encrypted, and gRPC takes no passphrase: give the key decrypted"
    except (OSError, ValueError):
        pass
    return ""


def checked_pair(certificate_chain: bytes | None, private_key: bytes | None) -> None:
    """A ValueError naming private_key when it does not go with the certificate chain."""
    if certificate_chain is not None and private_key is not None:
        problem = pair_problem(certificate_chain, private_key)
        if problem:
            raise ValueError(f"private_key {problem}")


class _PassphraseAskedError(Exception):
    """An encrypted key: OpenSSL must never prompt on the terminal for its passphrase."""


def _no_passphrase() -> bytes:
    raise _PassphraseAskedError


@contextmanager
def _in_memory(data: bytes) -> Iterator[str]:
    """A path naming `data` in an anonymous memory file (Linux); OSError where there is none."""
    if not hasattr(os, "memfd_create"):
        raise OSError("no memory files here")
    fd = os.memfd_create("pem", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)
