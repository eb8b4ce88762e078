"""`python -m npu_resolver._cli` runs the CLI."""

from . import run

run()
