"""The checks the client makes of its bearer token and TLS files, where the mistake is made.

The CLI's `--token-file`, `--tls-ca`, `--tls-cert` and `--tls-key` use the same checks, so a
flag and a constructor argument are refused alike.
"""

from __future__ import annotations

__all__ = ["checked_pem", "checked_token"]


def checked_token(token: str) -> str:
    """A bearer token fit for its header. One read from a file keeps its newline, which gRPC
    refuses only at the first call (INTERNAL: Invalid metadata): it is stripped, and a token
    that cannot travel in a header is a ValueError here, where the mistake is made."""
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


def checked_pem(what: str, data: bytes | None) -> bytes | None:
    """Certificates and keys as gRPC takes them, PEM text. Anything else (DER, a path given as
    bytes, an empty file) fails only at the first call, as if the server could not be reached:
    it is a ValueError here, where the mistake is made."""
    if data is not None and not (b"-----BEGIN " in data and b"-----END " in data):
        raise ValueError(f"{what} is not PEM text (no -----BEGIN and -----END lines)")
    return data
