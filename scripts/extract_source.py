"""Extract each option's row from the vendor reference into the package's data file.

`npu-resolve explain` quotes the source's own wording; the package ships it as JSON so nothing
is read from outside the installed package at run time.

    python scripts/extract_source.py ../shared/spec/NPURunConfig.zh.md
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

OUT = (
    Path(__file__).resolve().parent.parent
    / "resolver"
    / "npu_resolver"
    / "data"
    / "source_900.json"
)
ROW = re.compile(r"^\|\s*([a-z0-9\\_]+)\s*\|\s*(.*?)\s*\|\s*$")


def extract(text: str) -> dict[str, str]:
    rows: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.split("| 参数名 |", 1)[0] if "| 参数名 |" in raw else raw
        match = ROW.match(line.strip())
        if match:
            name = match.group(1).replace("\\_", "_")
            rows[name] = match.group(2).replace("\\", "")
    return rows


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rows = extract(Path(argv[1]).read_text(encoding="utf-8"))
    OUT.write_text(
        json.dumps(rows, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    print(f"{len(rows)} options written to {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
