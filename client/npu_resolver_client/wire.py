"""The wire form of npu.resolver.v1, for code that speaks the proto itself.

`pb` and `pb_grpc` are the generated messages and stubs; the functions turn them into the core's
records and back, exactly as the client and the server do, so that an answer read here equals
`npu_resolver.resolve()` in process:

    from npu_resolver_client.wire import request_to_proto, resolution_from_proto, resolver_stub

    stub = resolver_stub(channel)   # pb_grpc.ResolverStub, its requests written deterministically
    message = request_to_proto(npu_resolver.ResolveRequest(product="atlas-a2", validate_only=True))
    resolution = resolution_from_proto(stub.Resolve(message))
"""

from ._client import resolver_stub
from ._convert import (
    MAX_MESSAGE_CHARS,
    SEVERITY_TO_PB,
    SOURCE_TO_PB,
    LimitError,
    NotSendableError,
    NotTextError,
    catalog_from_proto,
    catalog_to_proto,
    config_from_wire,
    diff_from_proto,
    diff_to_proto,
    error_message,
    product_from_proto,
    product_to_proto,
    request_from_proto,
    request_to_proto,
    resolution_from_proto,
    resolution_to_proto,
    violation_field,
    wire_config,
)
from ._errors import REPORT_AGAIN_ADVICE, REPORT_AGAIN_METADATA_KEY, REPORT_CUT, TLS_HINTS
from ._proto.npu.resolver.v1 import resolver_pb2 as pb
from ._proto.npu.resolver.v1 import resolver_pb2_grpc as pb_grpc

__all__ = [
    "MAX_MESSAGE_CHARS",
    "REPORT_AGAIN_ADVICE",
    "REPORT_AGAIN_METADATA_KEY",
    "REPORT_CUT",
    "SEVERITY_TO_PB",
    "SOURCE_TO_PB",
    "TLS_HINTS",
    "LimitError",
    "NotSendableError",
    "NotTextError",
    "catalog_from_proto",
    "catalog_to_proto",
    "config_from_wire",
    "diff_from_proto",
    "diff_to_proto",
    "error_message",
    "pb",
    "pb_grpc",
    "product_from_proto",
    "product_to_proto",
    "request_from_proto",
    "request_to_proto",
    "resolution_from_proto",
    "resolution_to_proto",
    "resolver_stub",
    "violation_field",
    "wire_config",
]
