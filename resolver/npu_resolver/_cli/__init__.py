"""`npu-resolve`: resolve, explain, diff and serve from the command line.

Exit status: 0 resolved; 1 the request has errors (the report is still printed); 2 usage error
or unreadable input; 3 server unreachable. The CLI holds no rule: it reads input, calls a
transport, and prints.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import select
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from .._catalog import CATALOG
from .._model import (
    JSON,
    DuplicateKeyError,
    Resolution,
    ResolveRequest,
    Severity,
    closest,
    is_text,
    loads_json,
    printable,
)
from .._options import NAMED_ENV_VARS
from .._schema import OptType
from .._values import BOOL_TEXTS, too_deep_value
from ._render import (
    FORMATS,
    object_options,
    render_diagnostics,
    render_env,
    render_json,
    render_python,
    render_table,
)
from ._transport import InProcess, RefusedError, Remote, Transport, UnreachableError

if TYPE_CHECKING:
    from .._policy import Policy

EXIT_OK, EXIT_ERRORS, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
MAX_INPUT_BYTES: Final = 4 * 1024 * 1024


class UsageError(Exception):
    """Bad arguments or unreadable input (exit status 2)."""


class _Once(argparse.Action):
    """A flag that takes one value, refused when given twice: argparse would keep the last
    silently, and which of the two was meant cannot be told (as for a --set name twice)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        given: dict[str, Any] = namespace.__dict__.setdefault("_given_once", {})
        if self.dest in given:
            raise argparse.ArgumentError(
                self, f"given twice ({given[self.dest]!r} and {values!r}); give it once"
            )
        given[self.dest] = values
        setattr(namespace, self.dest, values)


class _Parser(argparse.ArgumentParser):
    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        """A flag that stores one value takes it once (see _Once); flags that gather values
        (--set, diff's --product) and switches are left as they are."""
        is_flag = bool(names) and str(names[0]).startswith("-")
        if is_flag and kwargs.get("action", "store") == "store" and "nargs" not in kwargs:
            kwargs["action"] = _Once
        return super().add_argument(*names, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise UsageError(message)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: None = None
    ) -> argparse.Namespace:
        """As argparse's, but an unknown flag is refused with the usage of the subcommand it
        was given to, not the top-level one."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            _command_parser(self, parsed).error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Any:
    """The parser of the (sub)command `args` were parsed for."""
    while True:
        action = next(
            (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None
        )
        name = getattr(args, action.dest, None) if action is not None else None
        if action is None or name is None:
            return parser
        parser = action.choices[name]


def _pairs(
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
    if option is None or option.type in (OptType.STR, OptType.PATH):
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
    """A file as messages name it: "-" is standard input."""
    return "from standard input" if path == "-" else path


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
                print(
                    f"npu-resolve: waiting for {what} from the named pipe {printable(path)}: "
                    "nothing is written to it yet (Ctrl-C stops)",
                    file=sys.stderr,
                    flush=True,
                )
                waiting.poll()
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_limited(path: str, what: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The whole of a file or stdin, refused when longer than `limit`: read one byte more to
    know, never all of it."""
    data = _read_at_most(path, what, limit + 1)
    if len(data) > limit:
        raise UsageError(f"{what} {_named(path)} is larger than {limit} bytes")
    return data


def _read_config(path: str | None) -> dict[str, JSON]:
    if path is None:
        return {}
    try:  # utf-8-sig: a byte-order mark some editors write is not part of the JSON
        text = _read_limited(path, "config").decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"cannot read config {_named(path)}: {exc}") from exc
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
    if args.read_files:
        for option in CONTENT_RULES:
            path = config.get(option)
            if not isinstance(path, str) or not path:
                continue
            file = Path(path)
            if not file.is_absolute() and args.workdir:  # the job's paths are relative to it
                file = Path(args.workdir) / file
            if file.is_file():
                attached[option] = _read_attachment(option, str(file))
    for option, path in _pairs(args.attach, "--attach", "OPTION=FILE"):
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
        raise UsageError(f"{option} file {path} ({FORMAT_RULES[option]}): {reason}")
    return text


def _refuse_non_text(args: argparse.Namespace) -> None:
    """Bytes on the command line that are not UTF-8 arrive as lone surrogates: no answer can
    carry them and no server can be sent them, so they are usage errors, in process too."""
    products = args.product if isinstance(args.product, list) else [args.product]
    given = [("--product", product) for product in products]
    given += [("--profile", args.profile or ""), ("--workdir", args.workdir or "")]
    given += [("--set", item) for item in args.set or ()]
    given += [("--attach", item) for item in args.attach or ()]
    for flag, text in given:
        if not is_text(text):
            raise UsageError(f"{flag}: '{printable(text)}' is not valid UTF-8 text")


def _note_unread_env(given: Mapping[str, str]) -> None:
    """A variable named with --env that the resolver never reads has no effect: most often a
    misspelt one (HCCL_EXEC_TIMOUT), which the answer, holding only what is read, cannot show.
    Said on stderr; the answer and the exit status stay as they are."""
    for name in given:
        if name not in NAMED_ENV_VARS:
            close = closest(name.upper(), NAMED_ENV_VARS)  # `home` is not HOME, yet meant it
            hint = f"; did you mean {close}?" if close else ""
            print(
                f"npu-resolve: note: --env {name} is not a variable the resolver reads, so it "
                f"has no effect{hint}",
                file=sys.stderr,
            )


def _request(args: argparse.Namespace, product: str) -> ResolveRequest:
    _refuse_non_text(args)
    config = _read_config(args.config)
    for name, value in _pairs(args.set, "--set"):
        config[name] = _typed(name, value)
    env: dict[str, str] = {}
    if args.inherit_env:
        env.update({k: os.environ[k] for k in NAMED_ENV_VARS if k in os.environ})
    given_env = dict(_pairs(args.env, "--env"))
    env.update(given_env)
    for name, value in env.items():  # bytes that are not UTF-8, from argv
        if not is_text(name):
            raise UsageError(f"--env: the name '{printable(name)}' is not valid UTF-8 text")
        if not is_text(value):
            raise UsageError(
                f"environment variable {name}: '{printable(value)}' is not valid UTF-8 text"
            )
    _note_unread_env(given_env)
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


def _policy(path: str | None) -> Policy | None:
    if path is None:
        return None
    from .._policy import PolicyError, load_policy

    try:
        return load_policy(path)
    except PolicyError as exc:
        raise UsageError(f"policy refused: {exc}") from exc


def _transport(args: argparse.Namespace) -> Transport:
    server = getattr(args, "server", None)
    if server is not None:  # --server '' is a mistake, not a request to resolve in process
        if getattr(args, "policy", None):
            raise UsageError("--policy is for in-process resolution; the server has its own")
        return Remote(_server_target(server), **_credentials(args))
    if any(getattr(args, name, None) is not None for name in (*_CREDENTIALS, "token_file")):
        raise UsageError("--tls-ca, --tls-cert, --tls-key and --token-file go with --server")
    return InProcess(_policy(getattr(args, "policy", None)))


_CREDENTIALS: Final = {
    "tls_ca": "root_certificates",
    "tls_cert": "certificate_chain",
    "tls_key": "private_key",
}


def _credentials(args: argparse.Namespace) -> dict[str, Any]:
    """The client's TLS and token arguments, read from the files the flags name."""
    from npu_resolver_client.credentials import checked_pem, checked_token, pair_problem

    found: dict[str, Any] = {}
    for flag, param in {**_CREDENTIALS, "token_file": "token"}.items():
        path = getattr(args, flag, None)
        if path is None:
            continue
        option = "--" + flag.replace("_", "-")
        if not path:
            raise UsageError(f"{option} is given no file name; name the file, or leave it out")
        data = _read_limited(path, option)
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


_SCHEMES: Final = ("dns:", "unix:", "unix-abstract:", "ipv4:", "ipv6:", "vsock:")
_HOST_PORT: Final = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):([0-9]{1,5})")


def _server_target(text: str) -> str:
    """`--server` as HOST:PORT (or [v6]:PORT), or a gRPC target with its scheme (dns:///...,
    unix:...). A missing or impossible port is a usage error, not a connection attempt to a
    port gRPC would pick (443) or wrap around."""
    if text.startswith(_SCHEMES):
        return text
    match = _HOST_PORT.fullmatch(text)
    if match is None or not 1 <= int(match.group(1)) <= 65535:
        raise UsageError(
            f"--server {text!r} is not HOST:PORT with a port in 1-65535 "
            "(or a gRPC target such as dns:///host:port)"
        )
    return text


class _OutputError(Exception):
    """Standard output is closed or refuses the answer (a full disk): exit status 2."""


def _write(stream: Any, text: str) -> None:
    """`text` and a newline as UTF-8, whatever the locale or PYTHONIOENCODING say: the JSON
    and paths printed must not depend on them, nor fail on a character ASCII lacks."""
    data = (text + "\n").encode("utf-8", "backslashreplace")
    buffer = getattr(stream, "buffer", None)
    if buffer is None:  # a text stream put in its place
        stream.write(text + "\n")
        stream.flush()
        return
    stream.flush()
    buffer.write(data)
    buffer.flush()


def _print(text: str) -> None:
    if sys.stdout is None:
        raise _OutputError("standard output is closed")
    try:
        _write(sys.stdout, text)
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:  # ValueError: written to a closed file
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise _OutputError(f"standard output: {reason}") from exc


def _warn(text: str) -> None:
    """A line on stderr, when there is one to take it."""
    if sys.stderr is None:
        return
    with contextlib.suppress(OSError, ValueError):
        _write(sys.stderr, text)


def _drop_stdout() -> None:
    """Point stdout at /dev/null once it has failed, so that the interpreter's flush at exit
    does not fail on the same bytes again and print a traceback of its own."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _cmd_resolve(args: argparse.Namespace) -> int:
    request = _request(args, args.product)
    result: Resolution = _transport(args).resolve(request)
    colour = sys.stdout is not None and sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    renderers = {
        "json": lambda: render_json(result),
        "table": lambda: render_table(result, colour=colour),
        "python": lambda: render_python(result),
        "env": lambda: render_env(result, request.env),
    }
    _print(renderers[args.format]())
    left_out = object_options(result) if args.format == "python" else []
    if left_out:
        _warn(
            f"npu-resolve: note: {', '.join(left_out)} left out of the NPURunConfig call: "
            "config objects to construct in the script (their values are in the comments)"
        )
    if args.format in ("python", "env") and result.diagnostics:
        _warn(render_diagnostics(result))
    return EXIT_OK if result.ok else EXIT_ERRORS


def _cmd_products(args: argparse.Namespace) -> int:
    from ._explain import render_products

    products = _transport(args).products()
    _print(
        json.dumps(products, indent=2, ensure_ascii=False)
        if args.json
        else render_products(products)
    )
    return EXIT_OK


def _cmd_explain(args: argparse.Namespace) -> int:
    from ._explain import render_explain, render_option_list

    if args.option is None:  # the list to find a name in
        try:
            _print(render_option_list(args.product, as_json=args.json))
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        return EXIT_OK
    if args.option not in CATALOG:
        hint = CATALOG.suggest(args.option)
        raise UsageError(
            f"unknown option {args.option!r}" + (f"; did you mean {hint!r}?" if hint else "")
        )
    try:
        _print(render_explain(args.option, args.product, as_json=args.json))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return EXIT_OK


def _cmd_diff(args: argparse.Namespace) -> int:
    from .._diff import DiffError, check_diff_products
    from ._explain import render_diff

    try:  # before reading anything or reaching a server: the same words either way
        check_diff_products(args.product)
    except DiffError as exc:
        usage = " (--product A --product B)" if exc.reason == "TOO_FEW_PRODUCTS" else ""
        raise UsageError(f"diff: {exc}{usage}") from None
    # The diff resolves once per product; the request's own product is the first of them.
    request = _request(args, args.product[0])
    result = _transport(args).diff(request, args.product)
    _print(
        json.dumps(result.to_json(), indent=2, ensure_ascii=False)
        if args.json
        else render_diff(result, args.all)
    )
    return EXIT_OK if all(r.ok for r in result.results.values()) else EXIT_ERRORS


def _cmd_policy(args: argparse.Namespace) -> int:
    from .._policy import PolicyError, PolicyReadError, diagnostics_from_policy, load_policy

    if args.policy_command == "check":
        try:
            policy = load_policy(args.file)
        except PolicyReadError as exc:
            raise UsageError(f"policy {exc}") from exc
        except PolicyError as exc:
            _print(f"policy {args.file} refused:")
            for problem in exc.problems:
                _print(f"  - {problem}")
            return EXIT_ERRORS
        summary = policy.summary()
        said = diagnostics_from_policy(policy)
        if said:  # what every job would hear: shown by `check` only, which resolves to find it
            summary["diagnostics_from_the_policy"] = [says.text for says in said]
        _print(json.dumps(summary, indent=2, ensure_ascii=False))
        errors = sum(says.severity is Severity.ERROR for says in said)
        if errors:  # loadable, but every job it reaches fails: not a file to push
            _warn(
                f"policy {args.file} loads, but {errors} of its diagnostics_from_the_policy "
                f"{'is an ERROR' if errors == 1 else 'are ERRORs'}: the jobs "
                f"{'it names' if errors == 1 else 'they name'} would fail"
            )
            return EXIT_ERRORS
        return EXIT_OK
    shown = _transport(args).policy()
    _print(json.dumps(shown, indent=2, ensure_ascii=False))
    return EXIT_OK


def _serve(argv: Sequence[str]) -> int:
    """`serve` belongs to the server package; loaded only here so other commands stay light."""
    from npu_resolver_server import main as server_main

    return server_main(list(argv))


def _resolve_arguments(parser: argparse.ArgumentParser, multi_product: bool = False) -> None:
    if multi_product:
        parser.add_argument(
            "--product",
            action="extend",
            nargs="+",
            required=True,
            help="product ids or aliases (--product A B, or repeat the flag)",
        )
    else:
        parser.add_argument("--product", required=True, help="product id or alias, e.g. atlas-a2")
    parser.add_argument("--config", help="JSON file of option name to value, or - for stdin")
    parser.add_argument(
        "--set", action="extend", nargs="+", metavar="NAME=VALUE", help="set options"
    )
    parser.add_argument(
        "--env", action="extend", nargs="+", metavar="NAME=VALUE", help="the job's environment"
    )
    parser.add_argument(
        "--inherit-env", action="store_true", help="add the named variables from this environment"
    )
    parser.add_argument(
        "--workdir", help="the job's working directory (paths keep <workdir> without it)"
    )
    parser.add_argument("--profile", help="policy profile (default: default)")
    parser.add_argument("--policy", help="policy TOML file (in-process only)")
    parser.add_argument(
        "--strict", action="store_true", help="options that would be dropped are errors"
    )
    parser.add_argument(
        "--attach",
        action="extend",
        nargs="+",
        metavar="OPTION=FILE",
        help="attach the file an option names",
    )
    parser.add_argument(
        "--read-files",
        action="store_true",
        help="attach every file the config names that exists here",
    )
    _server_arguments(parser, "resolve through a running server")


def _server_arguments(parser: argparse.ArgumentParser, help_text: str) -> None:
    """--server, and how to reach a server that wants TLS, mutual TLS or a bearer token."""
    parser.add_argument("--server", metavar="HOST:PORT", help=help_text)
    parser.add_argument("--tls-ca", metavar="FILE", help="with --server: CA bundle (PEM) for TLS")
    parser.add_argument("--tls-cert", metavar="FILE", help="with --server: client cert (mTLS)")
    parser.add_argument("--tls-key", metavar="FILE", help="with --server: client key (mTLS)")
    parser.add_argument(
        "--token-file", metavar="FILE", help="with --server: file holding the bearer token"
    )


class _Version(argparse.Action):
    """--version, its text read only when asked (package metadata costs every start time)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(_version_text())  # on standard output, as argparse's own version action does
        parser.exit()


def _version_text() -> str:
    """What a bug report needs: the program and the source document its catalog restates."""
    from importlib.metadata import PackageNotFoundError, version

    from .. import CATALOG_VERSION

    try:
        program = version("npu-config-resolver")
    except PackageNotFoundError:  # run from a source tree that was never installed
        program = "unknown"
    return f"npu-resolve {program} (catalog {CATALOG_VERSION})"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="npu-resolve", description="Resolve an Ascend NPURunConfig before launch."
    )
    parser.add_argument(
        "--version",
        action=_Version,
        nargs=0,
        help="show the program's version and the catalog's (the source document's) and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    resolve = sub.add_parser("resolve", help="resolve a config for one product")
    _resolve_arguments(resolve)
    resolve.add_argument(
        "--format", choices=FORMATS, default="table", help="output format (default: table)"
    )
    resolve.add_argument(
        "--validate-only", action="store_true", help="report only (through a server: status OK)"
    )
    resolve.set_defaults(func=_cmd_resolve)

    products = sub.add_parser("products", help="list the products and their aliases")
    products.add_argument("--json", action="store_true")
    _server_arguments(products, "ask a running server")
    products.set_defaults(func=_cmd_products)

    explain = sub.add_parser(
        "explain", help="what the source says about one option; without one, every option"
    )
    explain.add_argument("option", nargs="?", help="an option name (without it: list them all)")
    explain.add_argument("--product", help="only this product")
    explain.add_argument("--json", action="store_true")
    explain.set_defaults(func=_cmd_explain)

    diff = sub.add_parser("diff", help="one config across several products")
    _resolve_arguments(diff, multi_product=True)
    diff.add_argument("--all", action="store_true", help="show equal rows too")
    diff.add_argument("--json", action="store_true")
    diff.set_defaults(func=_cmd_diff)

    policy = sub.add_parser("policy", help="check or show a platform policy")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True, parser_class=_Parser)
    check = policy_sub.add_parser("check", help="validate a policy file")
    check.add_argument("file")
    show = policy_sub.add_parser("show", help="the policy in force")
    show.add_argument("--policy", help="policy TOML file")
    _server_arguments(show, "show a running server's policy")
    policy.set_defaults(func=_cmd_policy)

    serve = sub.add_parser("serve", help="run the gRPC server (see `npu-resolve serve --help`)")
    serve.add_argument("serve_args", nargs=argparse.REMAINDER)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        return _serve(argv[1:])
    try:
        args = build_parser().parse_args(argv)
        code: int = args.func(args)
        return code
    except UsageError as exc:
        _warn(f"npu-resolve: {exc}")
        return EXIT_USAGE
    except _OutputError as exc:
        _drop_stdout()
        _warn(f"npu-resolve: cannot write the answer: {exc}")
        return EXIT_USAGE
    except UnreachableError as exc:
        _warn(f"npu-resolve: server unreachable: {exc}")
        return EXIT_UNREACHABLE
    except RefusedError as exc:
        _warn(f"npu-resolve: {exc}")
        return exc.exit_status
    except BrokenPipeError:  # the reader left (`| head`): nothing more to say
        _drop_stdout()
        return EXIT_OK
