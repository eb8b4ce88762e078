"""Effective folders and files (resolution step 10), spelled from the job's env and workdir.

Parts the resolver cannot know stay as placeholders: <workdir>, <pid>, <sessionid>,
<device_id>, <home>.
"""

from __future__ import annotations

import posixpath
from typing import Final

from ._model import MAX_MEMO_TEXT, keep
from ._options import PATH_ENV_VARS
from ._state import State

WORKDIR = "<workdir>"
PATH_KEYS: Final = (
    "exception_dump_dir",
    "debug_dir",
    "fusion_result_file",
    "op_cache_dir",
    "external_weight_dir",
    "aoe_work_path",
)
"""Every effective path an answer may hold, in the order answers list them."""
FOLDER_OPTIONS: Final = {
    "debug_dir": "debug_dir",
    "op_compiler_cache_dir": "op_cache_dir",
    "work_path": "aoe_work_path",
}
"""Options naming a folder with no fixed default (their rules choose one from the job's
environment and workdir): the folder in effect, set or not, is the answer's paths entry."""


def _here(path: str, workdir: str) -> str:
    """A folder as the job sees it: a relative one is relative to its working directory
    (R-AOE-5 says so of work_path; the job's process resolves every path the same way)."""
    return path if path.startswith("/") else _join(workdir, path)


def _env_folder(state: State, var: str, workdir: str) -> str:
    """The folder a variable names, as the job sees it; "" when it names none."""
    path = state.env_path(var)
    return _here(path, workdir) if path else ""


def _join(*parts: str) -> str:
    """posixpath.join: a later absolute part starts over; cheap for the common two parts."""
    if len(parts) == 2 and not parts[1].startswith("/"):
        head = parts[0]
        return f"{head}{parts[1]}" if head.endswith("/") else f"{head}/{parts[1]}"
    return posixpath.join(*parts)


PATH_OPTIONS: Final = (
    "enable_exception_dump",
    "session_device_id",
    "debug_dir",
    "export_compile_stat",
    "op_compiler_cache_mode",
    "op_compiler_cache_dir",
    "external_weight",
    "aoe_mode",
    "work_path",
)
_MEMO: dict[tuple[object, ...], dict[str, str]] = {}
_MAX_MEMO: Final = 4096


def effective_paths(state: State) -> dict[str, str]:
    """The paths depend on a few values and variables only; the same inputs recur, so the
    answer for each combination is kept (bounded) and copied out."""
    slots, env = state.slots, state.env
    key = (
        state.workdir,
        *map(env.get, PATH_ENV_VARS),
        *[_ABSENT if slot is None else slot.value for slot in map(slots.get, PATH_OPTIONS)],
    )
    try:
        known = _MEMO.get(key)
    except TypeError:  # an unhashable value: compute without keeping it
        return _compute(state)
    if known is None:
        known = _compute(state)
        if _short(key):
            keep(_MEMO, key, known, _MAX_MEMO)
    return dict(known)


_ABSENT: Final = object()


def _short(key: tuple[object, ...]) -> bool:
    """Only combinations of short strings are kept (see MAX_MEMO_TEXT)."""
    return sum(len(part) for part in key if isinstance(part, str)) <= 2 * MAX_MEMO_TEXT


def _compute(state: State) -> dict[str, str]:
    workdir = state.workdir or WORKDIR
    work_path = _env_folder(state, "ASCEND_WORK_PATH", workdir)
    collect = _env_folder(state, "NPU_COLLECT_PATH", workdir)
    paths: dict[str, str] = {}

    dump = state.value("enable_exception_dump")
    if dump == 1:  # R-EXD-3
        paths["exception_dump_dir"] = collect or work_path or _join(workdir, "extra-info")
    elif dump == 2:  # R-EXD-4
        device = state.value("session_device_id")
        device_part = str(device) if isinstance(device, int) else "<device_id>"
        paths["exception_dump_dir"] = work_path or _join(
            workdir, "extra-info", "data-dump", device_part
        )

    debug_dir = state.value("debug_dir")  # R-DBG-1
    paths["debug_dir"] = (
        _here(debug_dir, workdir) if isinstance(debug_dir, str) else (work_path or workdir)
    )

    if state.value("export_compile_stat") in (1, 2):  # R-ECS-1
        paths["fusion_result_file"] = (
            _join(work_path, "FE", "<pid>", "fusion_result.json")
            if work_path
            else _join(workdir, "fusion_result.json")
        )

    if state.value("op_compiler_cache_mode") != "disable":  # R-OCD-1
        cache_dir = state.value("op_compiler_cache_dir")
        cache_path = _env_folder(state, "ASCEND_CACHE_PATH", workdir)
        home = _env_folder(state, "HOME", workdir) or "<home>"
        paths["op_cache_dir"] = (
            _join(_here(cache_dir, workdir), "kernel_cache")
            if isinstance(cache_dir, str)
            else _join(cache_path, "kernel_cache")
            if cache_path
            else _join(home, "atc_data")
        )

    if state.value("external_weight") is True:  # R-EXW-1
        paths["external_weight_dir"] = _join(work_path or workdir, "tmp_weight_<pid>_<sessionid>")

    if "aoe_mode" in state.slots:  # R-AOE-5: AOE acts only when a tuning mode is in force
        work = state.value("work_path")
        paths["aoe_work_path"] = _here(work, workdir) if isinstance(work, str) else workdir
    return paths
