"""`serve --tracing` is opt-in: without the extra installed it says what to install."""

from __future__ import annotations

import subprocess
import sys

import pytest

from npu_resolver_server._tracing import missing_packages


def test_tracing_without_the_extra_names_the_packages_to_install() -> None:
    missing = missing_packages()
    if not missing:
        pytest.fail("the tracing extra is installed here; this test checks the message without it")
    proc = subprocess.run(
        [sys.executable, "-m", "npu_resolver_server", "--port", "0", "--tracing"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "npu-config-resolver[tracing]" in proc.stderr
    assert all(package in proc.stderr for package in missing)
