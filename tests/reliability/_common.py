"""What the reliability tests share: the figures callback type and hand-written wire bytes."""

from __future__ import annotations

from collections.abc import Callable

from npu_resolver_server._encode import field

__all__ = ["Figures", "field"]

Figures = Callable[..., str]
"""`figures(name, **values)`: records a test's one line of figures (see conftest.py)."""
