"""`npu-resolve`: resolve, explain, diff and serve from the command line.

Exit status: 0 resolved; 1 the request has errors (the report is still printed); 2 usage error
or unreadable input; 3 server unreachable. The CLI holds no rule: it reads input, calls a
transport, and prints.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

from .._catalog import CATALOG
from .._model import Resolution, Severity
from .._options import MENTIONED_ONLY
from ._inputs import (
    CREDENTIAL_FLAGS,
    UsageError,
    _as_given,
    credentials,
    policy_refusal,
    read_policy,
    request_from_args,
    server_target,
    text_arguments,
)
from ._render import (
    FORMATS,
    object_options,
    render_diagnostics,
    render_env,
    render_json,
    render_python,
    render_table,
)
from ._streams import warn as _warn
from ._streams import write_line as _write
from ._transport import InProcess, RefusedError, Remote, Transport, UnreachableError

if TYPE_CHECKING:
    from .._policy import PolicyError

EXIT_OK, EXIT_ERRORS, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
EXIT_INTERRUPTED: Final = 128 + int(signal.SIGINT)
"""Ctrl-C: main() returns 130, as a shell reports a command SIGINT ended; run() then ends the
process by the signal itself."""


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
        if sys.stderr is not None:  # closed (2>&-): never the usage on stdout, in a pipe's way
            self.print_usage(sys.stderr)
        for action in self._actions:  # a missing command: named by the commands to give, not
            if isinstance(action, argparse._SubParsersAction) and message.endswith(  # the dest
                f"required: {action.dest}"
            ):
                message = f"give a command: {', '.join(action.choices)}"
        raise UsageError(message)

    def _print_message(self, message: str, file: Any = None) -> None:
        """--help on standard output as every answer is written: one it cannot take (a full
        disk) is exit status 2 saying so, not a lost help text and exit status 0."""
        if message and (file is None or file is sys.stdout):
            _print(message.removesuffix("\n"))
        else:
            super()._print_message(message, file)

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


def _transport(args: argparse.Namespace) -> Transport:
    server = getattr(args, "server", None)
    if server is not None:  # --server '' is a mistake, not a request to resolve in process
        if getattr(args, "policy", None):
            raise UsageError("--policy is for in-process resolution; the server has its own")
        limit = getattr(args, "max_message_bytes", None)
        sizes = {} if limit is None else {"max_message_bytes": limit}
        timeout = getattr(args, "timeout", None)
        deadline = {} if timeout is None else {"timeout": timeout}
        try:
            return Remote(server_target(server), **credentials(args), **sizes, **deadline)
        except ValueError as exc:  # the client's own check of the size, in the flag's words
            said = str(exc).removeprefix("max_message_bytes ")
            raise UsageError(f"--max-message-bytes: {said}") from exc
    if any(getattr(args, name, None) is not None for name in (*CREDENTIAL_FLAGS, "token_file")):
        raise UsageError("--tls-ca, --tls-cert, --tls-key and --token-file go with --server")
    if getattr(args, "max_message_bytes", None) is not None:  # in process: no message at all
        raise UsageError("--max-message-bytes goes with --server")
    if getattr(args, "timeout", None) is not None:  # in process: no call to wait for
        raise UsageError("--timeout goes with --server")
    return InProcess(read_policy(getattr(args, "policy", None)))


class _OutputError(Exception):
    """Standard output is closed or refuses the answer (a full disk): exit status 2."""


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


def _drop_stdout() -> None:
    """Point stdout at /dev/null once it has failed, so that the interpreter's flush at exit
    does not fail on the same bytes again and print a traceback of its own."""
    with contextlib.suppress(AttributeError, OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _cmd_resolve(args: argparse.Namespace) -> int:
    request = request_from_args(args, args.product)
    result: Resolution = _transport(args).resolve(request)
    colour = (
        sys.stdout is not None
        and sys.stdout.isatty()
        and not os.environ.get("NO_COLOR")
        and os.environ.get("TERM") != "dumb"  # a terminal that shows escapes as text
    )
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
        if args.format == "json"
        else render_products(products)
    )
    return EXIT_OK


def _cmd_explain(args: argparse.Namespace) -> int:
    from ._explain import render_explain, render_option_list

    if args.product is not None and not args.product.strip():  # as resolve's UNKNOWN_PRODUCT
        raise UsageError("--product is empty: name a product, or leave it out for every product")
    if args.option is None:  # the list to find a name in
        try:
            _print(render_option_list(args.product, as_json=args.format == "json"))
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        return EXIT_OK
    if args.option in MENTIONED_ONLY:  # as resolve says it, not a near name
        raise UsageError(
            f"unknown option {args.option!r}: {MENTIONED_ONLY[args.option]}, so the resolver "
            "cannot explain it; check it against the runtime's own documentation"
        )
    if args.option not in CATALOG:
        hint = CATALOG.suggest(args.option)
        raise UsageError(
            f"unknown option {args.option!r}" + (f"; did you mean {hint!r}?" if hint else "")
        )
    try:
        _print(render_explain(args.option, args.product, as_json=args.format == "json"))
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
    request = request_from_args(args, args.product[0])
    result = _transport(args).diff(request, args.product)
    _print(
        json.dumps(result.to_json(), indent=2, ensure_ascii=False)
        if args.format == "json"
        else render_diff(result, args.all)
    )
    return EXIT_OK if all(r.ok for r in result.results.values()) else EXIT_ERRORS


def _cmd_policy(args: argparse.Namespace) -> int:
    from .._policy import PolicyError, PolicyReadError, diagnostics_from_policy, load_policy

    if args.policy_command == "check":
        try:
            policy = load_policy(args.file)
        except PolicyError as exc:
            if args.format == "json":  # for a pipeline: an unreadable file's line stays too
                _print(_policy_refusal_json(exc))
            if isinstance(exc, PolicyReadError):
                raise UsageError(f"policy {exc}") from exc
            if args.format != "json":
                _print(policy_refusal(exc))
            _warn(  # what a fixed file may bring next: said now, not found on the next run
                "npu-resolve: what the policy does to jobs is judged once the file loads; "
                "check it again after fixing these"
            )
            return EXIT_ERRORS
        summary = policy.summary()
        said = diagnostics_from_policy(policy)
        if said:  # what every job would hear: shown by `check` only, which resolves to find it
            summary["diagnostics_from_the_policy"] = [says.text for says in said]
        errors = sum(says.severity is Severity.ERROR for says in said)
        if args.format == "table":
            from ._explain import render_policy_summary

            _print(render_policy_summary(_as_given(args.file), summary))
        else:  # `ok` only when asked for JSON: the default's keys stay as they were
            answer = summary if args.format is None else {"ok": not errors, **summary}
            _print(json.dumps(answer, indent=2, ensure_ascii=False))
        if errors:  # loadable, but every job it reaches fails: not a file to push
            _warn(
                f"policy {_as_given(args.file)} loads, but {errors} of its "
                "diagnostics_from_the_policy "
                f"{'is an ERROR' if errors == 1 else 'are ERRORs'}: the jobs "
                f"{'it names' if errors == 1 else 'they name'} would fail"
            )
            return EXIT_ERRORS
        return EXIT_OK
    shown = _transport(args).policy()
    _print(json.dumps(shown, indent=2, ensure_ascii=False))
    return EXIT_OK


def _policy_refusal_json(exc: PolicyError) -> str:
    """A refused or unreadable policy file as `policy check --format json` prints it: the
    error's own fields, `digest` empty when no byte was read."""
    refusal = {"ok": False, "source": exc.source, "problems": exc.problems, "digest": exc.digest}
    return json.dumps(refusal, indent=2, ensure_ascii=False)


def _serve(argv: Sequence[str]) -> int:
    """`serve` belongs to the server package; loaded only here so other commands stay light."""
    # A SIGHUP asks for the policy file to be read again; until the server reads it the first
    # time there is nothing to read again, and the signal's default action would end the start.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
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
    reply = "; a diff's reply may be several times its request" if multi_product else ""
    _server_arguments(parser, "resolve through a running server", reply)


def _server_arguments(parser: argparse.ArgumentParser, help_text: str, reply: str = "") -> None:
    """--server, and how to reach a server that wants TLS, mutual TLS or a bearer token."""
    parser.add_argument("--server", metavar="HOST:PORT", help=help_text)
    parser.add_argument("--tls-ca", metavar="FILE", help="with --server: CA bundle (PEM) for TLS")
    parser.add_argument("--tls-cert", metavar="FILE", help="with --server: client cert (mTLS)")
    parser.add_argument("--tls-key", metavar="FILE", help="with --server: client key (mTLS)")
    parser.add_argument(
        "--token-file", metavar="FILE", help="with --server: file holding the bearer token"
    )
    parser.add_argument(
        "--max-message-bytes",
        metavar="N",
        type=int,
        help="with --server: the largest request and reply this command takes (default 4 MiB, "
        f"as the server's; -1 for no limit{reply})",
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_seconds,
        help="with --server: how long to wait for the answer, retries included (default 10; "
        "inf for no deadline)",
    )


def _seconds(text: str) -> float:
    """--timeout's value: a positive number of seconds, or inf for none, as the client takes
    it. Said here as a usage error, not as the client's ValueError or a call failing at once
    as if the server were down."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if math.isnan(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(
            f"expects a positive number of seconds (inf for no deadline), got {_as_given(text)!r}"
        )
    return seconds


class _Version(argparse.Action):
    """--version, its text read only when asked (package metadata costs every start time)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        _print(_version_text())  # on standard output, as argparse's own version action does
        parser.exit()


def _version_text() -> str:
    """What a bug report needs: the program and the source document its catalog restates."""
    from .. import CATALOG_VERSION
    from .._version import __version__

    return f"npu-resolve {__version__} (catalog {CATALOG_VERSION})"


def _output_arguments(
    parser: argparse.ArgumentParser, default: str | None = "table", said: str = "table"
) -> None:
    """`--format table|json`, as resolve takes it, with `--json` its short form: one or the
    other, given once. `default` None: neither given, which a command whose output predates
    the flag (policy check) tells from either (`said` is its help's words for it)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--format",
        choices=("table", "json"),
        action=_Once,
        help=f"output format (default: {said})",
    )
    group.add_argument(
        "--json", dest="format", action="store_const", const="json", help="--format json"
    )
    parser.set_defaults(format=default)


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
    _output_arguments(products)
    _server_arguments(products, "ask a running server")
    products.set_defaults(func=_cmd_products)

    explain = sub.add_parser(
        "explain", help="what the source says about one option; without one, every option"
    )
    explain.add_argument("option", nargs="?", help="an option name (without it: list them all)")
    explain.add_argument("--product", help="only this product")
    _output_arguments(explain)
    explain.set_defaults(func=_cmd_explain)

    diff = sub.add_parser("diff", help="one config across several products")
    _resolve_arguments(diff, multi_product=True)
    diff.add_argument("--all", action="store_true", help="show equal rows too")
    _output_arguments(diff)
    diff.set_defaults(func=_cmd_diff)

    policy = sub.add_parser("policy", help="check or show a platform policy")
    policy_sub = policy.add_subparsers(dest="policy_command", required=True, parser_class=_Parser)
    check = policy_sub.add_parser("check", help="validate a policy file")
    check.add_argument("file")
    _output_arguments(  # no default: a refusal was text and a summary JSON before the flag
        check,
        None,
        "JSON for a file that loads, text lines for one refused; table: text either way; "
        'json: JSON either way, with "ok"',
    )
    show = policy_sub.add_parser("show", help="the policy in force")
    show.add_argument("--policy", help="policy TOML file")
    _server_arguments(show, "show a running server's policy")
    policy.set_defaults(func=_cmd_policy)

    serve = sub.add_parser("serve", help="run the gRPC server (see `npu-resolve serve --help`)")
    serve.add_argument("serve_args", nargs=argparse.REMAINDER)
    return parser


def run() -> NoReturn:
    """The `npu-resolve` command: main() on sys.argv, and a Ctrl-C ends the process by SIGINT
    after its one line, as Python does with an uncaught KeyboardInterrupt (a shell stops a
    script whose command SIGINT ended, not one that exited 130)."""
    code = main()
    if code == EXIT_INTERRUPTED and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.raise_signal(signal.SIGINT)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None, *, from_os: bool | None = None) -> int:
    """The command on `argv` (sys.argv's when None), returning its exit status. `from_os`
    (default: argv is None) reads the text arguments back as the UTF-8 their bytes are, as
    for sys.argv, decoded in the locale's encoding (see utf8_text); a list of text is taken
    as it is. Ctrl-C returns EXIT_INTERRUPTED (run() then ends by the signal)."""
    if from_os is None:
        from_os = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        return _serve(argv[1:])
    try:
        args = build_parser().parse_args(argv)
        if from_os:
            text_arguments(args)
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
    except KeyboardInterrupt:  # Ctrl-C while waiting on a server, stdin or a FIFO
        _warn("npu-resolve: interrupted")
        return EXIT_INTERRUPTED
