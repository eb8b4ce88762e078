"""Shared test helpers: the golden cases as data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests._server import grpc_server, grpc_target  # noqa: F401 - shared session fixtures


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-figures",
        action="store_true",
        help="write the reliability suite's figures to benchmarks/reliability.json",
    )


GOLDEN_DIR = Path(__file__).parent / "golden"


def golden_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    for file in sorted(GOLDEN_DIR.glob("*.json")):
        for case in json.loads(file.read_text(encoding="utf-8")):
            case["file"] = file.name
            cases.append(case)
    return cases
