"""A refused call leaves nothing of itself in the server once its reply is sent.

A long-lived server collects reference cycles of long-lived objects only in rare full passes, so
anything a refusal left in a cycle (its handler's frame, the request's bytes among its locals)
would pile up between them: a stream of large refused requests once grew a worker's memory by
about their own size each. With the cycle collector off, what stays behind here is what would
pile up there.
"""

from __future__ import annotations

import gc
import types
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from npu_resolver_client.wire import pb
from npu_resolver_server import PID_METADATA_KEY, ServerSettings
from tests._server import ThreadServer

RESOLVE = "/npu.resolver.v1.Resolver/Resolve"
CALLS = 40


@pytest.fixture
def no_cycle_collector() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _server_frames() -> int:
    """Frames of the server's own code still alive (held by a traceback, say)."""
    return sum(
        1
        for o in gc.get_objects()
        if isinstance(o, types.FrameType) and "npu_resolver_server" in o.f_code.co_filename
    )


def _refused(
    target: str, payload: bytes, metadata: tuple[tuple[str, str], ...] = ()
) -> Iterator[grpc.RpcError]:
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(RESOLVE)
        for _ in range(CALLS):
            with pytest.raises(grpc.RpcError) as info:
                call(payload, metadata=metadata, timeout=10)
            yield info.value


def test_invalid_argument_replies_leave_no_frame_behind(no_cycle_collector: None) -> None:
    too_many_keys = pb.ResolveRequest(product="atlas-a2")
    too_many_keys.config.update({f"k{i}": i for i in range(20_000)})  # over max_struct_keys
    payload = too_many_keys.SerializeToString()
    with ThreadServer() as server:
        before = _server_frames()
        for error in _refused(server.target, payload):
            assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert error.details()
            assert dict(error.trailing_metadata())[PID_METADATA_KEY]
        assert _server_frames() - before < 4


def test_unauthenticated_replies_leave_no_frame_behind(
    tmp_path: Path, no_cycle_collector: None
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t0k")
    settings = ServerSettings(port=0, admin_token_file=token_file, protect_resolve=True)
    payload = pb.ResolveRequest(product="atlas-a2").SerializeToString()
    with ThreadServer(settings) as server:
        before = _server_frames()
        for error in _refused(server.target, payload, (("authorization", "Bearer wrong"),)):
            assert error.code() is grpc.StatusCode.UNAUTHENTICATED
            assert error.details() == "the bearer token is not valid"
        assert _server_frames() - before < 4


def test_unavailable_replies_keep_no_request_bytes(
    monkeypatch: pytest.MonkeyPatch, no_cycle_collector: None
) -> None:
    """UNAVAILABLE goes as context.abort sends it, so that clients retry it; abort's exception
    stays with the call, and the handler's frame in its traceback, but not the request."""
    from npu_resolver_server._large import LargeRequests

    monkeypatch.setattr(LargeRequests, "full", property(lambda self: True))
    large = pb.ResolveRequest(
        product="atlas-a2",
        config_json='{"op_debug_config": "/job/debug.cfg"}',
        attachments={"op_debug_config": "op_debug_list = " + "x" * 200_000},
    )
    with ThreadServer() as server:
        for error in _refused(server.target, large.SerializeToString()):
            assert error.code() is grpc.StatusCode.UNAVAILABLE
        held = [
            (frame.f_code.co_name, name)
            for frame in gc.get_objects()
            if isinstance(frame, types.FrameType)
            and "npu_resolver_server" in frame.f_code.co_filename
            for name, value in frame.f_locals.items()
            if isinstance(value, bytes | str) and len(value) > 100_000
        ]
    assert held == []
