"""A server's address checked before a channel is made (the client and the CLI use it; so may a
launcher that reads addresses from its own config): gRPC takes any text, and a mistake
becomes a call to the wrong place (no port dials 443; port 99999 dials 34463) or an UNAVAILABLE
at the first call, far from where the address was written."""

from __future__ import annotations

import re
from typing import Final

SCHEMES: Final = (
    "dns:",
    "unix:",
    "unix-abstract:",
    "ipv4:",
    "ipv6:",
    "vsock:",
    "xds:",
    "google-c2p:",
)
"""The name schemes gRPC for Python resolves (a resolver of one's own cannot be added there):
a target written with one, in any case, is passed on as it is."""
_URI: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
"""Any other scheme: gRPC would look the whole text up as a host name (grpc://, http://)."""
_HOST_PORT: Final = re.compile(r"(?:\[[0-9A-Fa-f:.]+(?:%[^\s\]/]+)?\]|[^\s:/\[\]]+):([0-9]{1,5})")
"""host:port, or [IPv6]:port with an optional zone (fe80::1%eth0)."""
FORM: Final = "HOST:PORT with a port in 1-65535 (or a gRPC target such as dns:///host:port)"


def checked_target(target: str) -> str:
    """`target` as HOST:PORT (or [v6]:PORT), or a gRPC target with its scheme; a ValueError
    naming it otherwise."""
    if not isinstance(target, str):
        kind = type(target).__name__
        raise TypeError(f"target must be a str such as '127.0.0.1:50051', not {kind}")
    if target.lower().startswith(SCHEMES):
        return target
    if _URI.match(target):
        schemes = ", ".join(scheme.rstrip(":") for scheme in SCHEMES)
        raise ValueError(
            f"target {target!r} is not {FORM}: gRPC knows no scheme {target.partition(':')[0]!r} "
            f"and would look the whole text up as a host name; use {schemes}, or none"
        )
    match = _HOST_PORT.fullmatch(target)
    if match is None or not 1 <= int(match.group(1)) <= 65535:
        raise ValueError(f"target {target!r} is not {FORM}")
    return target
