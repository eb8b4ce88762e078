"""`python -m npu_resolver` is `npu-resolve`: for an environment whose scripts folder is not on
PATH (a job's venv run by its interpreter)."""

from ._cli import run

run()
