"""What the command reads: flags, files, standard input and named pipes, made into a request,
a policy and the credentials for a server. Every input is bounded in size, and every problem
with it is a UsageError (exit status 2) naming the flag or file."""

from __future__ import annotations

import argparse
import os
import select
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from .._catalog import CATALOG
from .._model import (
    JSON,
    DuplicateKeyError,
    ResolveRequest,
    closest,
    is_text,
    loads_json,
    printable,
)
from .._options import NAMED_ENV_VARS
from .._schema import OptType
from .._values import BOOL_TEXTS, show, too_deep_value
from ._streams import warn

if TYPE_CHECKING:
    from .._policy import Policy, PolicyError

MAX_INPUT_BYTES: Final = 4 * 1024 * 1024


class UsageError(Exception):
    """Bad arguments or unreadable input (exit status 2)."""


def _as_given(text: str) -> str:
    """An argument as the bytes it came in: Python decodes argv's bytes that are not UTF-8 to
    lone surrogates (\\udcff for the byte 0xff), which are shown as the byte (\\xff)."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no byte makes: written as itself
        return printable(text)


def pairs(
    items: Sequence[str] | None, flag: str, form: str = "NAME=VALUE"
) -> list[tuple[str, str]]:
    """NAME=VALUE items (`form` says them as the flag's help does); a name given twice is
    refused, as a config naming a key twice is: which of the two was meant cannot be told."""
    pairs: dict[str, str] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"{flag} expects {form}, got {item!r}")
        if name in pairs:
            raise UsageError(
                f"{flag} {name} is given twice ({pairs[name]!r} and {value!r}); give it once"
            )
        pairs[name] = value
    return list(pairs.items())


class _TooDeepError(ValueError):
    """JSON nested deeper than the decoder can follow."""


def _loads(text: str) -> JSON:
    """json.loads with keys written once; nesting the decoder cannot follow (it recurses) is
    bad input like any other, not a crash."""
    try:
        return loads_json(text)
    except RecursionError:
        raise _TooDeepError("nested too deeply to read") from None


def _typed(name: str, text: str) -> JSON:
    """A --set value in the option's own type, so that typing it is not 'normalizing' it."""
    option = CATALOG.by_name.get(name)
    if option is None:
        return text
    if option.type in (OptType.STR, OptType.PATH):
        # Text as written; quoted past the shell ('precision_mode_v2="origin"') it is what the
        # quotes hold, as `"600"` is 600 for an int option. Not when it holds a backslash or a
        # quote: read as JSON, '"C:\temp"' would silently hold a tab.
        quoted = text.strip()
        inner = quoted[1:-1]
        if len(quoted) >= 2 and quoted[0] == quoted[-1] == '"' and not {'"', "\\"} & set(inner):
            return inner
        return text
    try:
        return _loads(text)
    except _TooDeepError:  # valid JSON, refused as too deep like any value nested too deep
        return too_deep_value()
    except DuplicateKeyError as exc:
        raise UsageError(f"--set {name}: {exc}") from None
    except ValueError:  # not JSON (or cut short): the text itself, for the option to judge
        # The texts the core reads as a bool, and only those ('tRuE' stays text and is
        # refused as it would be in a config).
        if option.type is OptType.BOOL and text.strip() in BOOL_TEXTS:
            return BOOL_TEXTS[text.strip()]
        return text


def _named(path: str) -> str:
    """A file as messages name it: "-" is standard input; a name's bytes that are not UTF-8 as
    the bytes (\\xff), as every argument is shown."""
    return "from standard input" if path == "-" else _as_given(path)


def _read_at_most(path: str, what: str, size: int) -> bytes:
    """Up to `size` bytes of a file, or of stdin for "-". A pipe or a device has no size to
    check beforehand (stat says 0 for /dev/zero), so the bound is on what is read."""
    try:
        if path == "-":
            stdin = sys.stdin
            if stdin is None:
                raise UsageError(f"cannot read {what} from standard input: it is closed")
            buffer = getattr(stdin, "buffer", None)
            if buffer is None:  # a text stream put in its place
                return stdin.read(size).encode("utf-8", "surrogateescape")[:size]
            data: bytes = buffer.read(size)
            return data
        with open(_opened(path, what), "rb") as file:
            return file.read(size)
    except (OSError, ValueError) as exc:  # ValueError: a stream closed under us
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise UsageError(f"cannot read {what} {_named(path)}: {reason}") from exc


WRITER_NOTICE_S: Final = 5.0
"""How long a named pipe may stay silent before the command says what it is waiting for."""


def _opened(path: str, what: str) -> int:
    """The file's descriptor, open for blocking reads. Opening a named pipe waits for a writer,
    silently and for ever if no process writes to it: it is opened without waiting, and when
    nothing is written within WRITER_NOTICE_S the command says on stderr what it waits for
    (a slow `<(command)` is still read whole), then waits on."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            waiting = select.poll()
            waiting.register(fd, select.POLLIN | select.POLLHUP)
            if not waiting.poll(int(WRITER_NOTICE_S * 1000)):
                warn(
                    f"npu-resolve: waiting for {what} from the named pipe {printable(path)}: "
                    "nothing is written to it yet (Ctrl-C stops)"
                )
                waiting.poll()
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_limited(path: str, what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The whole of a file or stdin, refused when longer than `limit`: read one byte more to
    know, never all of it."""
    data = _read_at_most(path, what, limit + 1)
    if len(data) > limit:
        raise UsageError(f"{what} {_named(path)} is larger than {limit:,} bytes")
    return data


def read_config(path: str | None) -> dict[str, JSON]:
    if path is None:
        return {}
    try:  # utf-8-sig: a byte-order mark some editors write is not part of the JSON
        text = read_limited(path, "config").decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read config {_named(path)}: {exc}") from exc
    if not text.strip():  # the decoder's "Expecting value: line 1 column 1" says less
        raise UsageError(f"config {_named(path)} is empty; write a JSON object, {{}} for none")
    try:
        data = _loads(text)
    except _TooDeepError:  # valid JSON, refused as too deep like any config nested too deep
        return {"": too_deep_value()}
    except DuplicateKeyError as exc:
        raise UsageError(f"config {_named(path)}: {exc}; write each key once") from exc
    except ValueError as exc:
        raise UsageError(f"config {_named(path)} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"config {_named(path)} must be a JSON object of option name to value")
    return data


def _attachments(args: argparse.Namespace, config: dict[str, JSON]) -> dict[str, str]:
    from .._content import CONTENT_RULES

    attached: dict[str, str] = {}
    given = dict(pairs(args.attach, "--attach", "OPTION=FILE"))
    if args.read_files:
        for option in CONTENT_RULES:
            path = config.get(option)
            if not isinstance(path, str) or not path or option in given:  # --attach wins
                continue
            file = Path(path)
            if not file.is_absolute() and args.workdir:  # the job's paths are relative to it
                file = Path(args.workdir) / file
            if file.is_file():
                attached[option] = _read_attachment(option, str(file))
            else:  # said, since its rules stay NOT_CHECKED whatever the flag asked
                warn(
                    f"npu-resolve: note: --read-files: {option} names {printable(str(file))}, "
                    "which is not a file here; not attached"
                )
    for option, path in given.items():
        if option not in CONTENT_RULES:
            known = ", ".join(CONTENT_RULES)
            raise UsageError(f"--attach {option}: only these options name a file: {known}")
        attached[option] = _read_attachment(option, path)
    return attached


def _read_attachment(option: str, path: str) -> str:
    """A file an option names, as text; one that is not UTF-8 is unreadable input, said with
    the line and column and the format's rule. One byte over the limit is read, no more: the
    decoder then refuses it as too large, whether it is a file, a pipe or /dev/zero."""
    from .._content import FORMAT_RULES
    from ..attachments import MAX_ATTACHMENT_BYTES, decode_attachment

    data = _read_at_most(path, f"{option} file", MAX_ATTACHMENT_BYTES + 1)
    text, issue = decode_attachment(data)
    if text is None:
        reason = issue.message if issue is not None else "not readable as text"
        raise UsageError(f"{option} file {_named(path)} ({FORMAT_RULES[option]}): {reason}")
    return text


def utf8_text(text: str) -> str:
    """An argument or variable read as the UTF-8 its bytes are, whatever the locale: Python
    decodes argv and the environment in the locale's encoding, so '/数据' in UTF-8 bytes was
    refused under LC_ALL=C, and the same name in GBK bytes, read as GBK, was written back by
    --format env in UTF-8 (another folder). Bytes that are not UTF-8 stay lone surrogates,
    refused alike in every locale."""
    if text.isascii():
        return text
    try:
        return os.fsencode(text).decode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # not text the locale's codec made: taken as it is
        return text


def text_arguments(args: argparse.Namespace) -> None:
    """The arguments that are text for the answer (not paths this command opens: --config,
    --policy, an --attach file), read as UTF-8 (utf8_text)."""
    product = getattr(args, "product", None)
    if isinstance(product, list):
        args.product = [utf8_text(p) for p in product]
    elif isinstance(product, str):
        args.product = utf8_text(product)
    for flag in ("profile", "workdir", "option"):
        if isinstance(getattr(args, flag, None), str):
            setattr(args, flag, utf8_text(getattr(args, flag)))
    for flag in ("set", "env"):
        if getattr(args, flag, None):
            setattr(args, flag, [utf8_text(item) for item in getattr(args, flag)])
    if getattr(args, "attach", None):  # the option's name is text; the file's is the OS's
        args.attach = [
            f"{utf8_text(name)}{sep}{path}"
            for name, sep, path in (item.partition("=") for item in args.attach)
        ]


def _refuse_non_text(args: argparse.Namespace) -> None:
    """Bytes on the command line that are not UTF-8 arrive as lone surrogates: no answer can
    carry them and no server can be sent them, so they are usage errors, in process too. An
    --attach file's name is the OS's to read, whatever its bytes."""
    products = args.product if isinstance(args.product, list) else [args.product]
    given = [("--product", product) for product in products]
    given += [("--profile", args.profile or ""), ("--workdir", args.workdir or "")]
    given += [("--set", item) for item in args.set or ()]
    given += [("--attach", item.partition("=")[0]) for item in args.attach or ()]
    for flag, text in given:
        if not is_text(text):
            raise UsageError(f"{flag}: '{_as_given(text)}' is not valid UTF-8 text")


def _note_unread_env(given: Mapping[str, str]) -> None:
    """A variable named with --env that the resolver never reads has no effect: most often a
    misspelt one (HCCL_EXEC_TIMOUT), which the answer, holding only what is read, cannot show.
    Said on stderr; the answer and the exit status stay as they are."""
    for name in given:
        if name not in NAMED_ENV_VARS:
            close = closest(name.upper(), NAMED_ENV_VARS)  # `home` is not HOME, yet meant it
            hint = f"; did you mean {close}?" if close else ""
            warn(
                f"npu-resolve: note: --env {name} is not a variable the resolver reads, so it "
                f"has no effect{hint}"
            )


UNSENT_NOTED: Final = tuple(name for name in NAMED_ENV_VARS if name != "HOME")
"""The rules' variables a shell may hold for a job (HOME, which every shell holds, aside)."""


def _note_unsent_env(given: Mapping[str, str]) -> None:
    """A rule's variable set in this shell is not the job's unless sent: said on stderr, once,
    so that HCCL_EXEC_TIMEOUT=600 in the shell is not taken for part of the answer (a blank one
    sets nothing, and is not said)."""
    asked = {name.upper() for name in given}  # `--env ascend_device_id` has its own note
    unsent = sorted(k for k in UNSENT_NOTED if os.environ.get(k, "").strip() and k not in asked)
    if unsent:
        warn(
            f"npu-resolve: note: {', '.join(unsent)} {'is' if len(unsent) == 1 else 'are'} set "
            "in this shell but not sent; --inherit-env sends the rules' variables of this shell "
            "(or give them with --env)"
        )


def _note_replaced(replaced: Mapping[str, JSON], config: Mapping[str, JSON]) -> None:
    """--set wins over the config file's value for the same option, as documented; said on
    stderr when the two differ, since the answer shows only the --set value, as the caller's.
    `replaced`: the file's values of the options --set gave."""
    for name, before in replaced.items():
        after = config[name]
        if after is not before and (type(after) is not type(before) or after != before):
            warn(
                f"npu-resolve: note: --set {name} replaces the config's {show(before)} with "
                f"{show(after)}"
            )


def _stdin_once(args: argparse.Namespace) -> None:
    """Standard input feeds one input: `--config -` with `--attach OPTION=-` would give the
    attachment nothing (the config read it all), reported as an empty file."""
    asking = [f"--config {args.config}"] if getattr(args, "config", None) == "-" else []
    for item in getattr(args, "attach", None) or ():
        if item.partition("=")[2] == "-":
            asking.append(f"--attach {item}")
    for flag in (*CREDENTIAL_FLAGS, "token_file"):
        if getattr(args, flag, None) == "-":
            asking.append(f"--{flag.replace('_', '-')} -")
    if len(asking) > 1:
        raise UsageError(
            f"standard input feeds one input, and {' and '.join(asking)} each ask for it; "
            "name a file for all but one"
        )


def request_from_args(args: argparse.Namespace, product: str) -> ResolveRequest:
    _stdin_once(args)
    _refuse_non_text(args)
    config = read_config(args.config)
    from_file = dict(config)
    given = pairs(args.set, "--set")
    for name, value in given:
        config[name] = _typed(name, value)
    _note_replaced({name: from_file[name] for name, _ in given if name in from_file}, config)
    env: dict[str, str] = {}
    if args.inherit_env:
        env.update({k: utf8_text(os.environ[k]) for k in NAMED_ENV_VARS if k in os.environ})
    given_env = dict(pairs(args.env, "--env"))
    env.update(given_env)
    for name, value in env.items():  # bytes that are not UTF-8, from argv
        if not is_text(name):
            raise UsageError(f"--env: the name '{_as_given(name)}' is not valid UTF-8 text")
        if not is_text(value):
            raise UsageError(
                f"environment variable {_as_given(name)}: '{_as_given(value)}' is not valid "
                "UTF-8 text"
            )
    _note_unread_env(given_env)
    if not args.inherit_env:
        _note_unsent_env(given_env)
    return ResolveRequest(
        product=product,
        config=config,
        env=env,
        workdir=args.workdir or "",
        profile=args.profile or "",
        strict=args.strict,
        validate_only=getattr(args, "validate_only", False),
        attachments=_attachments(args, config),
    )


def read_policy(path: str | None) -> Policy | None:
    if path is None:
        return None
    from .._policy import PolicyError, load_policy

    try:
        return load_policy(path)
    except PolicyError as exc:  # a problem a line, as `policy check` lists them
        raise UsageError(policy_refusal(exc)) from exc


def policy_refusal(refused: PolicyError) -> str:
    """A refused policy file as a person reads it: the file, then each problem on its line."""
    return f"policy {_as_given(refused.source)} refused:{refused.listed}"


CREDENTIAL_FLAGS: Final = {
    "tls_ca": "root_certificates",
    "tls_cert": "certificate_chain",
    "tls_key": "private_key",
}


def credentials(args: argparse.Namespace) -> dict[str, Any]:
    """The client's TLS and token arguments, read from the files the flags name."""
    from npu_resolver_client.credentials import checked_pem, checked_token, pair_problem

    found: dict[str, Any] = {}
    for flag, param in {**CREDENTIAL_FLAGS, "token_file": "token"}.items():
        path = getattr(args, flag, None)
        if path is None:
            continue
        option = "--" + flag.replace("_", "-")
        if not path:
            raise UsageError(f"{option} is given no file name; name the file, or leave it out")
        data = read_limited(path, option)
        named = f"{option} {path}"
        try:
            if param == "token":
                if not data.strip():  # said in the CLI's terms, not the client's argument
                    raise UsageError(
                        f"{named} is empty (or only whitespace); write the bearer token in it, "
                        f"or leave {option} out to call without a token"
                    )
                found[param] = checked_token(data.decode("utf-8", "replace"))
            else:
                found[param] = checked_pem(
                    named, data, "PRIVATE KEY" if param == "private_key" else "CERTIFICATE"
                )
        except ValueError as exc:
            raise UsageError(str(exc) if param != "token" else f"{named}: {exc}") from None
    if ("certificate_chain" in found) != ("private_key" in found):
        raise UsageError("--tls-cert and --tls-key go together (mutual TLS)")
    if "private_key" in found:
        chain = f"--tls-cert {args.tls_cert}"
        problem = pair_problem(found["certificate_chain"], found["private_key"], chain)
        if problem:
            raise UsageError(f"--tls-key {args.tls_key} {problem}")
    return found


def server_target(text: str) -> str:
    """`--server` as HOST:PORT (or [v6]:PORT), or a gRPC target with its scheme (dns:///...,
    unix:...), checked as the client checks its target. A missing or impossible port is a usage
    error, not a connection attempt to a port gRPC would pick (443) or wrap around."""
    from npu_resolver_client.target import checked_target

    try:
        return checked_target(text)
    except ValueError as exc:  # the client's words, with its reason: named as the flag
        raise UsageError(f"--server {str(exc).removeprefix('target ')}") from None
