"""The client's event loops, close() with calls in flight, bearer tokens, and error reports too
large for the status details: through fake servers whose handlers the tests write, and the
real one."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import math
import pickle
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2, message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

import npu_resolver
from npu_resolver import Resolution, ResolveRequest, resolve
from npu_resolver_client import (
    AsyncResolverClient,
    ResolveError,
    ResolverCallError,
    ResolverClient,
    ResolverClientError,
    ResolverUnavailable,
    channel_options,
)
from npu_resolver_client import _client as client_module
from npu_resolver_client.wire import (
    REPORT_CUT,
    pb,
    request_to_proto,
    resolution_to_proto,
    violation_field,
)
from npu_resolver_server import ServerSettings
from tests._server import ThreadServer, grpc_server, grpc_target  # noqa: F401

SERVICE = "npu.resolver.v1.Resolver"
TWO_ERRORS = ResolveRequest(
    product="atlas-training",
    config={"hccl_timeout": 17341, "graph_run_mode": 0},
    env={"AOE_MODE": "2"},  # R-AOE-1: an error under strict, on aoe_mode, from the variable
    strict=True,
)
Handler = Callable[[Any, grpc.ServicerContext], Any]


class FakeResolver:
    """A Resolver server on 127.0.0.1 (a free port) answering Resolve and ListProducts with
    the test's handlers; it records the Resolve requests it was sent."""

    def __init__(
        self,
        resolve: Handler | None = None,
        list_products: Handler | None = None,
        resolve_batch: Handler | None = None,
    ) -> None:
        self.requests: list[pb.ResolveRequest] = []
        self.batches: list[list[str]] = []
        """The products of each ResolveBatch request's items, in the order sent."""
        self._resolve_batch = resolve_batch
        self.started = threading.Semaphore(0)
        self.release = threading.Event()
        self._resolve = resolve
        self._list_products = list_products or self._slow_list_products
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        handlers = {
            "Resolve": grpc.unary_unary_rpc_method_handler(
                self._on_resolve,
                request_deserializer=pb.ResolveRequest.FromString,
                response_serializer=pb.ResolveResponse.SerializeToString,
            ),
            "ResolveBatch": grpc.unary_unary_rpc_method_handler(
                self._on_resolve_batch,
                request_deserializer=pb.ResolveBatchRequest.FromString,
                response_serializer=pb.ResolveBatchResponse.SerializeToString,
            ),
            "ListProducts": grpc.unary_unary_rpc_method_handler(
                self._on_list_products,
                request_deserializer=pb.ListProductsRequest.FromString,
                response_serializer=pb.ListProductsResponse.SerializeToString,
            ),
        }
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, handlers),)
        )
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _on_resolve(self, request: pb.ResolveRequest, context: grpc.ServicerContext) -> Any:
        copy = pb.ResolveRequest()
        copy.CopyFrom(request)
        self.requests.append(copy)
        assert self._resolve is not None
        return self._resolve(request, context)

    def _on_resolve_batch(
        self, request: pb.ResolveBatchRequest, context: grpc.ServicerContext
    ) -> Any:
        self.batches.append([item.product for item in request.requests])
        assert self._resolve_batch is not None
        return self._resolve_batch(request, context)

    def _on_list_products(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.started.release()
        return self._list_products(request, context)

    def _slow_list_products(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Answers once the test releases it: a call that stays in flight."""
        self.release.wait(10)
        return pb.ListProductsResponse()

    def wait_started(self, count: int, timeout: float = 10) -> None:
        for _ in range(count):
            assert self.started.acquire(timeout=timeout), "the call did not reach the server"

    def __enter__(self) -> FakeResolver:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self._server.stop(0).wait(5)


def _abort_with(context: grpc.ServicerContext, details: list[message.Message], text: str) -> None:
    packed = []
    for detail in details:
        item = any_pb2.Any()
        item.Pack(detail)
        packed.append(item)
    status = status_pb2.Status(
        code=grpc.StatusCode.INVALID_ARGUMENT.value[0], message=text, details=packed
    )
    context.abort_with_status(rpc_status.to_status(status))


def _bad_request(resolution: Resolution, keep: int | None = None) -> error_details_pb2.BadRequest:
    """The BadRequest the server sends for TWO_ERRORS' report, its list cut to `keep`
    violations."""
    violations = [
        error_details_pb2.BadRequest.FieldViolation(
            field=violation_field(d, TWO_ERRORS), reason=d.code.value, description=d.message
        )
        for d in resolution.errors
    ]
    return error_details_pb2.BadRequest(field_violations=violations[:keep])


def _report_left_out(keep: int | None = 1, fail_again: bool = False) -> Handler:
    """Resolve as the server answers TWO_ERRORS when its report is too large for the status
    details: INVALID_ARGUMENT with a (shortened) BadRequest only, and the report in the body
    with validate_only (or INVALID_ARGUMENT again, `fail_again`)."""

    def handler(request: pb.ResolveRequest, context: grpc.ServicerContext) -> Any:
        resolution = resolve(TWO_ERRORS)  # the only request sent
        if request.validate_only and not fail_again:
            return resolution_to_proto(resolution)
        cut = error_details_pb2.ErrorInfo(reason=REPORT_CUT, domain="npu.resolver.v1")
        _abort_with(context, [_bad_request(resolution, keep), cut], "the report is too large")
        return None

    return handler


def _refused_unread(request: pb.ResolveRequest, context: grpc.ServicerContext) -> Any:
    """Resolve as the server refuses a request it did not read (an env map of thousands):
    INVALID_ARGUMENT, one violation, no report and no REPORT_CUT."""
    violation = error_details_pb2.BadRequest.FieldViolation(
        field="env", reason="TOO_MANY_ENTRIES", description="more than 4096 env entries"
    )
    bad = error_details_pb2.BadRequest(field_violations=[violation])
    _abort_with(context, [bad], "more than 4096 env entries")


def _json(resolution: Resolution | None) -> Any:
    assert resolution is not None
    return resolution.to_json()


@pytest.fixture
def slow_server() -> Iterator[FakeResolver]:
    with FakeResolver() as server:
        yield server


# --------------------------------------------------------------------------- event loops


def test_an_async_client_made_outside_any_loop_serves_asyncio_run(grpc_target: str) -> None:  # noqa: F811
    client = AsyncResolverClient(grpc_target)  # as at module level: no loop is running

    async def main() -> int:
        try:
            return len(await client.list_products())
        finally:
            await client.close()

    assert asyncio.run(main()) > 0


def test_an_async_client_kept_from_one_asyncio_run_to_the_next_keeps_working(
    grpc_target: str,  # noqa: F811
) -> None:
    async def make() -> AsyncResolverClient:
        return AsyncResolverClient(grpc_target)

    client = asyncio.run(make())  # made in a loop that is closed before the first call

    async def products() -> int:
        return len(await client.list_products())

    first = asyncio.run(products())
    assert asyncio.run(products()) == first  # the first loop is closed: a new channel
    assert asyncio.run(products()) == first
    asyncio.run(client.close())
    with pytest.raises(ResolverCallError, match="closed"):
        asyncio.run(products())


def test_an_async_client_refuses_a_second_loop_while_its_first_is_open(
    grpc_target: str,  # noqa: F811
) -> None:
    client = AsyncResolverClient(grpc_target)
    first = asyncio.new_event_loop()
    try:
        assert first.run_until_complete(client.list_products())
        with pytest.raises(ResolverCallError, match="event loop") as info:
            asyncio.run(client.list_products())
        assert info.value.code is grpc.StatusCode.FAILED_PRECONDITION
        assert isinstance(info.value, ResolverClientError)
        assert info.value.sent is False  # refused here, before any call
        first.run_until_complete(client.close())
    finally:
        first.close()


def _first_calls_at_once(client: AsyncResolverClient) -> list[str]:
    """Two threads, each in its own asyncio.run, making the client's first call at once: how
    each call ended ("served" or the error's code). Each loop stays open until both calls
    ended: a loop that ended first would leave the client to the other, rightly."""
    start, ended = threading.Barrier(2), threading.Barrier(2)
    outcomes: list[str] = []

    async def call() -> None:
        start.wait(5)
        try:
            await client.list_products()
            outcomes.append("served")
        except ResolverCallError as error:
            outcomes.append(error.code.name)
        await asyncio.to_thread(ended.wait, 10)

    threads = [threading.Thread(target=asyncio.run, args=(call(),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return outcomes


def test_two_loops_making_their_first_calls_at_once_do_not_both_get_a_channel(
    grpc_target: str,  # noqa: F811
) -> None:
    """One loop gets the channel, the other is refused, every time. Both were served on two
    channels (most often), one of them then refused from its second call on and its channel
    left for nobody to close."""
    for _ in range(20):
        client = AsyncResolverClient(grpc_target)
        assert sorted(_first_calls_at_once(client)) == ["FAILED_PRECONDITION", "served"]
        asyncio.run(client.close())


def test_close_after_the_clients_loop_is_gone_closes_its_channel(
    grpc_target: str,  # noqa: F811
) -> None:
    """A client kept past its `asyncio.run()`: close() in another loop ends the channel's
    connection (left open until the client was collected, it broke grpc.aio in every process
    forked meanwhile), and so does the next loop's first call for the channel it replaces."""

    async def first_call(client: AsyncResolverClient) -> grpc.aio.Channel:
        await client.list_products()
        return client.channel

    kept = AsyncResolverClient(grpc_target)
    channel = asyncio.run(first_call(kept))
    asyncio.run(kept.close())
    assert channel.get_state() is grpc.ChannelConnectivity.SHUTDOWN

    reused = AsyncResolverClient(grpc_target)
    first = asyncio.run(first_call(reused))

    async def next_call() -> None:
        await reused.list_products()
        await asyncio.sleep(0.05)  # the old channel's close, run in this loop

    asyncio.run(next_call())
    assert first.get_state() is grpc.ChannelConnectivity.SHUTDOWN
    asyncio.run(reused.close())


def test_an_async_client_whose_channel_was_never_opened_closes(grpc_target: str) -> None:  # noqa: F811
    client = AsyncResolverClient(grpc_target)

    async def close_then_call() -> None:
        await client.close()
        await client.close()  # twice is fine
        with pytest.raises(ResolverCallError, match="closed") as info:
            await client.resolve("atlas-a2")
        assert info.value.code is grpc.StatusCode.FAILED_PRECONDITION

    asyncio.run(close_then_call())


def test_an_async_client_closes_after_its_loop_is_gone(grpc_target: str) -> None:  # noqa: F811
    client = AsyncResolverClient(grpc_target)
    assert asyncio.run(client.list_products())
    asyncio.run(client.close())  # a later loop: nothing to wait for, and no error


@pytest.mark.parametrize("owner_loop", ["left open", "asyncio.run"])
def test_close_from_another_loop_returns_when_the_owning_loop_stops_first(
    grpc_target: str,  # noqa: F811
    owner_loop: str,
) -> None:
    """close() from another thread while the client's own loop runs hands the close to that
    loop; when that loop stops before running it, close() waited forever (a loop left open)
    or raised a CancelledError nobody asked for (asyncio.run's shutdown cancelled it)."""
    client = AsyncResolverClient(grpc_target)
    called = threading.Event()

    async def use_then_block() -> None:
        await client.list_products()
        called.set()
        time.sleep(1.0)  # the loop is running, and busy, when close() is asked for; then ends

    def owner() -> None:
        if owner_loop == "asyncio.run":
            asyncio.run(use_then_block())
        else:
            asyncio.new_event_loop().run_until_complete(use_then_block())

    thread = threading.Thread(target=owner)
    thread.start()
    try:
        assert called.wait(30)
        asyncio.run(asyncio.wait_for(client.close(), client_module.CLOSE_ELSEWHERE_S + 20))
    finally:
        thread.join(30)


# --------------------------------------------------------------------------- close() in flight


def test_close_from_another_loop_cancels_the_calls_in_flight_in_the_clients_own(
    slow_server: FakeResolver,
) -> None:
    client = AsyncResolverClient(slow_server.target)
    outcome: list[object] = []

    async def call() -> None:
        try:
            outcome.append(await client.list_products())
        except ResolverClientError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=lambda: asyncio.run(call()))
    thread.start()
    try:
        slow_server.wait_started(1)
        asyncio.run(client.close())
        thread.join(5)  # the server would answer after 10 s
        assert not thread.is_alive(), "the call ran on after close()"
    finally:
        slow_server.release.set()
        thread.join(10)
    (error,) = outcome
    assert isinstance(error, ResolverCallError) and error.code is grpc.StatusCode.CANCELLED
    assert "closed during the call" in error.details


async def test_calls_in_flight_when_the_async_client_closes_raise_a_client_error(
    slow_server: FakeResolver,
) -> None:
    client = AsyncResolverClient(slow_server.target)
    tasks = [asyncio.create_task(client.list_products()) for _ in range(3)]
    await asyncio.to_thread(slow_server.wait_started, 3)
    await client.close()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert not any(task.cancelled() for task in tasks)
    for result in results:
        assert isinstance(result, ResolverCallError), result
        assert result.code is grpc.StatusCode.CANCELLED
        assert "closed during the call" in result.details


async def test_a_cancelled_task_still_gets_cancelled_error(slow_server: FakeResolver) -> None:
    async with AsyncResolverClient(slow_server.target) as client:
        task = asyncio.create_task(client.list_products())
        await asyncio.to_thread(slow_server.wait_started, 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

        # Cancelled and closed at once: the cancellation wins.
        task = asyncio.create_task(client.list_products())
        await asyncio.to_thread(slow_server.wait_started, 1)
        task.cancel()
        await client.close()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()


def test_closing_the_blocking_client_under_a_call_is_a_client_error(
    slow_server: FakeResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = ResolverClient(slow_server.target)
    check = client_module._check_open

    def closed_by_another_thread_right_after(closed: bool) -> None:
        check(closed)
        client.close()  # between the open check and the call, as another thread may

    monkeypatch.setattr(client_module, "_check_open", closed_by_another_thread_right_after)
    with pytest.raises(ResolverCallError, match="the client is closed") as info:
        client.list_products()
    assert info.value.code is grpc.StatusCode.FAILED_PRECONDITION


def _close_under_calls(target: str) -> list[BaseException]:
    """Closes a client while 8 threads call it in a loop; what else than a client error
    reached them."""
    client = ResolverClient(target)
    leaked: list[BaseException] = []
    looping = threading.Semaphore(0)

    def call() -> None:
        first = True
        while True:
            try:
                client.list_products()
            except ResolverClientError:
                return
            except BaseException as exc:
                leaked.append(exc)
                return
            if first:  # this thread is calling in a loop now
                looping.release()
                first = False

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for _ in threads:  # every thread has answered calls, and is in (or about to make) another
        assert looping.acquire(timeout=30)
    client.close()
    for thread in threads:
        thread.join(10)
    assert not any(thread.is_alive() for thread in threads)  # each saw the close
    return leaked


def test_closing_the_blocking_client_from_other_threads_raises_only_client_errors(
    grpc_target: str,  # noqa: F811
) -> None:
    for _ in range(5):
        leaked = _close_under_calls(grpc_target)
        assert not leaked, leaked


def test_a_call_in_flight_when_the_blocking_client_closes_says_so(
    slow_server: FakeResolver,
) -> None:
    client = ResolverClient(slow_server.target)
    errors: list[BaseException] = []

    def call() -> None:
        try:
            client.list_products()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    slow_server.wait_started(1)
    client.close()
    thread.join(10)
    assert len(errors) == 1 and isinstance(errors[0], ResolverCallError)
    assert errors[0].code is grpc.StatusCode.CANCELLED
    assert "closed during the call" in errors[0].details


# --------------------------------------------------------------------------- bearer tokens


def test_a_token_read_from_a_file_works_with_its_newline(tmp_path: Path) -> None:
    admin = tmp_path / "admin-token"
    admin.write_text("t0k\n")
    settings = ServerSettings(port=0, admin_token_file=admin, protect_resolve=True)
    token = admin.read_text()  # "t0k\n", as a launcher reads it
    with ThreadServer(settings) as server:
        with ResolverClient(server.target, token=token) as client:
            assert client.resolve("atlas-a2").ok

        async def call() -> bool:
            async with AsyncResolverClient(server.target, token=token) as client:
                return (await client.resolve("atlas-a2")).ok

        assert asyncio.run(call())


@pytest.mark.parametrize(
    ("token", "problem"),
    [
        ("", "empty"),
        (" \n", "empty"),
        ("t0k\x00", "cannot"),
        ("t0\rk", "cannot"),
        ("t\tk", "cannot"),
        ("t\x7fk", "cannot"),
        ("tök", "non-ASCII"),
    ],
)
@pytest.mark.parametrize("kind", [ResolverClient, AsyncResolverClient])
def test_a_token_no_header_can_carry_is_refused_at_construction(
    kind: type[Any], token: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem) as info:
        kind("127.0.0.1:1", token=token)
    assert "token" in str(info.value)


@pytest.mark.parametrize("kind", [ResolverClient, AsyncResolverClient])
def test_a_token_given_as_bytes_is_a_type_error_naming_it(kind: type[Any]) -> None:
    """A token read with Path.read_bytes(): said where it is given, with what to do."""
    with pytest.raises(TypeError, match=r"^token must be a str, not bytes; decode it first"):
        kind("127.0.0.1:1", token=b"s3cret\n")


# --------------------------------------------------------------------------- large reports


def test_channel_options_take_trailers_over_16_kib_unless_the_caller_says_otherwise() -> None:
    options = channel_options()
    assert ("grpc.max_metadata_size", 4 * 1024 * 1024) in options
    mine = channel_options(extra=[("grpc.max_metadata_size", 32 * 1024)])
    assert [v for k, v in mine if k == "grpc.max_metadata_size"] == [32 * 1024]


def test_a_packed_report_between_8_and_16_kib_always_arrives() -> None:
    """gRPC's defaults refuse trailers over 8 KiB at random (all over 16 KiB)."""

    def resolve_padded(request: pb.ResolveRequest, context: grpc.ServicerContext) -> Any:
        resolution = resolve(TWO_ERRORS)  # the only request sent
        response = resolution_to_proto(resolution)
        padding = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field="x", description="y" * 9000)
            ]
        )
        _abort_with(context, [padding, response], "padded")
        return None

    with FakeResolver(resolve=resolve_padded) as server:
        with ResolverClient(server.target) as client:
            for _ in range(15):
                with pytest.raises(ResolveError) as info:
                    client.resolve_request(TWO_ERRORS)
                assert _json(info.value.resolution) == resolve(TWO_ERRORS).to_json()

        async def calls() -> None:
            async with AsyncResolverClient(server.target) as client:
                for _ in range(15):
                    with pytest.raises(ResolveError) as info:
                        await client.resolve_request(TWO_ERRORS)
                    assert _json(info.value.resolution) == resolve(TWO_ERRORS).to_json()

        asyncio.run(calls())


def _packed(target: str) -> ResolveError:
    """The error the real server gives for TWO_ERRORS, its report packed in the details."""
    with ResolverClient(target) as client, pytest.raises(ResolveError) as info:
        client.resolve_request(TWO_ERRORS)
    assert info.value.resolution is not None
    return info.value


def test_a_report_left_out_of_the_details_is_asked_for_again(grpc_target: str) -> None:  # noqa: F811
    packed = _packed(grpc_target)
    with FakeResolver(resolve=_report_left_out(keep=1)) as server:
        with ResolverClient(server.target) as client, pytest.raises(ResolveError) as info:
            client.resolve_request(TWO_ERRORS)
        assert [r.validate_only for r in server.requests] == [False, True]
        assert server.requests[1].config_json == server.requests[0].config_json
        error = info.value
        assert _json(error.resolution) == _json(packed.resolution)
        assert error.violations == packed.violations  # all of them, not the one sent
        assert [v.field for v in error.violations] == ["config.hccl_timeout", "env.AOE_MODE"]
        assert error.diagnostics == packed.diagnostics
        assert error.code is grpc.StatusCode.INVALID_ARGUMENT
        assert str(error) == str(packed) and not error.report_cut  # the whole report's words


async def test_the_async_client_asks_again_for_a_report_left_out(grpc_target: str) -> None:  # noqa: F811
    packed = _packed(grpc_target)
    with FakeResolver(resolve=_report_left_out(keep=None)) as server:
        async with AsyncResolverClient(server.target) as client:
            with pytest.raises(ResolveError) as info:
                await client.resolve_request(TWO_ERRORS)
        assert [r.validate_only for r in server.requests] == [False, True]
        assert _json(info.value.resolution) == _json(packed.resolution)
        assert info.value.violations == packed.violations
        assert str(info.value) == str(packed) and not info.value.report_cut


def test_when_the_second_ask_fails_the_first_error_stands() -> None:
    with FakeResolver(resolve=_report_left_out(keep=1, fail_again=True)) as server:
        with ResolverClient(server.target) as client, pytest.raises(ResolveError) as info:
            client.resolve_request(TWO_ERRORS)
        assert len(server.requests) == 2
        assert info.value.resolution is None and info.value.report_cut
        assert info.value.details == "the report is too large"  # its advice stands
        assert [v.reason for v in info.value.violations] == ["OUT_OF_RANGE"]


def test_a_request_refused_unread_is_sent_once_and_its_error_has_no_report() -> None:
    """Only a report cut for room (REPORT_CUT) is asked for again: a request refused before
    anything was resolved was sent twice, and came back with a report made up for it."""
    with FakeResolver(resolve=_refused_unread) as server:
        with ResolverClient(server.target) as client, pytest.raises(ResolveError) as info:
            client.resolve_request(ResolveRequest("atlas-a2"))
        assert len(server.requests) == 1
        assert info.value.resolution is None and not info.value.report_cut
        assert [v.reason for v in info.value.violations] == ["TOO_MANY_ENTRIES"]


async def test_the_async_client_sends_a_request_refused_unread_once() -> None:
    with FakeResolver(resolve=_refused_unread) as server:
        async with AsyncResolverClient(server.target) as client:
            with pytest.raises(ResolveError) as info:
                await client.resolve_request(ResolveRequest("atlas-a2"))
        assert len(server.requests) == 1 and info.value.resolution is None


def test_a_validate_only_request_is_not_sent_twice() -> None:
    with FakeResolver(resolve=_report_left_out(keep=1, fail_again=True)) as server:
        request = ResolveRequest(
            product=TWO_ERRORS.product, config=dict(TWO_ERRORS.config), validate_only=True
        )
        with ResolverClient(server.target) as client, pytest.raises(ResolveError):
            client.resolve_request(request)
        assert len(server.requests) == 1


def test_a_report_too_large_for_any_trailer_reaches_the_caller_whole() -> None:
    """The real server and a report of 200 errors (about 27 KB)."""
    request = ResolveRequest(
        product="atlas-training",
        config={f"no_such_option_{i}": i for i in range(200)},
        strict=True,
    )
    expected = resolve(request)
    assert len(expected.errors) == 200
    with ThreadServer() as server:
        with ResolverClient(server.target) as client, pytest.raises(ResolveError) as info:
            client.resolve_request(request)
        assert _json(info.value.resolution) == expected.to_json()
        assert len(info.value.violations) == 200

        async def call() -> ResolveError:
            async with AsyncResolverClient(server.target) as client:
                with pytest.raises(ResolveError) as info:
                    await client.resolve_request(request)
                return info.value

        error = asyncio.run(call())
        assert _json(error.resolution) == expected.to_json()
        assert len(error.violations) == 200


CUT_FOR_ROOM = ResolveRequest(
    product="atlas-training",
    config={**{f"no_such_option_{i}": i for i in range(30)}, "hccl_timeout": 17341},
)
"""31 errors: too many for the trailer, which lists some and advises validate_only."""


def _uncut(server: ThreadServer) -> ResolveError:
    """The error of CUT_FOR_ROOM as a batch item gives it: the whole report, never cut."""
    with ResolverClient(server.target) as client:
        (failure,) = client.resolve_batch([CUT_FOR_ROOM])
    assert isinstance(failure, client_module.ResolveFailure)
    error = failure.error()
    assert isinstance(error, ResolveError) and len(error.violations) == 31
    return error


def test_an_error_whose_report_was_asked_for_again_reads_as_if_it_had_fit() -> None:
    """Its text must not advise sending the request with validate_only: the client did."""
    with ThreadServer() as server:
        uncut = _uncut(server)
        with ResolverClient(server.target) as client, pytest.raises(ResolveError) as info:
            client.resolve_request(CUT_FOR_ROOM)
    error = info.value
    assert str(error) == str(uncut) and "validate_only" not in str(error)
    assert str(error).endswith("(and 30 more errors)")
    assert error.violations == uncut.violations and not error.report_cut
    assert _json(error.resolution) == _json(uncut.resolution)


def test_the_async_client_s_error_with_a_report_asked_again_reads_as_if_it_had_fit() -> None:
    async def call(target: str) -> ResolveError:
        async with AsyncResolverClient(target) as client:
            with pytest.raises(ResolveError) as info:
                await client.resolve_request(CUT_FOR_ROOM)
            return info.value

    with ThreadServer() as server:
        uncut = _uncut(server)
        error = asyncio.run(call(server.target))
    assert str(error) == str(uncut) and "validate_only" not in str(error)
    assert error.violations == uncut.violations and not error.report_cut
    assert _json(error.resolution) == _json(uncut.resolution)


UNREAD = ResolveRequest("atlas-a2", {f"bogus_option_{i}": 1 for i in range(40)})
"""40 errors: cut from the trailer, and a full report of about 11 KB."""
UNREAD_ENDS = (
    r"; the full report, asked for again with validate_only, is [\d,]+ bytes and this "
    r"client's max_message_bytes is 6,000: raise max_message_bytes to read it all$"
)


def test_a_report_asked_again_too_large_for_the_client_says_which_limit_to_raise(
    grpc_target: str,  # noqa: F811
) -> None:
    """The client asked again with validate_only, and the reply passed its own
    max_message_bytes: the error must not advise asking with validate_only, which it did."""
    with (
        ResolverClient(grpc_target, max_message_bytes=6000) as client,
        pytest.raises(ResolveError) as info,
    ):
        client.resolve_request(UNREAD)
    error = info.value
    assert re.search(UNREAD_ENDS, str(error)), str(error)
    assert "send the request with validate_only" not in str(error)
    assert "errors listed)" in str(error)  # the server's count of the errors it listed stays
    assert error.resolution is None and error.report_cut and error.violations
    said = re.search(r"is ([\d,]+) bytes", str(error))
    assert said is not None
    size = int(said.group(1).replace(",", ""))
    with ResolverClient(grpc_target) as client:
        whole = client.resolve_request(replace(UNREAD, validate_only=True))
    assert size == resolution_to_proto(whole).ByteSize() > 6000


async def test_the_async_client_s_report_too_large_for_it_says_which_limit_to_raise(
    grpc_target: str,  # noqa: F811
) -> None:
    async with AsyncResolverClient(grpc_target, max_message_bytes=6000) as client:
        with pytest.raises(ResolveError) as info:
            await client.resolve_request(UNREAD)
    assert re.search(UNREAD_ENDS, str(info.value)), str(info.value)
    assert info.value.resolution is None and info.value.report_cut


@pytest.mark.parametrize("bad", [0, -1, float("nan"), -float("inf")])
def test_a_timeout_that_is_not_positive_is_a_value_error_naming_it(bad: float) -> None:
    """Not a call that fails at once as if the server were down (ResolverUnavailable)."""
    said = r"^timeout must be a positive number of seconds, or math.inf for no deadline"
    with pytest.raises(ValueError, match=said):
        ResolverClient("127.0.0.1:1", timeout=bad)
    with pytest.raises(ValueError, match=said):
        AsyncResolverClient("127.0.0.1:1", timeout=bad)
    with ResolverClient("127.0.0.1:1") as client, pytest.raises(ValueError, match=said):
        client.list_products(timeout=bad)

    async def per_call() -> None:
        client = AsyncResolverClient("127.0.0.1:1")
        try:
            await client.list_products(timeout=bad)
        finally:
            await client.close()

    with pytest.raises(ValueError, match=said):
        asyncio.run(per_call())


@pytest.mark.parametrize("long", [math.inf, 1e10, 1e300])
def test_an_infinite_or_huge_timeout_is_no_deadline_or_a_long_one(
    grpc_target: str,  # noqa: F811
    long: float,
) -> None:
    """math.inf means no deadline; a finite one too far off for gRPC (which takes it as past)
    is capped, so the call is answered rather than DEADLINE_EXCEEDED at once."""
    with ResolverClient(grpc_target, timeout=long) as client:
        assert client.resolve("atlas-a2").ok
    with ResolverClient(grpc_target) as client:
        assert client.resolve("atlas-a2", timeout=long).ok

    async def both() -> bool:
        client = AsyncResolverClient(grpc_target, timeout=long)
        try:
            first = await client.resolve("atlas-a2")
            second = await client.resolve("atlas-a2", timeout=long)
        finally:
            await client.close()
        return first.ok and second.ok

    assert asyncio.run(both())


def test_a_call_with_no_deadline_asks_again_for_its_report_with_none() -> None:
    """timeout=math.inf means no deadline; the second ask, for a report too large for the
    trailer, must not fall back to the client's default deadline."""
    error = ResolveError("too many errors", None)
    error.report_cut = True  # its report left out of the trailer
    message = pb.ResolveRequest(product="atlas-a2")
    ask = client_module._report_ask(error, message, None, time.monotonic())
    assert ask is not None and ask[1] == math.inf and ask[0].validate_only
    timed = client_module._report_ask(error, message, 5.0, time.monotonic())
    assert timed is not None and 0 < timed[1] <= 5.0


def test_a_report_asked_again_that_holds_no_error_leaves_the_first_error_as_it_was() -> None:
    """The policy may change between the two asks: a report that passes does not explain the
    failure. The error keeps what the first answer said, a report left out for room included."""
    error = ResolveError("the report is too large", None)
    error.report_cut = True
    request = ResolveRequest("atlas-a2")
    passing = resolution_to_proto(resolve(request))
    restored = client_module._resolve_error(error, request, passing)
    assert restored.resolution is None and restored.violations == ()
    assert restored.details == "the report is too large"
    assert restored.report_cut


def test_a_batch_reply_with_another_count_of_results_is_an_error_not_a_short_list() -> None:
    """Each result answers the request at its place: a reply that lost or added one cannot be
    paired, and pairing what is left would hand answers to the wrong requests."""
    request = ResolveRequest("atlas-a2")
    item = pb.ResolveBatchResult(response=resolution_to_proto(resolve(request)))
    for results in ([item], [item, item, item]):
        reply = pb.ResolveBatchResponse(results=results)
        with pytest.raises(ResolverCallError, match=f"answered {len(results)} results for 2"):
            client_module._batch_results(reply, [request, request])
    assert (
        len(client_module._batch_results(pb.ResolveBatchResponse(results=[item]), [request])) == 1
    )


SENT_BY_A_JOB = """
import asyncio, sys
from npu_resolver import ResolveRequest
from npu_resolver_client import AsyncResolverClient, ResolverClient

job = int(sys.argv[2])
env = {"HOME": "/home/u", "ASCEND_WORK_PATH": "/w", "HCCL_EXEC_TIMEOUT": "900", "JOB": str(job)}
files = {"modify_mixlist": "{}", "fusion_switch_file": "{}", "customize_dtypes": ""}


def turned(mapping):  # each job builds its maps in another order, as jobs do
    items = list(mapping.items())
    return dict(items[job:] + items[:job])


request = ResolveRequest(
    "atlas-a2", {"hccl_timeout": 600}, turned(env), "/job", attachments=turned(files)
)
with ResolverClient(sys.argv[1]) as client:
    client.resolve_request(request)

async def main():
    async with AsyncResolverClient(sys.argv[1]) as client:
        await client.resolve_request(request)

asyncio.run(main())
"""


def test_jobs_asking_the_same_send_the_same_bytes_whatever_their_process() -> None:
    """A server keys its answer cache by a request's bytes; protobuf writes a map's entries in
    an order that changes from process to process, so the client writes them in key order.
    Jobs differing only in a variable the resolver does not read, or building their maps in
    another order, send the same bytes too."""
    received: list[bytes] = []
    reply = resolution_to_proto(resolve(ResolveRequest("atlas-a2"))).SerializeToString()

    def record(raw: bytes, context: grpc.ServicerContext) -> bytes:
        received.append(raw)
        return reply

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    handler = grpc.unary_unary_rpc_method_handler(record)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE, {"Resolve": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        for job in ("1", "2", "3"):
            subprocess.run(
                [sys.executable, "-c", SENT_BY_A_JOB, f"127.0.0.1:{port}", job],
                check=True,
                timeout=60,
                cwd=Path(__file__).resolve().parents[1],
            )
    finally:
        server.stop(None)
    assert len(received) == 6
    assert len(set(received)) == 1, [r.hex() for r in received]
    wire = pb.ResolveRequest.FromString(received[0])
    assert set(wire.env) == {"HOME", "ASCEND_WORK_PATH", "HCCL_EXEC_TIMEOUT"}


SERVER_ONLY = (
    "pydantic",
    "pydantic_settings",
    "prometheus_client",
    "grpc_health",
    "grpc_reflection",
    "dotenv",
    "npu_resolver_server",
)
"""Modules only the server needs: a job environment with the client need not have them."""
LEAN_JOB = """
import sys

server_only = set(sys.argv[1].split(","))
if sys.argv[2] == "absent":

    class Absent:  # a job environment where the server's packages are not installed
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in server_only:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Absent())
import grpc  # grpcio imports grpc_health and grpc_reflection itself, when installed

before = set(sys.modules)
import npu_resolver_client
from npu_resolver_client import AsyncResolverClient, ResolverClient

ResolverClient("127.0.0.1:1").close()
AsyncResolverClient("127.0.0.1:1")
loaded = {name.partition(".")[0] for name in set(sys.modules) - before}
anywhere = {name.partition(".")[0] for name in sys.modules} - {"grpc_health", "grpc_reflection"}
print(",".join(sorted(loaded & server_only)) + ";" + ",".join(sorted(anywhere & server_only)))
"""


@pytest.mark.parametrize("installed", ["present", "absent"])
def test_the_clients_need_none_of_the_server_s_modules(installed: str) -> None:
    """A job environment may hold the client's runtime alone (grpcio, protobuf,
    googleapis-common-protos): importing the package and making both clients loads none of
    the server's modules, and works where they are not installed."""
    said = subprocess.run(
        [sys.executable, "-c", LEAN_JOB, ",".join(SERVER_ONLY), installed],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() == ";"


def test_the_client_writes_every_method_s_requests_in_key_order() -> None:
    """Every method of the service is written deterministically, each read as its reply."""
    methods = pb.DESCRIPTOR.services_by_name["Resolver"].methods
    assert {m.name: m.output_type.name for m in methods} == {
        name: reply.DESCRIPTOR.name for name, reply in client_module.REPLIES.items()
    }


def test_the_channel_keeps_grpcs_connect_timeout() -> None:
    """grpc.min_reconnect_backoff_ms is also gRPC's connect timeout (20 s by default): set to
    the reconnect backoff (100 ms), a handshake slower than that never completed
    (test_a_tls_server_across_a_slow_link_is_reached shows it end to end)."""
    assert "grpc.min_reconnect_backoff_ms" not in dict(channel_options())


@pytest.mark.parametrize(
    "target",
    [
        "127.0.0.1",
        "127.0.0.1:99999",
        "127.0.0.1:0",
        "",
        " 127.0.0.1:50051",
        "http://127.0.0.1:1",
        "HTTPS://resolver:443",
        "grpc://127.0.0.1:50051",
        "k8s:///resolver.ns:50051",  # Python's gRPC takes no resolver of the caller's own
    ],
)
@pytest.mark.parametrize("kind", [ResolverClient, AsyncResolverClient])
def test_a_target_that_is_not_host_port_is_refused_at_construction(
    kind: type[ResolverClient | AsyncResolverClient], target: str
) -> None:
    """gRPC takes any text: no port dials 443, port 99999 dials 34463 (its remainder), and the
    rest fail only at the first call. The constructor says so, as the CLI's --server does."""
    with pytest.raises(ValueError, match=r"^target .* is not HOST:PORT with a port in 1-65535"):
        kind(target)


@pytest.mark.parametrize(
    "target",
    [
        "localhost:50051",
        "[::1]:50051",
        "[fe80::1%eth0]:50051",  # a link-local address with its zone
        "dns:///resolver.ns.svc:50051",
        "unix:/run/r.sock",
        "DNS:///resolver.ns.svc:50051",  # gRPC reads a scheme in any case
        "xds:///resolver",
    ],
)
def test_host_port_and_grpc_targets_are_taken(target: str) -> None:
    ResolverClient(target).close()


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/nonexistent/ca.pem", r"^root_certificates: cannot read '/nonexistent/ca.pem': No such"),
        ("", r"^root_certificates is an empty path"),
    ],
)
def test_a_certificate_file_that_cannot_be_read_is_named_by_its_argument(
    path: str, said: str
) -> None:
    with pytest.raises(ValueError, match=said):
        ResolverClient("127.0.0.1:50051", root_certificates=path)


def _unavailable_once() -> Handler:
    """Resolve: UNAVAILABLE the first time (a worker going away), then the real answer."""
    calls = [0]

    def handler(request: pb.ResolveRequest, context: grpc.ServicerContext) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the worker is stopping")
        return resolution_to_proto(resolve(ResolveRequest(product=request.product)))

    return handler


def _unavailable(times: int, code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE) -> Handler:
    """Resolve: UNAVAILABLE (or `code`) the first `times` calls, then the real answer."""
    calls = [0]

    def handler(request: pb.ResolveRequest, context: grpc.ServicerContext) -> Any:
        calls[0] += 1
        if calls[0] <= times:
            context.abort(code, "the worker is restarting")
        return resolution_to_proto(resolve(ResolveRequest(product=request.product)))

    return handler


def test_the_client_rides_out_four_unavailable_answers_in_a_row() -> None:
    """Five attempts in all: the fifth answers, and after five UNAVAILABLE the call gives up."""
    with FakeResolver(resolve=_unavailable(4)) as server, ResolverClient(server.target) as c:
        assert c.resolve("atlas-a2").product == "atlas-a2"
    assert len(server.requests) == 5
    with (
        FakeResolver(resolve=_unavailable(5)) as server,
        ResolverClient(server.target) as c,
        pytest.raises(ResolverUnavailable),
    ):
        c.resolve("atlas-a2")
    assert len(server.requests) == 5, "a sixth attempt was made"


def test_a_call_the_server_cancelled_is_sent_again_and_at_last_fails_in_the_servers_words() -> None:
    """A draining server cancels the calls still queued: safe to send again (every method is a
    pure read). Cancelled every time, the call fails CANCELLED as the server said it, not as a
    call this client's close() cut short."""
    cancelled = grpc.StatusCode.CANCELLED
    with (
        FakeResolver(resolve=_unavailable(1, cancelled)) as server,
        ResolverClient(server.target) as c,
    ):
        assert c.resolve("atlas-a2").product == "atlas-a2"
    assert len(server.requests) == 2
    with (
        FakeResolver(resolve=_unavailable(5, cancelled)) as server,
        ResolverClient(server.target) as c,
        pytest.raises(ResolverCallError) as info,
    ):
        c.resolve("atlas-a2")
    assert len(server.requests) == 5
    assert info.value.code is cancelled
    assert info.value.details == "the worker is restarting"


LARGE_ATTACHMENT = {"modify_mixlist": '{"black-list": {"to-add": ["' + "x" * 400_000 + '"]}}'}
"""Over gRPC's default per-call retry buffer of 256 KiB, within the client's message limit."""


def test_a_request_over_256_kib_is_retried_like_a_small_one() -> None:
    with FakeResolver(resolve=_unavailable_once()) as server, ResolverClient(server.target) as c:
        answer = c.resolve("atlas-a2", attachments=LARGE_ATTACHMENT)
    assert answer.product == "atlas-a2"
    assert len(server.requests) == 2, "the call was not sent again"


async def test_the_async_client_retries_a_request_over_256_kib() -> None:
    with FakeResolver(resolve=_unavailable_once()) as server:
        async with AsyncResolverClient(server.target) as client:
            answer = await client.resolve("atlas-a2", attachments=LARGE_ATTACHMENT)
    assert answer.product == "atlas-a2"
    assert len(server.requests) == 2, "the call was not sent again"


def test_an_answer_holds_copies_of_the_callers_objects(grpc_target: str) -> None:  # noqa: F811
    """As in process: editing the config after the call, or the answer, edits neither."""
    dump = {"enable_dump": True, "dump_path": "/job/dump", "dump_step": "0|5"}
    with ResolverClient(grpc_target) as client:
        answer = client.resolve("atlas-a2", {"dump_config": dump})
    assert answer.options["dump_config"] == dump
    assert answer.options["dump_config"] is not dump
    dump["dump_path"] = "/elsewhere"
    assert answer.options["dump_config"]["dump_path"] == "/job/dump"


NO_SERVER = "127.0.0.1:9"  # discard: nothing listens; a request refused here never dials


def test_a_diffs_product_names_are_checked_before_sending_as_in_process() -> None:
    """A name that is not a str is the TypeError a diff in process raises (protobuf's own was
    'bad argument type for built-in operation'); text that is not Unicode is refused unsent,
    naming its index."""
    request = ResolveRequest("atlas-a2")

    async def in_async(names: list[Any]) -> None:
        async with AsyncResolverClient(NO_SERVER, timeout=5) as client:
            await client.diff(request, names)

    with ResolverClient(NO_SERVER, timeout=5) as client:
        for call in (lambda n: client.diff(request, n), lambda n: asyncio.run(in_async(n))):
            with pytest.raises(TypeError, match="a diff's product names are str, not int"):
                call(["atlas-a2", 1])
            with pytest.raises(ResolverCallError, match=r"products\[1\] .* not Unicode") as bad:
                call(["atlas-a2", "x\udcff"])
            assert bad.value.sent is False
            # The core's checks in its order: its limits come before a later name's type, and
            # are refused as a server refuses them (the same reason and words), unsent.
            many: list[Any] = [f"p{i}" for i in range(20)]
            for names, reason in (([1], "TOO_FEW_PRODUCTS"), ([*many, 1], "TOO_MANY_PRODUCTS")):
                with pytest.raises(ResolveError) as limited:
                    call(names)
                violation = limited.value.violations[0]
                assert (violation.field, violation.reason) == ("products", reason)
                assert limited.value.resolution is None
                assert pickle.loads(pickle.dumps(limited.value)).sent is False


@pytest.mark.parametrize("validate_only", [False, True])
def test_a_request_over_the_message_size_is_refused_before_sending_naming_its_largest_part(
    validate_only: bool,
) -> None:
    """gRPC's own refusal ("Sent message larger than max") names no field: a launcher whose
    config holds a runaway value learns which option to shorten, and no call is made (with
    validate_only too: the size is the transport's limit, not a report)."""
    config = {"hccl_timeout": 600, "op_compiler_cache_dir": "/c/" + "x" * 5_000}
    with (
        ResolverClient(NO_SERVER, max_message_bytes=4096, timeout=30) as client,
        pytest.raises(ResolverCallError) as refused,
    ):
        client.resolve("atlas-a2", config, validate_only=validate_only)
    assert refused.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    message = str(refused.value)
    assert "max_message_bytes" in message and "4,096" in message
    assert "config.op_compiler_cache_dir" in message and "not sent" in message


def test_a_request_of_exactly_the_message_size_is_sent_and_one_byte_more_is_not() -> None:
    """The limit is a size a request may have, as gRPC's own send limit is."""
    limit = 4096
    workdir = "/" + "w" * (limit - 40)
    while request_to_proto(ResolveRequest("atlas-a2", workdir=workdir)).ByteSize() < limit:
        workdir += "w"
    exact = ResolveRequest("atlas-a2", workdir=workdir)
    assert request_to_proto(exact).ByteSize() == limit
    over = ResolveRequest("atlas-a2", workdir=workdir + "w")
    with (
        FakeResolver(resolve=_unavailable(0)) as server,
        ResolverClient(server.target, max_message_bytes=limit, timeout=30) as client,
    ):
        assert client.resolve_request(exact).product == "atlas-a2"
        with pytest.raises(ResolverCallError) as refused:
            client.resolve_request(over)
    assert refused.value.sent is False and "4,097 bytes" in str(refused.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"env": {"ASCEND_WORK_PATH": "/" + "x" * 10_000}}, "env.ASCEND_WORK_PATH"),
        ({"workdir": "/" + "w" * 10_000}, "workdir"),
        ({"config": {"debug_dir": "/" + "é" * 3_000}}, "config.debug_dir, about 6,"),
        (  # many keys, none large: the config as a whole (its keys were not counted)
            {"config": {f"bogus_{i}_" + "z" * 200: 1 for i in range(40)}},
            "config, about 8,",
        ),
        ({"attachments": {f"f{i}": "x" * 300 for i in range(20)}}, "attachments, about 6,"),
    ],
)
def test_an_oversize_request_names_its_largest_part_wherever_it_is(
    fields: dict[str, Any], named: str
) -> None:
    """Not only the config: the env, the workdir; sizes in bytes as sent (é is two)."""
    request = ResolveRequest(product="atlas-a2", **{"config": {"hccl_timeout": 600}, **fields})
    client = ResolverClient(NO_SERVER, max_message_bytes=4096, timeout=30)
    with client, pytest.raises(ResolverCallError) as refused:
        client.resolve_request(request)
    assert f"its largest part is {named}" in str(refused.value)


def test_a_diff_naming_products_past_the_message_size_says_so() -> None:
    client = ResolverClient(NO_SERVER, max_message_bytes=4096, timeout=30)
    with client, pytest.raises(ResolverCallError) as refused:
        client.diff(ResolveRequest(product="atlas-a2"), ["atlas-a2"] * 1000)
    assert "its largest part is products" in str(refused.value)
    config = {f"bogus_{i}_" + "z" * 200: 1 for i in range(400)}
    client = ResolverClient(NO_SERVER, max_message_bytes=4096, timeout=30)
    with client, pytest.raises(ResolverCallError) as refused:
        client.diff(ResolveRequest(product="", config=config), ["atlas-a2", "atlas-a3"])
    assert "its largest part is config, about 8" in str(refused.value)


def test_no_message_limit_is_taken_as_grpc_takes_it() -> None:
    """-1 is gRPC's own "no limit": a client built with it before these checks still is."""
    options = dict(channel_options(-1))
    assert options["grpc.max_send_message_length"] == -1
    assert options["grpc.per_rpc_retry_buffer_size"] > 0
    ResolverClient(NO_SERVER, max_message_bytes=-1).close()


def test_an_oversize_batch_names_its_largest_item() -> None:
    small = ResolveRequest(product="atlas-a2", config={"hccl_timeout": 600})
    large = ResolveRequest(product="atlas-a2", config={"debug_dir": "/d/" + "y" * 5_000})
    client = ResolverClient(NO_SERVER, max_message_bytes=4096, timeout=30)
    with client, pytest.raises(ResolverCallError) as refused:
        client.resolve_batch([small, large, small])
    assert refused.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "requests[1]" in str(refused.value)


async def test_the_async_client_refuses_an_oversize_request_before_sending() -> None:
    async with AsyncResolverClient(NO_SERVER, max_message_bytes=4096, timeout=30) as client:
        with pytest.raises(ResolverCallError) as refused:
            await client.resolve("atlas-a2", {"debug_dir": "/d/" + "z" * 5_000})
    assert refused.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "config.debug_dir" in str(refused.value)


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        ({"max_message_bytes": "4MB"}, TypeError, "max_message_bytes must be an int"),
        ({"max_message_bytes": True}, TypeError, "max_message_bytes must be an int"),
        ({"max_message_bytes": 10}, ValueError, "max_message_bytes must be from 1,024"),
        ({"max_message_bytes": 2**31}, ValueError, "max_message_bytes must be from 1,024"),
        ({"wait_for_ready": "no"}, TypeError, "wait_for_ready must be a bool"),
        ({"wait_for_ready": 1}, TypeError, "wait_for_ready must be a bool"),
    ],
)
def test_client_settings_of_the_wrong_type_are_refused_at_construction(
    arguments: dict[str, Any], error: type[Exception], words: str
) -> None:
    """A string size was ignored by gRPC, and "no" was taken for true: both silently."""
    for make in (ResolverClient, AsyncResolverClient):
        with pytest.raises(error, match=words):
            make(NO_SERVER, **arguments)


async def test_describe_catalog_names_a_product_that_is_not_text() -> None:
    with ResolverClient(NO_SERVER) as client, pytest.raises(TypeError, match="product must be"):
        client.describe_catalog(5)  # type: ignore[arg-type]
    async with AsyncResolverClient(NO_SERVER) as aclient:
        with pytest.raises(TypeError, match="product must be a str"):
            await aclient.describe_catalog(5)  # type: ignore[arg-type]


BUSY_ITEM = status_pb2.Status(
    code=grpc.StatusCode.UNAVAILABLE.value[0],
    message="this server holds 64 requests over 64 KiB already (resolved one at a time); "
    "retry shortly",
)


def _busy_batch(product: str, times: int, then: grpc.StatusCode | None = None) -> Handler:
    """ResolveBatch as a busy server answers it: the items for `product` (or for each of its
    comma-separated products) UNAVAILABLE in the
    first `times` calls (the server held too many large requests), the others resolved; after
    that, `then` aborts the whole call, else every item is resolved."""
    calls = [0]

    def handler(request: pb.ResolveBatchRequest, context: grpc.ServicerContext) -> Any:
        calls[0] += 1
        if calls[0] > times and then is not None:
            context.abort(then, "the server failed")
        results = []
        for item in request.requests:
            if item.product in product.split(",") and calls[0] <= times:
                results.append(pb.ResolveBatchResult(status=BUSY_ITEM))
            else:
                answer = resolution_to_proto(resolve(ResolveRequest(product=item.product)))
                results.append(pb.ResolveBatchResult(response=answer))
        return pb.ResolveBatchResponse(results=results)

    return handler


THREE = [ResolveRequest("atlas-a2"), ResolveRequest("atlas-a3"), ResolveRequest("atlas-350")]


def _batch_through(
    handler: Handler, timeout: float | None = None
) -> tuple[list[Resolution | client_module.ResolveFailure], list[list[str]]]:
    """THREE sent as one batch by the blocking client to a fake server answering with
    `handler`: the answers, and the products of each batch the server was sent."""
    with FakeResolver(resolve_batch=handler) as server, ResolverClient(server.target) as client:
        return client.resolve_batch(THREE, timeout=timeout), server.batches


def test_batch_items_the_server_was_too_busy_for_are_sent_again_alone() -> None:
    """A busy item is UNAVAILABLE inside an OK reply, which gRPC's retry policy never sees:
    the client sends it again, and only it, as gRPC would a call, and puts its answer in
    its place."""
    answers, batches = _batch_through(_busy_batch("atlas-a3", 2))
    assert [type(a) for a in answers] == [Resolution] * 3
    assert [a.product for a in answers if isinstance(a, Resolution)] == [
        "atlas-a2",
        "atlas-a3",
        "atlas-350",
    ]
    assert batches == [["atlas-a2", "atlas-a3", "atlas-350"], ["atlas-a3"], ["atlas-a3"]]


def test_busy_batch_items_are_sent_again_each_alone() -> None:
    """Each in a batch of its own: an answer that names a place in its batch (left out at the
    reply's size limit) then names an item the caller can send alone, not the place it had in
    a batch of busy items the caller never sent."""
    answers, batches = _batch_through(_busy_batch("atlas-a3,atlas-350", 1))
    assert [type(a) for a in answers] == [Resolution] * 3
    assert batches == [["atlas-a2", "atlas-a3", "atlas-350"], ["atlas-a3"], ["atlas-350"]]


async def test_the_async_client_sends_busy_batch_items_again_alone() -> None:
    with FakeResolver(resolve_batch=_busy_batch("atlas-a3", 1)) as server:
        async with AsyncResolverClient(server.target) as client:
            answers = await client.resolve_batch(THREE)
    assert [type(a) for a in answers] == [Resolution] * 3
    assert server.batches == [["atlas-a2", "atlas-a3", "atlas-350"], ["atlas-a3"]]


def test_an_item_busy_at_every_attempt_is_its_busy_failure_at_its_place() -> None:
    """Five attempts in all, as for a call; then the item's last answer, naming its place in
    the batch the caller sent (not in the batch of one it was last sent in)."""
    answers, batches = _batch_through(_busy_batch("atlas-a3", 99))
    assert len(batches) == client_module.MAX_ATTEMPTS
    failure = answers[1]
    assert isinstance(failure, client_module.ResolveFailure)
    assert (failure.index, failure.code) == (1, grpc.StatusCode.UNAVAILABLE)
    assert "retry shortly" in failure.message
    assert isinstance(answers[0], Resolution) and isinstance(answers[2], Resolution)


def test_busy_items_are_sent_again_only_within_the_calls_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The resends share the call's deadline. Each pause at its longest (0.1, 0.2, 0.4 then
    0.8 s: 1.5 s for the four resends), a call of 0.6 s sends the item again twice and returns
    the busy answer before its deadline, not a DEADLINE_EXCEEDED for a batch that was
    answered, nor after sleeping past it."""
    monkeypatch.setattr("npu_resolver_client._client.random.uniform", lambda low, high: high)
    began = time.monotonic()
    answers, batches = _batch_through(_busy_batch("atlas-a3", 99), timeout=0.6)
    took = time.monotonic() - began
    assert isinstance(answers[1], client_module.ResolveFailure)
    assert answers[1].code is grpc.StatusCode.UNAVAILABLE
    assert 2 <= len(batches) <= 3, batches
    assert took < 1.0, took


@pytest.mark.parametrize(
    "then", [grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE], ids=["internal", "down"]
)
def test_a_resend_that_fails_leaves_the_answers_the_batch_had(then: grpc.StatusCode) -> None:
    """The batch was answered: a resend of its busy items that fails (the server gone, an
    error) is no error of the call; those items keep their busy answers."""
    answers, batches = _batch_through(_busy_batch("atlas-a3", 1, then))
    assert isinstance(answers[0], Resolution) and isinstance(answers[2], Resolution)
    failure = answers[1]
    assert isinstance(failure, client_module.ResolveFailure)
    assert failure.code is grpc.StatusCode.UNAVAILABLE
    assert batches[1] == ["atlas-a3"]


def _newer_answer(change: str) -> Handler:
    """Resolve answered by a server newer than this client: one value of its answer is one
    this client does not know."""

    def handler(request: pb.ResolveRequest, context: grpc.ServicerContext) -> Any:
        answer = resolution_to_proto(
            resolve(ResolveRequest("atlas-training", {"hccl_timeout": 600}))
        )
        if change == "code":
            answer.diagnostics[0].code = "SOME_NEW_CODE"
        elif change == "severity":
            answer.diagnostics[0].severity = 9  # type: ignore[assignment]
        else:
            answer.provenance["hccl_timeout"].source = 9  # type: ignore[assignment]
        return answer

    return handler


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("code", "the diagnostic code 'SOME_NEW_CODE'"),
        ("severity", "the severity 9"),
        ("source", "the source 9"),
    ],
)
def test_an_answer_holding_a_newer_servers_value_is_a_client_error_saying_so(
    change: str, said: str
) -> None:
    """A server upgraded first may answer with a diagnostic code, a severity or a source this
    client does not know: the call fails as a client error naming the value and the cause (it
    escaped as a bare ValueError or KeyError, past an `except ResolverClientError`)."""
    with (
        FakeResolver(resolve=_newer_answer(change)) as server,
        ResolverClient(server.target) as client,
        pytest.raises(ResolverCallError) as info,
    ):
        client.resolve("atlas-training", {"hccl_timeout": 600})
    assert info.value.code is grpc.StatusCode.INTERNAL
    assert f"the server's answer holds {said}, which this client does not know" in str(info.value)
    assert "upgrade npu-resolver here" in str(info.value)


def test_a_product_of_a_newer_family_is_a_client_error_saying_so() -> None:
    def products(request: Any, context: grpc.ServicerContext) -> Any:
        return pb.ListProductsResponse(
            products=[pb.Product(id="atlas-900", name="Atlas 900", family="quantum")]
        )

    with (
        FakeResolver(list_products=products) as server,
        ResolverClient(server.target) as client,
        pytest.raises(ResolverCallError, match="the product family 'quantum', which this client"),
    ):
        client.list_products()


@pytest.mark.parametrize("kind", [ResolverClient, AsyncResolverClient])
@pytest.mark.parametrize("how", [pickle.dumps, copy.copy, copy.deepcopy])
def test_a_client_is_not_pickled_or_copied_and_says_what_to_do(
    kind: type[Any], how: Callable[[Any], Any]
) -> None:
    """A copy would share the channel (closed with either: the other's next call raised a bare
    ValueError), and no channel crosses processes: a TypeError naming the client says so."""
    client = kind("127.0.0.1:9")
    with pytest.raises(TypeError, match=f"this {kind.__name__} holds a gRPC channel and cannot be"):
        how(client)
    if isinstance(client, ResolverClient):
        client.close()


def _newer_report(resolution: Resolution) -> pb.ResolveResponse:
    """The report of `resolution` as a newer server writes it: its first diagnostic's code one
    this client does not know."""
    report = resolution_to_proto(resolution)
    report.diagnostics[0].code = "SOME_NEW_CODE"
    return report


def test_a_failure_whose_packed_report_holds_a_newer_value_keeps_its_violations() -> None:
    """The request has errors and the server said so: its report, which this client cannot
    read, is passed over, and the failure is still a ResolveError naming each error."""
    resolution = resolve(TWO_ERRORS)

    def handler(request: pb.ResolveRequest, context: grpc.ServicerContext) -> Any:
        _abort_with(context, [_bad_request(resolution), _newer_report(resolution)], "errors")

    with (
        FakeResolver(resolve=handler) as server,
        ResolverClient(server.target) as client,
        pytest.raises(ResolveError) as info,
    ):
        client.resolve_request(TWO_ERRORS)
    assert info.value.resolution is None
    assert [v.reason for v in info.value.violations] == [d.code.value for d in resolution.errors]


def test_a_report_asked_again_that_holds_a_newer_value_leaves_the_first_error() -> None:
    """A report cut for room is asked for again; one this client cannot read does not turn
    the request's errors into a client error: the ResolveError and its violations stand."""
    resolution = resolve(TWO_ERRORS)

    def handler(request: pb.ResolveRequest, context: grpc.ServicerContext) -> Any:
        if request.validate_only:
            return _newer_report(resolution)
        cut = error_details_pb2.ErrorInfo(reason=REPORT_CUT, domain="npu.resolver.v1")
        _abort_with(context, [_bad_request(resolution), cut], "the report is too large")
        return None

    with (
        FakeResolver(resolve=handler) as server,
        ResolverClient(server.target) as client,
        pytest.raises(ResolveError) as info,
    ):
        client.resolve_request(TWO_ERRORS)
    assert len(server.requests) == 2  # asked again
    assert info.value.resolution is None and len(info.value.violations) == 2


def test_a_busy_items_answer_holding_a_newer_value_fails_the_call_as_the_first_reply_would() -> (
    None
):
    """Not the item's busy answer kept, as if the server had not answered it."""
    calls = [0]

    def handler(request: pb.ResolveBatchRequest, context: grpc.ServicerContext) -> Any:
        calls[0] += 1
        results = []
        for item in request.requests:
            if item.product == "atlas-a3" and calls[0] == 1:
                results.append(pb.ResolveBatchResult(status=BUSY_ITEM))
                continue
            answer = resolution_to_proto(resolve(ResolveRequest("atlas-training", {"x": 1})))
            if calls[0] > 1:
                answer.diagnostics[0].code = "SOME_NEW_CODE"
            results.append(pb.ResolveBatchResult(response=answer))
        return pb.ResolveBatchResponse(results=results)

    with pytest.raises(ResolverCallError, match="diagnostic code 'SOME_NEW_CODE'"):
        _batch_through(handler)


async def test_the_async_client_sends_each_busy_item_again_alone() -> None:
    with FakeResolver(resolve_batch=_busy_batch("atlas-a3,atlas-350", 1)) as server:
        async with AsyncResolverClient(server.target) as client:
            answers = await client.resolve_batch(THREE)
    assert [type(a) for a in answers] == [Resolution] * 3
    assert server.batches == [["atlas-a2", "atlas-a3", "atlas-350"], ["atlas-a3"], ["atlas-350"]]


def test_close_while_another_loop_opens_the_channel_leaves_none_open(
    grpc_target: str,  # noqa: F811
) -> None:
    """close() while another thread's first call opens the channel: either the call is
    refused as after close(), or close() closes the channel it opened; none is left open
    (close() saw no channel yet and returned, and the call then opened one for good)."""
    client = AsyncResolverClient(grpc_target)
    opened: list[grpc.aio.Channel] = []

    async def first_call() -> None:
        with contextlib.suppress(ResolverClientError):
            await client.list_products()
        if client._channel is not None:
            opened.append(client._channel)

    client._opening.acquire()  # the first call's opening, held at its start
    calling = threading.Thread(target=asyncio.run, args=(first_call(),))
    calling.start()
    time.sleep(0.1)  # the call waits to open the channel
    closing = threading.Thread(target=asyncio.run, args=(client.close(),))
    closing.start()
    time.sleep(0.1)
    client._opening.release()
    for thread in (calling, closing):
        thread.join(10)
    assert all(channel.get_state() is grpc.ChannelConnectivity.SHUTDOWN for channel in opened)


def test_closes_of_replaced_channels_are_not_kept_once_done(
    grpc_target: str,  # noqa: F811
) -> None:
    """A client used in one short-lived loop after another, each closed right after its call
    (its close-of-the-old-channel task done, its discard callback never run): the finished
    closes are dropped, not kept with their loops for the client's life."""
    client = AsyncResolverClient(grpc_target)

    async def opened() -> grpc.aio.Channel:
        return client.channel

    for _ in range(12):
        loop = asyncio.new_event_loop()  # as a test runner makes one for each test
        try:
            loop.run_until_complete(opened())
        finally:
            loop.close()
    assert len(client._old) <= 1
    asyncio.run(client.close())


def test_a_deadline_that_passes_names_the_server_and_the_time() -> None:
    """gRPC says only 'Deadline Exceeded': a tool calling several resolvers could not tell
    which one kept it waiting, nor for how long."""
    import socket

    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        target = f"127.0.0.1:{silent.getsockname()[1]}"
        with (
            ResolverClient(target, timeout=0.5) as client,
            pytest.raises(ResolverUnavailable) as info,
        ):
            client.resolve("atlas-a2")

        async def awaited() -> ResolverUnavailable:
            async with AsyncResolverClient(target) as client:
                with pytest.raises(ResolverUnavailable) as raised:
                    await client.resolve("atlas-a2", timeout=0.25)
            return raised.value

        late = asyncio.run(awaited())
    assert info.value.code is grpc.StatusCode.DEADLINE_EXCEEDED
    assert info.value.details.startswith(f"no answer from {target} within 0.5 s")
    assert late.details.startswith(f"no answer from {target} within 0.25 s")


def test_the_clients_public_methods_say_what_they_return_and_raise() -> None:
    """help(client.resolve_batch) is where a user learns that item failures are returned,
    not raised: every public method of both clients has its docstring."""
    import inspect

    for cls in (ResolverClient, AsyncResolverClient):
        for name, member in inspect.getmembers(cls):
            if name.startswith("_"):
                continue
            assert inspect.getdoc(member), f"{cls.__name__}.{name} has no docstring"
    assert "Raises" in (inspect.getdoc(ResolverClient.resolve) or "")


def test_a_client_subclass_is_itself_inside_with() -> None:
    """__enter__ returns Self: a launcher's own client class keeps its methods in `with` (a
    type checker saw a plain ResolverClient there)."""

    class JobClient(ResolverClient):
        def job_target(self) -> str:
            return f"job@{self.target}"

    class AsyncJobClient(AsyncResolverClient):
        def job_target(self) -> str:
            return f"job@{self.target}"

    async def entered() -> str:
        async with AsyncJobClient("127.0.0.1:1") as client:
            return client.job_target()

    with JobClient("127.0.0.1:1") as client:
        assert client.job_target() == "job@127.0.0.1:1"
    assert asyncio.run(entered()) == "job@127.0.0.1:1"


def test_a_batch_failure_prints_on_one_line_and_names_fields_as_errors_do() -> None:
    """A failed batch item's repr leaves its report (kilobytes) out; `details` and
    `policy_version` are there under the names errors and answers use."""
    from npu_resolver_client import ReloadResult, ResolveFailure
    from npu_resolver_client._errors import FieldViolation

    report = resolve(TWO_ERRORS)
    failure = ResolveFailure(
        3,
        grpc.StatusCode.INVALID_ARGUMENT,
        "config.hccl_timeout: OUT_OF_RANGE: " + "x" * 1_000,
        report,
        (FieldViolation("config.hccl_timeout", "OUT_OF_RANGE", "out"),),
    )
    shown = repr(failure)
    assert len(shown) < 400 and "\n" not in shown, shown
    assert shown.startswith("ResolveFailure(index=3, code=INVALID_ARGUMENT, message='config.")
    assert "violations=['OUT_OF_RANGE']" in shown and "product='atlas-training'" in shown
    assert failure.details == failure.message == failure.error().details
    assert ReloadResult(True, "abc", "").policy_version == "abc"


def test_a_product_the_client_does_not_know_has_its_capabilities_unknown() -> None:
    """A server of another version may describe a product this package's table does not, or
    describe one differently: its capabilities are None (not known), never another row's."""
    from npu_resolver_client._convert import product_from_proto
    from npu_resolver_client.wire import pb

    a2 = next(p for p in npu_resolver.PRODUCTS if p.id == "atlas-a2")
    same = pb.Product(
        id=a2.id, name=a2.name, source_name=a2.source_name, family="new", aliases=a2.aliases
    )
    assert product_from_proto(same).aoe_tuning is True
    renamed = pb.Product(id=a2.id, name=a2.name, source_name=a2.source_name, family="new")
    other = pb.Product(id="atlas-950", name="Atlas 950", source_name="Atlas 950", family="new")
    for described in (renamed, other):
        product = product_from_proto(described)
        assert product.aoe_tuning is None and product.ub_fusion is None, product


def test_both_clients_and_the_cli_wait_10_seconds_by_default() -> None:
    """README: a default deadline of 10 s, retries included, for both clients and for the
    CLI's --server, which takes the client's."""
    from npu_resolver._cli._transport import Remote

    assert ResolverClient("127.0.0.1:1")._settings.timeout == 10.0
    assert AsyncResolverClient("127.0.0.1:1")._settings.timeout == 10.0
    assert Remote("127.0.0.1:1")._client._settings.timeout == 10.0
