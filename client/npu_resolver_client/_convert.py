"""Protobuf messages to and from the core's types; shared by the client and the server.

Struct numbers travel as doubles: integral values are read back as ints so that an answer that
crossed the wire equals the in-process one. Decoding from the wire checks nesting depth and key
count (a request is untrusted input); NaN and infinities, which JSON cannot hold, are left for
the resolver to refuse on their option.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

import grpc
from google.protobuf import struct_pb2

from npu_resolver import (
    ENV_VARS,
    MAX_EXACT_INT,
    PATH_KEYS,
    PRODUCTS,
    Code,
    Diagnostic,
    DiffCell,
    DiffResult,
    DiffRow,
    Family,
    Product,
    Provenance,
    Resolution,
    ResolveRequest,
    Severity,
    Source,
    request_field,
)
from npu_resolver.text import (
    DuplicateKeyError,
    NumberTooLongError,
    config_refusal,
    config_shape,
    cut_deep,
    cut_text,
    detached,
    is_text,
    key_text,
    loads_json,
    not_json,
    printable,
    read_request,
    too_deep,
    too_wide,
)

from ._proto.npu.resolver.v1 import resolver_pb2 as pb

JSON = Any

SEVERITY_TO_PB: Final = {s: pb.Severity.Value(f"SEVERITY_{s.value}") for s in Severity}
SEVERITY_FROM_PB: Final = {v: k for k, v in SEVERITY_TO_PB.items()}
SOURCE_TO_PB: Final = {s: pb.Source.Value(f"SOURCE_{s.value}") for s in Source}
SOURCE_FROM_PB: Final = {v: k for k, v in SOURCE_TO_PB.items()}
_PATH_ORDER: Final = {name: i for i, name in enumerate(PATH_KEYS)}
_CODES: Final = {code.value: code for code in Code}
_FAMILIES: Final = {family.value: family for family in Family}
_V = TypeVar("_V")


class LimitError(ValueError):
    """A request is too deep, too wide or holds a value JSON cannot represent."""


class _Budget:
    __slots__ = ("keys", "max_depth", "max_keys")

    def __init__(self, max_depth: int, max_keys: int) -> None:
        self.max_depth = max_depth
        self.max_keys = max_keys
        self.keys = 0


# --------------------------------------------------------------------------- JSON values


def _number(value: float) -> JSON:
    """A Struct number (a double) as JSON reads it: whole numbers JSON carries exactly are ints."""
    if value.is_integer() and abs(value) <= MAX_EXACT_INT:
        return int(value)
    return value


def value_to_py(value: struct_pb2.Value) -> JSON:
    """A Value from a trusted peer (the server's answer) as plain Python."""
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        number = value.number_value
        return _number(number) if math.isfinite(number) else number
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":  # keys in order: a map on the wire keeps none (see as_carried)
        return {key: value_to_py(v) for key, v in sorted(value.struct_value.fields.items())}
    if kind == "list_value":
        return [value_to_py(v) for v in value.list_value.values]
    return None


def struct_to_py(struct: struct_pb2.Struct) -> dict[str, JSON]:
    return {key: value_to_py(v) for key, v in struct.fields.items()}


def _checked_value(value: struct_pb2.Value, where: str, depth: int, budget: _Budget) -> JSON:
    kind = value.WhichOneof("kind")
    if kind == "number_value":
        number = value.number_value
        # NaN and infinities go to the resolver, which refuses them on their option as it
        # does in process.
        return _number(number) if math.isfinite(number) else number
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind is None or kind == "null_value":
        return None
    if depth >= budget.max_depth:
        raise LimitError(config_refusal(too_deep(budget.max_depth)))
    if kind == "struct_value":
        return _checked_struct(value.struct_value, where, depth + 1, budget)
    items = value.list_value.values
    budget.keys += len(items)
    if budget.keys > budget.max_keys:
        raise LimitError(config_refusal(too_wide(budget.max_keys)))
    return [_checked_value(v, f"{where}[{i}]", depth + 1, budget) for i, v in enumerate(items)]


def _checked_struct(
    struct: struct_pb2.Struct, where: str, depth: int, budget: _Budget
) -> dict[str, JSON]:
    fields = struct.fields
    budget.keys += len(fields)
    if budget.keys > budget.max_keys:
        raise LimitError(config_refusal(too_wide(budget.max_keys)))
    return {
        key: _checked_value(v, f"{where}.{key[:64]}", depth, budget) for key, v in fields.items()
    }


def checked_struct_to_py(
    struct: struct_pb2.Struct, where: str, *, max_depth: int, max_keys: int
) -> dict[str, JSON]:
    """An untrusted Struct as plain Python, within the depth and key limits (LimitError)."""
    return _checked_struct(struct, where, 1, _Budget(max_depth, max_keys))


def py_to_value(data: JSON) -> struct_pb2.Value:
    value = struct_pb2.Value()
    _set_value(value, data)
    return value


def _set_value(value: struct_pb2.Value, data: JSON) -> None:
    if data is None:
        value.null_value = struct_pb2.NULL_VALUE
    elif isinstance(data, bool):
        value.bool_value = data
    elif isinstance(data, int | float):
        value.number_value = data
    elif isinstance(data, str):
        value.string_value = data
    elif isinstance(data, Mapping):  # SetInParent: an empty one is a value too, not unset
        value.struct_value.SetInParent()
        value.struct_value.update(data)
    elif isinstance(data, Sequence):
        value.list_value.SetInParent()
        value.list_value.extend(data)
    else:
        raise TypeError(f"{type(data).__name__} is not a JSON value")


def _fill_struct(struct: struct_pb2.Struct, data: Mapping[str, JSON]) -> None:
    if data:
        struct.update(data)


# --------------------------------------------------------------------------- requests


def config_to_json(config: Mapping[str, JSON]) -> str:
    """A config as the JSON text of `config_json` ("" for an empty one). NaN and infinities,
    which JSON has no numbers for, are written as Python's json writes them (NaN, Infinity),
    so that the server's resolver refuses them on their option as the one in process does."""
    if not config:
        return ""
    data = wire_config(config)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    if not is_text(text):  # a lone surrogate travels as its "\ud800" escape, for the server
        text = json.dumps(data, separators=(",", ":"))  # to refuse on its option
    return text


def wire_config(config: Mapping[str, JSON]) -> dict[str, JSON]:
    """The config as it can travel, read by a server as the resolver in process reads it.
    NotSendableError names an option holding what JSON cannot (a tuple, bytes, a set, any other
    object, a key that is not text): json would change it silently, or fail. A config nested
    deeper than any reader takes (or around a cycle) is cut there: refused as too deep all
    the same, where json's writer would fail."""
    data = dict(config)
    for name, value in data.items():
        if not isinstance(name, str):
            raise NotSendableError(
                f"config key {printable(key_text(name))} is not text; option names are strings"
            )
        problem = not_json(value)
        if problem is not None:
            raise NotSendableError(
                f"config.{printable(name)} holds {problem}, which JSON cannot carry; send JSON "
                "values only: objects, lists, strings, numbers, true, false, null"
            )
    shape = config_shape(data)
    if shape is not None and shape.startswith("nested"):
        data = cut_deep(data)
    return data


violation_field: Final = request_field
"""The google.rpc.BadRequest field that names a diagnostic: the server writes it, and the
client rebuilds it for a report it had to ask for again (npu_resolver.request_field)."""

MAX_MESSAGE_CHARS: Final = 500
"""The longest text a failed call's status message quotes: it travels in a trailer, with a
budget."""


def suggestion_unsaid(diagnostic: Diagnostic) -> bool:
    """Whether the diagnostic's message leaves its suggestion unsaid (an UNKNOWN_PRODUCT's
    does; an UNKNOWN_OPTION's asks "did you mean ...?")."""
    return f"did you mean {diagnostic.suggestion!r}".lower() not in diagnostic.message.lower()


def error_message(errors: Sequence[Diagnostic], first_field: str) -> str:
    """The status message of a Resolve that failed with `errors`: the first one, on its
    request field (`first_field`, see violation_field), with its suggestion, and how many more.
    The server writes it; the client writes it again for a report it had to ask for again, so
    that its error reads the same as when the report fit."""
    first = errors[0]
    said = f"{first_field}: {first.code.value}: {first.message}"
    if first.suggestion and suggestion_unsaid(first):  # for callers that read only the status
        said += f" (suggestion: {first.suggestion})"
    text = cut_text(said, MAX_MESSAGE_CHARS)
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return text


class NotSendableError(ValueError):
    """A request holds what the wire cannot carry: refused before any call, naming the field."""


class NotTextError(NotSendableError):
    """A string the request sends outside its config holds a lone UTF-16 surrogate: it is not
    Unicode text, so protobuf cannot carry it. (Inside the config it travels escaped, and the
    resolver refuses it on its option, as in process.)"""


def sent_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of a job's environment a request carries: those the resolver reads
    (ENV_VARS), in that order. No other variable changes an answer; a job's whole environment
    (`dict(os.environ)`) then costs no bytes on the wire, and two jobs that differ only in
    other variables send the same request, which a server's answer cache recognises."""
    return {name: env[name] for name in ENV_VARS if name in env}


def check_text(request: ResolveRequest) -> None:
    """NotTextError naming the first field sent that is not Unicode text."""
    for name, value in (
        ("product", request.product),
        ("profile", request.profile),
        ("workdir", request.workdir),
    ):
        if not is_text(value):
            raise NotTextError(f"{name} {printable(value)!r} holds a lone UTF-16 surrogate")
    for kind, entries in (("env", sent_env(request.env)), ("attachments", request.attachments)):
        for key, value in entries.items():
            if not (is_text(key) and is_text(value)):
                raise NotTextError(f"{kind}.{printable(key)} holds a lone UTF-16 surrogate")


def request_to_proto(request: ResolveRequest, *, as_struct: bool = False) -> pb.ResolveRequest:
    """The wire request. The config goes as JSON text (`config_json`), which keeps 600 and 600.0
    apart as the in-process resolver does; `as_struct` sends it as the Struct `config`. Of the
    env, only the variables the resolver reads (`sent_env`). NotTextError when a field sent
    outside the config is not Unicode text."""
    check_text(request)
    message = pb.ResolveRequest(
        product=request.product,
        env=sent_env(request.env),
        workdir=request.workdir,
        profile=request.profile,
        strict=request.strict,
        validate_only=request.validate_only,
        attachments=dict(request.attachments),
    )
    if as_struct:
        _fill_struct(message.config, wire_config(request.config))
    else:
        message.config_json = config_to_json(request.config)
    return message


def _string_map(entries: Mapping[str, str]) -> dict[str, str]:
    """A protobuf map<string, string> as a dict (cheaper than dict() on the map)."""
    return {key: entries[key] for key in entries} if entries else {}


def config_from_wire(
    struct: struct_pb2.Struct, text: str, where: str, *, max_depth: int, max_keys: int
) -> dict[str, JSON]:
    """The config of a wire request, from `config` or `config_json`, within the limits."""
    if not text:
        return checked_struct_to_py(struct, where, max_depth=max_depth, max_keys=max_keys)
    if struct.fields:
        raise LimitError(f"set {where} or {where}_json, not both")
    try:
        data = loads_json(text)
    except RecursionError:
        raise LimitError(config_refusal(too_deep(max_depth))) from None
    except DuplicateKeyError as exc:
        raise LimitError(f"{where}_json: {exc}; write each key once") from None
    except NumberTooLongError as exc:
        raise LimitError(f"{where}_json: {exc}") from None
    except ValueError as exc:
        if isinstance(exc, LimitError):
            raise
        raise LimitError(f"{where}_json is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise LimitError(f"{where}_json must be a JSON object of option name to value")
    shape = config_shape(data, max_depth=max_depth, max_items=max_keys)  # the core's own walk
    if shape is not None:
        raise LimitError(config_refusal(shape))
    return data


def request_from_proto(
    message: pb.ResolveRequest, *, max_depth: int, max_keys: int
) -> ResolveRequest:
    """The core request for a wire request; LimitError when its config is out of bounds."""
    config = config_from_wire(
        message.config, message.config_json, "config", max_depth=max_depth, max_keys=max_keys
    )
    return read_request(
        message.product,
        config,
        _string_map(message.env),
        message.workdir,
        message.profile,
        message.strict,
        message.validate_only,
        _string_map(message.attachments),
    )


# --------------------------------------------------------------------------- results


def diagnostic_to_proto(diagnostic: Diagnostic) -> pb.Diagnostic:
    return pb.Diagnostic(
        severity=SEVERITY_TO_PB[diagnostic.severity],
        code=diagnostic.code.value,
        option=diagnostic.option,
        rule=diagnostic.rule,
        message=diagnostic.message,
        suggestion=diagnostic.suggestion,
    )


def _provenance_to_proto(provenance: Provenance) -> pb.Provenance:
    message = pb.Provenance(
        source=SOURCE_TO_PB[provenance.source],
        rules=provenance.rules,
        env_var=provenance.env_var,
        detail=provenance.detail,
    )
    if provenance.has_requested:
        _set_value(message.requested, provenance.requested)
    return message


def resolution_to_proto(resolution: Resolution) -> pb.ResolveResponse:
    message = pb.ResolveResponse(
        ok=resolution.ok,
        product=resolution.product,
        provenance={k: _provenance_to_proto(v) for k, v in resolution.provenance.items()},
        diagnostics=[diagnostic_to_proto(d) for d in resolution.diagnostics],
        paths=dict(resolution.paths),
        catalog_version=resolution.catalog_version,
        policy_version=resolution.policy_version,
        fingerprint=resolution.fingerprint,
    )
    message.options.SetInParent()  # present even when empty: `"options": {}` in JSON
    _fill_struct(message.options, resolution.options)
    return message


def _known(table: Mapping[Any, _V], value: Any, what: str) -> _V:
    """`table[value]`; a value this client does not know (a newer server's) is a client error
    saying so, not a KeyError or ValueError from inside the conversion."""
    known = table.get(value)
    if known is None:
        from ._errors import ResolverCallError

        raise ResolverCallError(
            grpc.StatusCode.INTERNAL,
            f"the server's answer holds {what} {value!r}, which this client does not know: the "
            "server is newer than this client; upgrade npu-resolver here",
        )
    return known


def _diagnostic_from_proto(message: pb.Diagnostic) -> Diagnostic:
    return Diagnostic(
        severity=_known(SEVERITY_FROM_PB, message.severity, "the severity"),
        code=_known(_CODES, message.code, "the diagnostic code"),
        option=message.option,
        rule=message.rule,
        message=message.message,
        suggestion=message.suggestion,
    )


def _provenance_from_proto(message: pb.Provenance) -> Provenance:
    source = _known(SOURCE_FROM_PB, message.source, "the source")
    rules = tuple(message.rules)
    if message.HasField("requested"):
        return Provenance(
            source, rules, value_to_py(message.requested), message.env_var, message.detail
        )
    return Provenance(source, rules, env_var=message.env_var, detail=message.detail)


def _catalog_order() -> dict[str, int]:
    from npu_resolver import CATALOG

    return {option.name: i for i, option in enumerate(CATALOG.options)}


_ORDER: dict[str, int] = {}


def _ordered(keys: Sequence[str] | Any) -> list[str]:
    """Option names in catalog order (the order the core produces them in)."""
    if not _ORDER:
        _ORDER.update(_catalog_order())
    last = len(_ORDER)
    return sorted(keys, key=lambda k: (_ORDER.get(k, last), k))


def resolution_from_proto(message: pb.ResolveResponse) -> Resolution:
    options = struct_to_py(message.options)
    provenance = message.provenance
    return Resolution(
        ok=message.ok,
        product=message.product,
        options={k: options[k] for k in _ordered(options)},
        provenance={k: _provenance_from_proto(provenance[k]) for k in _ordered(provenance)},
        diagnostics=tuple(_diagnostic_from_proto(d) for d in message.diagnostics),
        paths={
            k: message.paths[k]
            for k in sorted(message.paths, key=lambda k: (_PATH_ORDER.get(k, 99), k))
        },
        catalog_version=message.catalog_version,
        policy_version=message.policy_version,
        fingerprint=message.fingerprint,
    )


def _same_json(a: JSON, b: JSON) -> bool:
    """Equal as JSON: numbers by value (600 == 600.0), bools never equal to numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


_CALLERS_VALUE: Final = frozenset({Source.USER, Source.POLICY_LOCKED, Source.DERIVED})
"""The sources whose `requested` is the caller's value when the config holds the option: a
lock or a rule (FORCED) replaced it."""


def restore_callers_values(resolution: Resolution, request: ResolveRequest) -> Resolution:
    """Put back the caller's own JSON where the wire blurred it.

    A Struct holds numbers as doubles and objects without key order, so 600.0 comes back as
    600. Where the answer holds the caller's value itself (provenance `requested` of a USER,
    POLICY_LOCKED or DERIVED value; an object or list option passed through as given), a copy
    of the caller's JSON is put back, so the answer equals the in-process one exactly. Other
    objects (a policy's) come with their keys sorted, as the policy holds them (as_carried).
    """
    config = request.config
    if not config:
        return resolution
    options = dict(resolution.options)
    provenance = dict(resolution.provenance)
    changed = False
    for name, entry in resolution.provenance.items():
        if name not in config:
            continue
        given = config[name]
        if (
            entry.source in _CALLERS_VALUE
            and entry.has_requested
            and entry.requested is not given
            and _same_json(entry.requested, given)
        ):
            provenance[name] = Provenance(
                entry.source, entry.rules, detached(given), entry.env_var, entry.detail
            )
            changed = True
        value = options.get(name)
        if (
            entry.source is Source.USER
            and isinstance(given, dict | list)
            and _same_json(value, given)
        ):
            options[name] = detached(given)
            changed = True
    if not changed:
        return resolution
    return Resolution(
        ok=resolution.ok,
        product=resolution.product,
        options=options,
        provenance=provenance,
        diagnostics=resolution.diagnostics,
        paths=resolution.paths,
        catalog_version=resolution.catalog_version,
        policy_version=resolution.policy_version,
        fingerprint=resolution.fingerprint,
    )


# --------------------------------------------------------------------------- diff


def diff_to_proto(result: DiffResult) -> pb.DiffResponse:
    """A DiffResult as the DiffResponse the server sends."""
    response = pb.DiffResponse(
        products=list(result.products),
        differing=[row.option for row in result.differing],
        results={pid: resolution_to_proto(r) for pid, r in result.results.items()},
    )
    for row in result.rows:
        out = response.rows.add(option=row.option, same=row.same)
        for pid, cell in row.cells.items():
            if cell is not None:
                target = out.cells[pid]
                target.source = SOURCE_TO_PB[cell.source]
                target.value.CopyFrom(py_to_value(cell.value))
    return response


def diff_from_proto(response: pb.DiffResponse, request: ResolveRequest) -> DiffResult:
    """A DiffResponse as the DiffResult the core gives, the caller's values kept as sent."""
    products = tuple(response.products)
    results = {
        pid: restore_callers_values(resolution_from_proto(response.results[pid]), request)
        for pid in products
    }
    rows = []
    for row in response.rows:
        cells: dict[str, DiffCell | None] = {}
        for pid in products:
            if pid in row.cells:
                cell = row.cells[pid]
                value = results[pid].options.get(row.option, value_to_py(cell.value))
                cells[pid] = DiffCell(value, _known(SOURCE_FROM_PB, cell.source, "the source"))
            else:
                cells[pid] = None
        rows.append(DiffRow(row.option, cells, row.same))
    return DiffResult(products, results, tuple(rows))


# --------------------------------------------------------------------------- catalog


def product_to_proto(product: Product) -> pb.Product:
    return pb.Product(
        id=product.id,
        name=product.name,
        source_name=product.source_name,
        family=product.family.value,
        aliases=product.aliases,
    )


_OWN_PRODUCTS: Final = {product.id: product for product in PRODUCTS}


def product_from_proto(message: pb.Product) -> Product:
    """The product a server describes. The wire does not carry what a product supports: a
    product this package's own table describes alike (id, names, family, aliases) gets its
    capabilities from that row, as this package's version of the source gives them, and one
    it does not know (a server of another version) leaves them None, not known."""
    product = Product(
        id=message.id,
        name=message.name,
        source_name=message.source_name,
        family=_known(_FAMILIES, message.family, "the product family"),
        aliases=tuple(message.aliases),
    )
    row = _OWN_PRODUCTS.get(product.id)
    return row if row == product else product  # equality leaves the capabilities out


def _support_to_proto(data: Mapping[str, JSON]) -> pb.ProductSupport:
    message = pb.ProductSupport(
        supported=bool(data["supported"]),
        modes=list(data["modes"]),
        allowed_values=[py_to_value(v) for v in data["allowed_values"]],
        minimum=py_to_value(data["minimum"]),
        maximum=py_to_value(data["maximum"]),
        minimum_exclusive=bool(data["minimum_exclusive"]),
        unsupported_values={str(k): str(v) for k, v in data["unsupported_values"].items()},
        mode_restrictions=[pb.ModeRestriction(**r) for r in data["mode_restrictions"]],
    )
    for mode, default in data["defaults"].items():
        _set_value(message.defaults[mode], default)
    for mode, default in data["effective_defaults"].items():
        _set_value(message.effective_defaults[mode], default)
    return message


def catalog_to_proto(data: Mapping[str, JSON]) -> pb.DescribeCatalogResponse:
    """`npu_resolver.describe_catalog()`'s dict as a message (its JSON mapping is that dict)."""
    return pb.DescribeCatalogResponse(
        catalog_version=data["catalog_version"],
        products=[pb.Product(**p) for p in data["products"]],
        options=[
            pb.OptionDescription(
                name=o["name"],
                section=o["section"],
                type=o["type"],
                summary=o["summary"],
                rules=o["rules"],
                env_var=o["env_var"] or "",
                deprecated=bool(o["deprecated"]),
                experimental=bool(o["experimental"]),
                unsupported_version=bool(o["unsupported_version"]),
                attachment=bool(o["attachment"]),
                aliases={str(k): str(v) for k, v in o["aliases"].items()},
                products={pid: _support_to_proto(s) for pid, s in o["products"].items()},
            )
            for o in data["options"]
        ],
    )


def _support_from_proto(message: pb.ProductSupport) -> dict[str, JSON]:
    return {
        "supported": message.supported,
        "modes": list(message.modes),
        "allowed_values": [value_to_py(v) for v in message.allowed_values],
        "minimum": value_to_py(message.minimum),
        "maximum": value_to_py(message.maximum),
        "minimum_exclusive": message.minimum_exclusive,
        "defaults": {m: value_to_py(message.defaults[m]) for m in message.defaults},
        "unsupported_values": dict(message.unsupported_values),
        "effective_defaults": {
            m: value_to_py(message.effective_defaults[m]) for m in message.effective_defaults
        },
        "mode_restrictions": [
            {"value": r.value, "mode": r.mode, "rule": r.rule} for r in message.mode_restrictions
        ],
    }


def catalog_from_proto(message: pb.DescribeCatalogResponse) -> dict[str, JSON]:
    """The message as the dict `npu_resolver.describe_catalog()` returns."""
    return {
        "catalog_version": message.catalog_version,
        "products": [
            {
                "id": p.id,
                "name": p.name,
                "source_name": p.source_name,
                "family": p.family,
                "aliases": list(p.aliases),
            }
            for p in message.products
        ],
        "options": [
            {
                "name": o.name,
                "section": o.section,
                "type": o.type,
                "summary": o.summary,
                "rules": list(o.rules),
                "env_var": o.env_var,
                "deprecated": o.deprecated,
                "experimental": o.experimental,
                "unsupported_version": o.unsupported_version,
                "attachment": o.attachment,
                "aliases": dict(o.aliases),
                "products": {pid: _support_from_proto(o.products[pid]) for pid in o.products},
            }
            for o in message.options
        ],
    }
