"""Text for `products`, `explain`, `diff` and `policy check`: what a person reads at a terminal."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

from .._catalog import CATALOG
from .._describe import describe_option
from .._fingerprint import fragment
from .._model import CATALOG_VERSION, JSON
from .._paths import FOLDER_OPTIONS
from .._rules import RULES
from .._schema import OptType, Range
from ._render import columns, cut_to, padded, shown

if TYPE_CHECKING:
    from .._diff import DiffResult, DiffRow


@cache
def source_wording() -> dict[str, str]:
    """The source's own text per option (shipped with the package)."""
    text = (
        resources.files("npu_resolver")
        .joinpath(f"data/source_{CATALOG_VERSION}.json")
        .read_text("utf-8")
    )
    data: dict[str, str] = json.loads(text)
    return data


def render_products(products: list[dict[str, Any]]) -> str:
    lines = []
    for p in products:
        lines.append(
            shown(f"{p['id']:<16} {p['name']}  ({p['family']} family; source: {p['source_name']})")
        )
        if p["aliases"]:
            lines.append(f"{'':<16} aliases: {shown(', '.join(p['aliases']))}")
    return "\n".join(lines)


_SAID: Final = "diagnostics_from_the_policy"


def render_policy_summary(file: str, summary: dict[str, Any]) -> str:
    """A loaded policy's summary (Policy.summary, with what `check` found) as lines, headed as
    a refused file's are, so that `--format table` reads the same way whatever the outcome."""
    lines = [f"policy {file} loads: version {summary['version']}", "profiles"]
    for name, tables in summary["profiles"].items():
        lines.append(f"  {shown(name)}")
        lines += [f"    {shown(table)}: {shown(', '.join(keys))}" for table, keys in tables.items()]
    headings = (
        "no_default_profile",
        "tables_named_by_a_chip",
        "defaults_that_never_act",
        "values_that_never_act",
        _SAID,
    )
    for heading in headings:
        if summary.get(heading):  # as the JSON, which leaves an empty list out
            lines += [heading, *(f"  - {shown(line)}" for line in summary[heading])]
    return "\n".join(lines)


def _value(value: JSON) -> str:
    return "-" if value is None else json.dumps(value, ensure_ascii=False)


def render_option_list(product: str | None, *, as_json: bool = False) -> str:
    """Every option (with `product`, those that exist on it): name, type, section and summary,
    so that a name can be found without knowing it, and then explained."""
    listed: list[dict[str, Any]] = []
    pid = ""
    for option in CATALOG.options:
        if product:  # ValueError naming the known products for an unknown one
            ((pid, support),) = describe_option(option, product)["products"].items()
            if not support["supported"]:
                continue
        listed.append(
            {
                "name": option.name,
                "type": option.type.value,
                "section": option.section.value,
                "summary": option.summary,
                "flags": [f for f in ("deprecated", "experimental") if getattr(option, f)],
            }
        )
    if as_json:
        return json.dumps(listed, indent=2, ensure_ascii=False)
    where = f" on {pid}" if pid else ""
    lines = [f"{len(listed)} options{where}; `npu-resolve explain OPTION` tells one in full"]
    width = max(len(o["name"]) for o in listed)
    for o in listed:
        marks = f" [{', '.join(o['flags'])}]" if o["flags"] else ""
        lines.append(f"  {o['name']:<{width}}  {o['type']:<6}  {o['summary']}{marks}")
    return "\n".join(lines)


def render_explain(name: str, product: str | None, *, as_json: bool = False) -> str:
    option = CATALOG.by_name[name]
    described = describe_option(option, product)  # ValueError naming the known products
    described["source_text"] = source_wording().get(name, "")
    fmt = _attachment_format(name)
    if fmt is not None:
        described["file_format"] = {"title": fmt[0], "description": fmt[1], "example": fmt[2]}
    if as_json:
        return json.dumps(described, indent=2, ensure_ascii=False)
    flags = [f for f in ("deprecated", "experimental", "unsupported_version") if described[f]]
    lines = [
        f"{name}  ({described['type']}, {described['section']})"
        + (f"  [{', '.join(flags)}]" if flags else ""),
        f"  {described['summary']}",
    ]
    if described["env_var"]:
        lines.append(f"  environment variable: {described['env_var']} (the explicit option wins)")
    if described["aliases"]:
        lines.append(
            "  old names: " + ", ".join(f"{k} = {v}" for k, v in described["aliases"].items())
        )
    lines.append("")
    lines.append(
        f"  {'product':<16} {'acts in':<20} {'default (training / inference)':<34} allowed"
    )
    for pid_, s in described["products"].items():
        modes = ", ".join(s["modes"]) if s["supported"] else "not supported"
        defaults = f"{_value(s['defaults']['training'])} / {_value(s['defaults']['inference'])}"
        allowed = ", ".join(_value(v) for v in s["allowed_values"])
        if s["minimum"] is not None or s["maximum"] is not None:  # as a refusal writes it
            allowed = Range("", s["minimum"], s["maximum"], s["minimum_exclusive"]).text()
        notes = [f"not {v} ({r})" for v, r in s["unsupported_values"].items()]
        notes += [f"{r['value']} not in {r['mode']} ({r['rule']})" for r in s["mode_restrictions"]]
        effective = s["effective_defaults"]
        if effective != s["defaults"]:
            left = " / ".join(
                "absent" if effective[m] is None else _value(effective[m])
                for m in ("training", "inference")
            )
            notes.append(f"when not set: {left} (see the rules)")
        if not s["supported"]:
            allowed = "-"
        elif not allowed and option.type is OptType.BOOL:
            allowed = "true, false"
        elif not allowed and option.type is OptType.PATH:
            allowed = "a path (see the rules)"
        elif not allowed and option.type is OptType.OBJECT:
            allowed = "a config object"
        elif not allowed:  # a value of a form of its own ('CUBE|VECTOR'), said above
            allowed = "the form above" if option.validator is not None else "any"
        lines.append(
            f"  {pid_:<16} {modes:<20} {defaults:<34} {allowed}"
            + (f"; {'; '.join(notes)}" if notes else "")
        )
    if name in FOLDER_OPTIONS:
        lines.append(
            f"  in an answer: paths.{FOLDER_OPTIONS[name]} holds the folder in effect, set or not"
        )
    lines.append("")
    lines.append("  rules:")
    lines += [f"    {rid}  {RULES[rid]}" for rid in described["rules"]]
    if fmt is not None:
        lines += ["", f"  file format: {fmt[0]}", f"    {fmt[1]}", "    example:"]
        lines += [f"      {line}" for line in fmt[2].splitlines()]
    if described["source_text"]:
        lines += [
            "",
            f"  source (NPURunConfig, version {CATALOG_VERSION}):",
            f"    {described['source_text']}",
        ]
    return "\n".join(lines)


def _attachment_format(name: str) -> tuple[str, str, str] | None:
    from ..attachments import FORMATS

    fmt = FORMATS.get(name)
    return None if fmt is None else (fmt.title, fmt.description, fmt.example)


MAX_CELL: Final = 60


def _marked(text: str, room: int, whole: str) -> str:
    """`text` within `room` columns; cut, it ends with a short digest of `whole` (the value in
    canonical JSON), so that two long texts that differ only past the cut do not look alike,
    and two equal values look alike whatever the order of their keys."""
    if columns(text) <= room:
        return text
    mark = hashlib.blake2b(whole.encode("utf-8", "surrogatepass"), digest_size=3).hexdigest()
    return f"{cut_to(text, room - 8)} #{mark}"


def _cell(value: JSON, source: str) -> str:
    """A cell of MAX_CELL columns at most, its source always shown."""
    text = _marked(shown(_value(value)), MAX_CELL - len(source) - 1, fragment("", value))
    return f"{text} {source}"


def render_diff(result: DiffResult, show_all: bool) -> str:
    """The rows that differ, one column per product; the caller's strings escaped as in the
    table format. A product not resolved (unknown, or a config not read) has no column: every
    row would differ from its absent cells and hide its error, said below the table."""
    from .._diff import resolved_columns  # loaded already: the diff was made with it

    resolved = resolved_columns(result.results)
    left_out = [pid for pid in result.results if pid not in resolved]
    table = result.only([p for p in result.products if p in resolved]) if left_out else result
    rows = table.rows if show_all else table.differing
    lines = _diff_table(table, rows)
    if left_out:
        lines.append(shown(f"not resolved, so not in the table: {', '.join(left_out)}"))
    # Why the rows differ: every error and warning, and the notes about the rows shown.
    in_rows = {row.option for row in rows}
    for pid, res in result.results.items():
        for d in res.diagnostics:
            if d.severity.value == "INFO" and d.option not in in_rows:
                continue
            rule = f" [{d.rule}]" if d.rule else ""
            hint = f" (suggestion: {d.suggestion})" if d.suggestion else ""  # as resolve's lines
            lines.append(
                shown(
                    f"{pid}: {d.severity.value} {d.code.value}{rule} {d.option}: {d.message}{hint}"
                )
            )
    return "\n".join(lines)


def _diff_table(result: DiffResult, rows: tuple[DiffRow, ...]) -> list[str]:
    if not result.products:
        return ["(no product resolved)"]
    width = max((columns(shown(r.option)) for r in rows), default=6)
    texts = [
        [
            "(absent)"
            if (cell := row.cells.get(pid)) is None
            else _cell(cell.value, cell.source.value)
            for pid in result.products
        ]
        for row in rows
    ]
    heads = [shown(p) for p in result.products]  # resolved products: short ids
    # Each column as wide as its widest cell: a wide one no longer shifts those after it.
    cols = [
        max([columns(head), *(columns(cells[i]) for cells in texts)])
        for i, head in enumerate(heads)
    ]
    header = f"{'option':<{width}}  " + "  ".join(
        padded(head, w) for head, w in zip(heads, cols, strict=True)
    )
    lines = [header.rstrip()]
    for row, cells in zip(rows, texts, strict=True):
        line = f"{padded(shown(row.option), width)}  " + "  ".join(
            padded(text, w) for text, w in zip(cells, cols, strict=True)
        )
        lines.append(line.rstrip())
    if not rows:
        lines.append("(no differences)")
    return lines
