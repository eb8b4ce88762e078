"""The transport ceiling: a grpc.aio server with the resolver's method and message shapes that
never calls the resolver.

It serves `npu.resolver.v1.Resolver/Resolve` on raw bytes, as the real server does, with the
real server's channel options and trailing metadata. Each call parses its ResolveRequest (so the
reply can carry the request's id) and answers a ResolveResponse built once at start from a
typical resolution (about the size of a real answer) with the request's workdir appended as one
more `paths` entry. What the real server costs above this is the resolver's share.

    python -m benchmarks.echo_server --port 50999      (listens on 127.0.0.1 only)

Logs one JSON line `{"event": "serving", "pid": ...}` on stderr when ready; SIGTERM or SIGINT
drains and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Final

import grpc

from benchmarks.core_bench import TYPICAL_CONFIG, TYPICAL_ENV
from npu_resolver import ResolveRequest, resolve
from npu_resolver_client.wire import pb, resolution_to_proto
from npu_resolver_server import PID_METADATA_KEY, ServerSettings
from npu_resolver_server._app import server_options
from npu_resolver_server._encode import field

SERVICE: Final = "npu.resolver.v1.Resolver"
ECHO_PATH_KEY: Final = b"workdir_echo"


def prebuilt_response() -> bytes:
    """A ResolveResponse about the size of the real server's answer to a typical request."""
    request = ResolveRequest(
        product="atlas-a2", config=TYPICAL_CONFIG, env=TYPICAL_ENV, workdir="/jobs/echo/00000000"
    )
    return resolution_to_proto(resolve(request)).SerializeToString()


class Echo:
    """The one handler: parse the request, answer the prebuilt bytes plus the echoed workdir."""

    def __init__(self) -> None:
        self.response = prebuilt_response()
        self.trailing = ((PID_METADATA_KEY, str(os.getpid())),)

    async def resolve(self, raw: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            request = pb.ResolveRequest.FromString(raw)
        except Exception:  # a malformed request is the caller's fault, as in the real server
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "not a ResolveRequest")
            raise
        entry = field(1, ECHO_PATH_KEY) + field(2, request.workdir.encode())
        context.set_trailing_metadata(self.trailing)
        return self.response + field(6, entry)  # ResolveResponse.paths[workdir_echo]


async def serve(port: int, grace: float) -> int:
    host = "127.0.0.1"
    settings = ServerSettings(host=host, port=port)
    server = grpc.aio.server(options=server_options(settings))
    echo = Echo()
    handler = grpc.method_handlers_generic_handler(
        SERVICE, {"Resolve": grpc.unary_unary_rpc_method_handler(echo.resolve)}
    )
    server.add_generic_rpc_handlers((handler,))
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        print(json.dumps({"event": "start_failed", "port": port}), file=sys.stderr, flush=True)
        return 2
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    line = {"event": "serving", "pid": os.getpid(), "port": bound, "bytes": len(echo.response)}
    print(json.dumps(line), file=sys.stderr, flush=True)
    await stop.wait()
    await server.stop(grace)
    print(json.dumps({"event": "stopped", "pid": os.getpid()}), file=sys.stderr, flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--grace-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    return asyncio.run(serve(args.port, args.grace_seconds))


if __name__ == "__main__":
    sys.exit(main())
