"""Rules that relate options to each other or to the environment, as one ordered table.

Each entry is a rule id of rules.md, the pipeline stage it belongs to, and a small function of
the working state. The table order is the order in which they act within a stage.
"""

from __future__ import annotations

import enum
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ._environment import blank_variable
from ._model import JSON, Code, Source
from ._options import CACHE_ENV_VARS, OUTRANKED_FOLDER_VARS
from ._products import TBE_MAPPING_FILES, UB_FUSION, Family
from ._schema import Mode
from ._state import Slot, State, product_table, table_of
from ._values import show


class Stage(enum.Enum):
    DEFAULTS = "defaults"
    DERIVED = "derived"
    ROUNDING = "rounding"
    CROSS = "cross"
    FINAL = "final"
    """After the rules that read attached files: what depends on a value those can still
    change (R-OCC-3: an op_debug_config file turning the compile cache off)."""


@dataclass(frozen=True, slots=True)
class CrossRule:
    id: str
    stage: Stage
    apply: Callable[[State], None]


MIXED_PRECISION: Final = frozenset(
    {"mixed_float16", "mixed_bfloat16", "allow_mix_precision_fp16", "allow_mix_precision_bf16"}
)
EXPERIMENTAL_RULE: Final = "R-EXP-2"
_ENV_INT: Final = re.compile(r"([+-]?)0*([0-9]{1,18})")
"""A size variable's integer; leading zeros pad it, as they do an option's (R-OCC-4)."""


# ------------------------------------------------------------------------------- defaults
def precision_default(state: State) -> None:
    """R-PREC-1: with neither set, at most one of the two carries the default."""
    v2, pm = state.slots.get("precision_mode_v2"), state.slots.get("precision_mode")
    if pm is not None and pm.is_set and v2 is not None and not v2.is_set:
        del state.slots["precision_mode_v2"]
    if v2 is not None and pm is not None and not pm.is_set:
        del state.slots["precision_mode"]
    if v2 is not None or (pm is not None and pm.is_set):
        state.undocumented.pop("precision_mode", None)
    if pm is not None and pm.is_set:
        state.undocumented.pop("precision_mode_v2", None)
    for name in ("precision_mode_v2", "precision_mode"):
        if name in state.undocumented:
            state.undocumented[name] = "R-PREC-1"


# ------------------------------------------------------------------------------- derived
def collect_path_forces_dump(state: State) -> None:
    """R-EXD-2: NPU_COLLECT_PATH makes the exception dump 1 whatever was asked."""
    path = state.env_path("NPU_COLLECT_PATH")
    if path:
        state.force(
            "enable_exception_dump",
            1,
            "R-EXD-2",
            f"NPU_COLLECT_PATH={path}",
            "enable_exception_dump is 1 because NPU_COLLECT_PATH is set; "
            "unset NPU_COLLECT_PATH to choose another dump mode.",
        )


def _origin(state: State, name: str) -> str:
    """Where the value a rule replaces was written, for the remedy in its message."""
    slot = state.slots.get(name)
    if slot is not None and slot.source in (Source.POLICY, Source.POLICY_LOCKED):
        return "the policy"
    return "the config"


def inference_small_channel(state: State) -> None:
    """R-ESC-1: in online inference enable_small_channel is not configurable and is 1."""
    name = "enable_small_channel"
    slot = state.slots.get(name)
    if state.mode is not Mode.INFERENCE or slot is None:
        return
    detail = "graph_run_mode=0 (online inference)"
    if slot.value != 1:
        message = (
            "enable_small_channel is always 1 in online inference (graph_run_mode 0); "
            f"remove it from {_origin(state, name)}."
        )
        state.force(name, 1, "R-ESC-1", detail, message)
        return
    # Already 1: the rule decides it (DERIVED; the form the caller wrote, such as "1", stays
    # in requested), but nothing was overridden, so no FORCED: a config that says what the
    # job runs with (the python format's output, pasted back) draws no warning.
    state.slots[name] = slot.changed(
        source=Source.DERIVED,
        rules=slot.with_rule("R-ESC-1").rules,
        detail=detail,
        env_var="",
        all_products=False,
    )


def small_channel_in_training(state: State) -> None:
    """R-ESC-1: the source advises against enabling enable_small_channel in training."""
    name = "enable_small_channel"
    if state.mode is Mode.TRAINING and state.value(name) == 1 and state.is_set(name):
        state.emit(
            Code.ADVICE,
            name,
            "R-ESC-1",
            "enable_small_channel 1 is not recommended in training (it helps only ResNet50, "
            "ResNet101 and ResNet152 and may slow other networks); set 0 unless measured.",
        )


def debug_level_disables_cache(state: State) -> None:
    """R-OCC-2: op_debug_level other than 0 turns the operator compile cache off."""
    level = state.value("op_debug_level")
    if isinstance(level, int) and level != 0:
        state.force(
            "op_compiler_cache_mode",
            "disable",
            "R-OCC-2",
            f"op_debug_level={level}",
            f"op_compiler_cache_mode is disable because op_debug_level is {level}; "
            "set op_debug_level 0 to use the cache.",
        )


# ------------------------------------------------------------------------------- rounding
def taken_as(state: State, name: str, value: JSON) -> JSON:
    """The value the product takes `value` of option `name` as, once rounded (R-HCT-3): a
    caller asking 544 on atlas-training asks what a lock of 600 gives there."""
    if name == "hccl_timeout" and state.family is Family.LEGACY and type(value) is int:
        return max(68, value // 68 * 68)
    return value


def _product_table(slot: Slot, pid: str) -> str:
    """The table a policy value for `pid` alone goes in, beside the one `slot` came from: that
    table itself when it is already the product's, else the product's own in the same profile
    and of the same kind (profiles.gold.locked -> profiles.gold.products.atlas-training.locked)."""
    table = table_of(slot.detail)
    return product_table(table, pid) if slot.all_products else table


def round_hccl_timeout(state: State) -> None:
    """R-HCT-3: on the legacy family the timeout is floor(v / 68) * 68, at least 68."""
    slot = state.slots.get("hccl_timeout")
    if slot is None or not isinstance(slot.value, int):
        return
    value = slot.value
    rounded = taken_as(state, "hccl_timeout", value)
    if rounded != value:
        state.unrounded["hccl_timeout"] = value
        state.slots["hccl_timeout"] = slot.changed(
            value=rounded, requested=slot.asked_unless(rounded), rules=(*slot.rules, "R-HCT-3")
        )
        how = "rounded down to a multiple of 68"
        if rounded > value:
            how = "values below 68 are taken as 68"
        # Whoever wrote the value is told where to write the one that takes effect.
        if slot.source in (Source.POLICY, Source.POLICY_LOCKED):
            who = f"the policy's hccl_timeout {value} ({slot.detail})"
            fix = f"the policy can say {rounded} in [{_product_table(slot, state.pid)}]"
        elif slot.source is Source.ENV:
            who = f"hccl_timeout {value} from {slot.env_var}"
            fix = f"set {slot.env_var}={rounded} to say so"
        else:
            who, fix = f"hccl_timeout {value}", f"set {rounded} to say so"
        state.emit(
            Code.ROUNDED,
            "hccl_timeout",
            "R-HCT-3",
            f"{who} takes effect as {rounded} on {state.pid} ({how}); {fix}.",
        )


# ------------------------------------------------------------------------------- cross
def precision_conflict(state: State) -> None:
    """R-PREC-1: precision_mode and precision_mode_v2 may not both be set."""
    v2, pm = state.slots.get("precision_mode_v2"), state.slots.get("precision_mode")
    if v2 is None or pm is None or not (v2.is_set and pm.is_set):
        return
    if v2.source is Source.POLICY and pm.source is not Source.POLICY:
        state.drop(
            "precision_mode_v2",
            Code.DROPPED_SUPERSEDED,
            "R-PREC-1",
            _superseded(state, "precision_mode_v2", v2, "precision_mode"),
        )
    elif pm.source is Source.POLICY and v2.source is not Source.POLICY:
        state.drop(
            "precision_mode",
            Code.DROPPED_SUPERSEDED,
            "R-PREC-1",
            _superseded(state, "precision_mode", pm, "precision_mode_v2"),
        )
    else:
        both = (
            f"precision_mode {show(pm.value)} and precision_mode_v2 {show(v2.value)} may not "
            "both be set"
        )
        pm_locked = pm.source is Source.POLICY_LOCKED
        v2_locked = v2.source is Source.POLICY_LOCKED
        if pm_locked and not v2_locked:  # the caller cannot remove a locked option
            state.conflict(
                "precision_mode_v2",
                "R-PREC-1",
                f"{both}; the policy locks precision_mode, so remove precision_mode_v2.",
            )
        elif v2_locked and not pm_locked:
            state.conflict(
                "precision_mode",
                "R-PREC-1",
                f"{both}; the policy locks precision_mode_v2, so remove precision_mode.",
            )
        else:
            sides = _policy_sides(state, ("precision_mode", "precision_mode_v2"), always_drops=True)
            keep = "" if sides and state.strict else "; keep only precision_mode_v2"
            state.conflict("precision_mode", "R-PREC-1", f"{both}{keep}.{sides}")


def clash_stands(
    state: State, names: tuple[str, ...], rule: str, clashes: Callable[[State], bool]
) -> bool:
    """Whether `names` conflict (`clashes`) once a policy default among them gave way."""
    return clashes(state) and not _policy_default_gives_way(state, names, rule, clashes)


def _policy_default_gives_way(
    state: State, names: tuple[str, ...], rule: str, clashes: Callable[[State], bool]
) -> bool:
    """Step 5 ranks what the job sets (and the policy's locks) above a policy default. When a
    conflict between `names` is made by one that only a policy default set, that default gives
    way to the documented one, if that ends the conflict (`clashes` judges the state as it is
    then): a platform's default must not fail a job that set the other option. True when one
    gave way; the conflict stands when each side is a policy default, or none of them is."""
    for name in names:
        slot = state.slots.get(name)
        if slot is None or slot.source is not Source.POLICY:
            continue
        setters = [
            other
            for other in names
            if other in state.gave_way
            or (
                (set_by := state.slots.get(other)) is not None
                and set_by.is_set
                and set_by.source is not Source.POLICY
            )
        ]
        if not setters:
            continue
        documented = state.defaults.get(name)
        if documented is None:
            del state.slots[name]
        else:
            state.slots[name] = documented.with_rule(rule)
        if clashes(state):
            state.slots[name] = slot
            continue
        other = setters[0]
        who = (
            "the job's settings brought back (the policy's default for it gave way)"
            if other in state.gave_way
            else _who_sets(state.slots[other])
        )
        state.gave_way.add(name)
        then = (
            f"the documented default {show(documented.value)} applies"
            if documented is not None
            else "it is left out"
        )
        state.emit(  # said even of an every-product entry: it acted, and now it does not
            Code.DROPPED_SUPERSEDED,
            name,
            rule,
            f"the policy's default {name} {show(slot.value)} ({slot.detail}) cannot be combined "
            f"with {other} {show(state.value(other))}, which {who}; {then}."
            + state.strict_remedy(),
        )
        return True
    return False


def _who_sets(slot: Slot) -> str:
    if slot.source is Source.POLICY_LOCKED:
        return "the policy locks"
    if slot.source is Source.ENV:
        return f"the job sets through {slot.env_var}"
    return "the job sets"


def _superseded(state: State, name: str, slot: Slot, by: str) -> str:
    """A policy default given way to `by`, set by the job or locked by the policy itself (an
    every-product default beside one product's lock): said as the give-way of R-IPL-2 is."""
    return (
        f"{name} {show(slot.value)} from the policy ({slot.detail}) is dropped because "
        f"{_who_sets(state.slots[by])} {by}."
    )


def _policy_sides(state: State, names: tuple[str, ...], *, always_drops: bool = False) -> str:
    """A conflict the policy's defaults make (on their own, or with the documented default of
    the other side) reaches jobs that never wrote either option: said, with where the job can
    settle it. Empty when the job or a lock set a side (its message says what to remove).
    `always_drops`: whatever the job sets, the policy's other default is dropped (R-PREC-1:
    the two may never both be set), an error under strict, where only the policy can help."""
    slots = [(name, state.slots.get(name)) for name in names]
    sides = [
        (name, slot) for name, slot in slots if slot is not None and slot.source is Source.POLICY
    ]
    if not sides or any(
        slot is not None and slot.is_set and slot.source is not Source.POLICY for _, slot in slots
    ):
        return ""
    said = " and ".join(f"{name} {show(slot.value)} ({slot.detail})" for name, slot in sides)
    if always_drops and state.strict:
        return (
            f" The policy's defaults set {said}, not the job; under strict, setting either "
            "does not settle this (the policy's other default is dropped, an error too): name "
            "a profile without these defaults, or have the policy fixed."
        )
    which = "it" if len(sides) == 1 else "either"
    return (
        f" The policy's defaults set {said}, not the job: a value the job sets for {which} "
        "takes the place of the policy's default."
    )


def _needs(
    state: State, name: str, rule: str, message: str, ok: bool, *, reads: tuple[str, ...]
) -> None:
    """Drop `name` when it has no effect, judged from the options in `reads`. When one of them
    was refused, the caller set it and already has an error: nothing is judged from its
    absence (a rejected local_rank_id does not make local_device_list 'lack' it)."""
    if name in state.slots and not ok and state.refused.isdisjoint(reads):
        state.drop(name, Code.DROPPED_NO_EFFECT, rule, message)


def _loops_with_mixed_compute(state: State) -> bool:
    loops = state.value("iterations_per_loop")
    return state.value("mix_compile_mode") is True and isinstance(loops, int) and loops != 1


def loop_with_mixed_compute(state: State) -> None:
    """R-IPL-2: with mix_compile_mode True, iterations_per_loop must be 1."""
    names = ("iterations_per_loop", "mix_compile_mode")
    if clash_stands(state, names, "R-IPL-2", _loops_with_mixed_compute):
        state.conflict(
            "iterations_per_loop",
            "R-IPL-2",
            f"iterations_per_loop {state.value('iterations_per_loop')} is not allowed with "
            "mix_compile_mode true; set iterations_per_loop 1 or turn mix_compile_mode off."
            + _policy_sides(state, names),
        )


def _loops_without_getnext(state: State) -> bool:
    loops = state.value("iterations_per_loop")
    return state.value("enable_data_pre_proc") is False and isinstance(loops, int) and loops > 1


def loop_sinking_needs_getnext(state: State) -> None:
    """R-DEP-1: "GetNext算子下沉是使能训练迭代循环下沉的必要条件": iterations_per_loop above 1
    sinks the training loop, which GetNext sinking (enable_data_pre_proc True) must enable."""
    if state.mode is not Mode.TRAINING:  # the source speaks of sinking the training loop
        return
    names = ("enable_data_pre_proc", "iterations_per_loop")
    if clash_stands(state, names, "R-DEP-1", _loops_without_getnext):
        state.conflict(
            "enable_data_pre_proc",
            "R-DEP-1",
            "enable_data_pre_proc false keeps GetNext on the host, but iterations_per_loop "
            f"{state.value('iterations_per_loop')} sinks the training loop to the NPU, which "
            "needs GetNext sunk too; set enable_data_pre_proc true (its default) or "
            "iterations_per_loop 1." + _policy_sides(state, names),
        )


def _host_without_mixed_compute(state: State) -> bool:
    return (
        state.value("variable_placement") == "Host"
        and state.value("mix_compile_mode") is not True
        and "mix_compile_mode" not in state.refused  # the caller set it and has its error
    )


def host_placement_needs_mixed_compute(state: State) -> None:
    """R-VPL-2: variable_placement Host requires mix_compile_mode True."""
    names = ("variable_placement", "mix_compile_mode")
    if clash_stands(state, names, "R-VPL-2", _host_without_mixed_compute):
        state.conflict(
            "variable_placement",
            "R-VPL-2",
            "variable_placement 'Host' needs mix_compile_mode true; "
            "set mix_compile_mode true or place variables on the Device."
            + _policy_sides(state, names),
        )


def op_precision_supersedes_implmode(state: State) -> None:
    """R-OPM-1: op_precision_mode wins over op_select_implmode and optypelist_for_implmode.
    Run last (FINAL, after the attachment rules): an op_precision_mode its file's rule refuses
    (R-OPM-2, R-OPM-3) is in force nowhere, and supersedes nothing."""
    setter = state.slots.get("op_precision_mode")
    if setter is None:
        return
    # The job's own, or the policy's (it has no variable and no default): said with its table.
    by_policy = setter.source in (Source.POLICY, Source.POLICY_LOCKED)
    who = f"set by the policy ({setter.detail})" if by_policy else "set"
    for name in ("op_select_implmode", "optypelist_for_implmode"):
        if name in state.slots:
            state.drop(
                name,
                Code.DROPPED_SUPERSEDED,
                "R-OPM-1",
                f"{name} {show(state.value(name))} is dropped because op_precision_mode is {who} "
                "and only op_precision_mode takes effect; remove it.",
            )


def optypelist_needs_implmode(state: State) -> None:
    """R-DEP-5: optypelist_for_implmode needs op_select_implmode."""
    if "optypelist_for_implmode" not in state.slots:
        return
    _needs(
        state,
        "optypelist_for_implmode",
        "R-DEP-5",
        "optypelist_for_implmode has no effect without op_select_implmode; "
        "set op_select_implmode or remove it.",
        "op_select_implmode" in state.slots,
        reads=("op_select_implmode",),
    )


def execute_mode_needs_dynamic_input(state: State) -> None:
    """R-DEP-7: dynamic_graph_execute_mode only acts with dynamic_input True, and the shape
    ranges are read only in its mode ("该模式下获取dynamic_inputs_shape_range中配置的shape范围
    进行编译"): without dynamic input they have no effect either. With dynamic input and no
    mode, the source asks for one ("对于动态输入场景，需要通过该参数设置执行模式")."""
    dynamic = state.value("dynamic_input") is True
    _needs(
        state,
        "dynamic_graph_execute_mode",
        "R-DEP-7",
        "dynamic_graph_execute_mode has no effect unless dynamic_input is true; "
        "set dynamic_input true or remove it.",
        dynamic,
        reads=("dynamic_input",),
    )
    _needs(
        state,
        "dynamic_inputs_shape_range",
        "R-DEP-7",
        "dynamic_inputs_shape_range has no effect unless dynamic_input is true (the ranges are "
        "read only in dynamic_graph_execute_mode 'dynamic_execute', which needs it); set "
        "dynamic_input true or remove it.",
        dynamic,
        reads=("dynamic_input",),
    )
    mode = "dynamic_graph_execute_mode"
    given = mode in state.slots or mode in state.refused  # a refused mode has its error
    if dynamic and state.is_set("dynamic_input") and not given:
        state.emit(
            Code.ADVICE,
            mode,
            "R-DEP-7",
            "dynamic_input true needs an execution mode: the source asks for "
            "dynamic_graph_execute_mode with dynamic input, and the shape ranges are read "
            "in its mode; set dynamic_graph_execute_mode 'dynamic_execute'.",
            "dynamic_execute",
        )


def aoe_options_need_aoe_mode(state: State) -> None:
    """R-AOE-5, R-AOE-6: work_path is AOE's working folder ("AOE工具调优工作目录") and
    aoe_config_file picks the operators "通过AOE工具进行调优时": with no tuning mode in force
    (neither aoe_mode nor AOE_MODE), AOE does not run and neither has an effect. Tuning is each
    job's choice: a policy's folder or file for the jobs that tune leaves the others quietly
    (warned of, it would be on nearly every job; under strict, fail them)."""
    tuning = "aoe_mode" in state.slots
    for name, rule in (("work_path", "R-AOE-5"), ("aoe_config_file", "R-AOE-6")):
        slot = state.slots.get(name)
        if slot is None:
            continue
        from_policy = slot.source in (Source.POLICY, Source.POLICY_LOCKED)
        if not tuning and from_policy and name not in state.given:  # the caller set none
            del state.slots[name]
            continue
        _needs(
            state,
            name,
            rule,
            f"{name} has no effect without a tuning mode: AOE runs only when aoe_mode (or the "
            "job's AOE_MODE) names one; set aoe_mode or remove it.",
            tuning,
            reads=("aoe_mode",),
        )


def rank_and_device_list_together(state: State) -> None:
    """R-LRI-1: local_rank_id and local_device_list go together."""
    for name, other in (
        ("local_rank_id", "local_device_list"),
        ("local_device_list", "local_rank_id"),
    ):
        if name not in state.slots:
            continue
        _needs(
            state,
            name,
            "R-LRI-1",
            f"{name} has no effect without {other}; set both or neither.",
            other in state.slots,
            reads=(other,),
        )


def _mixed_precision_off(state: State) -> bool:
    """Known to be off: a precision option has a value and none is mixed. Where the source
    gives neither option a default (atlas-300i-duo in training), nothing is known."""
    v2, v1 = state.value("precision_mode_v2"), state.value("precision_mode")
    if v2 is None and v1 is None:
        return False
    return v2 not in MIXED_PRECISION and v1 not in MIXED_PRECISION


def mixlist_needs_mixed_precision(state: State) -> None:
    """R-MML-1: modify_mixlist only acts when mixed precision is on."""
    if "modify_mixlist" not in state.slots or not _mixed_precision_off(state):
        return
    # Only the mixed modes this product accepts (R-PREC-2: no bf16 on the legacy family).
    bf16 = state.family is not Family.LEGACY
    modes = (
        "precision_mode_v2 mixed_float16 or mixed_bfloat16 (or precision_mode "
        "allow_mix_precision_fp16 or _bf16)"
        if bf16
        else "precision_mode_v2 mixed_float16 (or precision_mode allow_mix_precision_fp16)"
    )
    _needs(
        state,
        "modify_mixlist",
        "R-MML-1",
        f"modify_mixlist has no effect because mixed precision is off; set {modes}, or remove it.",
        False,
        reads=_PRECISION,
    )


def customize_dtypes_needs_reduced_precision(state: State) -> None:
    """R-CDT-1: customize_dtypes does nothing when the graph keeps its original precision."""
    if "customize_dtypes" not in state.slots:
        return
    keeps = (
        state.value("precision_mode_v2") == "origin"
        or state.value("precision_mode") == "must_keep_origin_dtype"
    )
    _needs(
        state,
        "customize_dtypes",
        "R-CDT-1",
        "customize_dtypes has no effect while precision_mode_v2 is 'origin' (or precision_mode "
        "'must_keep_origin_dtype'); choose another precision mode or remove it.",
        not keeps,
        reads=_PRECISION,
    )


_PRECISION: Final = ("precision_mode_v2", "precision_mode")
_DYNAMIC_SHAPE: Final = ("compile_dynamic_mode", "dynamic_input")


def _dynamic(state: State) -> bool:
    return state.value("compile_dynamic_mode") is True


def dynamic_shape(state: State) -> str | None:
    """The option that makes the graph dynamic-shape, if the config says so: compile_dynamic_mode
    (every input shape generalized to -1) or dynamic_input (the inputs are dynamic). Without
    either the graph may be static, as the static-shape-only options assume."""
    for name in _DYNAMIC_SHAPE:
        if state.value(name) is True:
            return name
    return None


def fusion_size_static_only(state: State) -> None:
    """R-IFS-2: input_fusion_size acts on static-shape graphs only."""
    if "input_fusion_size" not in state.slots:
        return  # (each rule that drops an option asks this first: it is mostly not set)
    dynamic = dynamic_shape(state)
    if dynamic is None:
        return
    _needs(
        state,
        "input_fusion_size",
        "R-IFS-2",
        f"input_fusion_size has no effect with {dynamic} true (static shapes only); "
        f"remove it or turn {dynamic} off.",
        False,
        reads=_DYNAMIC_SHAPE,
    )


def generalization_needs_jit(state: State) -> None:
    """R-SGM-1: shape_generalization_mode acts only with jit_compile 'true', static shapes."""
    if "shape_generalization_mode" not in state.slots:
        return
    if not state.refused.isdisjoint(("jit_compile", "compile_dynamic_mode")):
        return  # judged from a value the caller has an error about: see _needs
    if state.value("jit_compile") != "true":
        message = (
            "shape_generalization_mode only acts with jit_compile 'true'; "
            "set jit_compile 'true' or remove it."
        )
    elif _dynamic(state):
        message = (
            "shape_generalization_mode has no effect with compile_dynamic_mode true "
            "(every input shape is already -1); remove one of them."
        )
    else:
        return
    state.drop("shape_generalization_mode", Code.DROPPED_NO_EFFECT, "R-SGM-1", message)


def multistream_static_only(state: State) -> None:
    """R-AMP-1: 'cv' is static-shape only and excludes ENABLE_DYNAMIC_SHAPE_MULTI_STREAM=1."""
    if "auto_multistream_parallel_mode" not in state.slots:
        return
    dynamic = dynamic_shape(state)
    if dynamic is not None:
        state.drop(
            "auto_multistream_parallel_mode",
            Code.DROPPED_NO_EFFECT,
            "R-AMP-1",
            f"auto_multistream_parallel_mode has no effect with {dynamic} true "
            "(static shapes only); remove one of them.",
        )
    elif state.env.get("ENABLE_DYNAMIC_SHAPE_MULTI_STREAM", "").strip() == "1":
        if state.slots["auto_multistream_parallel_mode"].source is Source.POLICY:
            # The job's variable ranks above a policy default (step 5): the default yields.
            del state.slots["auto_multistream_parallel_mode"]
            state.emit(  # said even of an every-product entry: the product has the option
                Code.DROPPED_SUPERSEDED,
                "auto_multistream_parallel_mode",
                "R-AMP-1",
                "the policy's default auto_multistream_parallel_mode 'cv' cannot be combined "
                "with ENABLE_DYNAMIC_SHAPE_MULTI_STREAM=1, which the job sets; it is left out."
                + state.strict_remedy(),
            )
            return
        state.conflict(
            "auto_multistream_parallel_mode",
            "R-AMP-1",
            "auto_multistream_parallel_mode 'cv' cannot be combined with "
            "ENABLE_DYNAMIC_SHAPE_MULTI_STREAM=1; unset the variable or remove the option.",
        )


def aicore_num_with_prebuilt(state: State) -> None:
    """R-ACN-2: aicore_num has no effect with jit_compile 'false' on a static-shape graph."""
    if "aicore_num" not in state.slots:
        return
    _needs(
        state,
        "aicore_num",
        "R-ACN-2",
        "aicore_num has no effect with jit_compile 'false' on a static-shape graph "
        "(prebuilt operator binaries are reused; neither compile_dynamic_mode nor dynamic_input "
        "says the graph is dynamic); set jit_compile 'auto' or 'true', or remove it.",
        not (state.value("jit_compile") == "false" and dynamic_shape(state) is None),
        reads=("jit_compile", *_DYNAMIC_SHAPE),
    )


def stream_sync_above_hccl(state: State) -> None:
    """R-SST-2: in a cluster stream_sync_timeout must exceed the HCCL timeout."""
    slot = state.slots.get("stream_sync_timeout")
    if slot is None or not slot.is_set or not isinstance(slot.value, int) or slot.value <= 0:
        return
    sst, hccl = slot.value, state.value("hccl_timeout")
    if not isinstance(hccl, int):
        return
    if hccl == 0:
        state.emit(
            Code.ADVICE,
            "stream_sync_timeout",
            "R-SST-2",
            f"stream_sync_timeout {sst} ms cannot exceed the HCCL timeout: hccl_timeout 0 never "
            "times out; in a cluster job give hccl_timeout a finite value or leave "
            "stream_sync_timeout -1.",
        )
        return
    # The source compares with the configured value (hccl_timeout or HCCL_EXEC_TIMEOUT, as it
    # took effect before R-HCT-3 rounded it); the larger of the two must be exceeded.
    configured = state.unrounded.get("hccl_timeout", hccl)
    seconds = max(hccl, configured)
    if sst <= seconds * 1000:
        # Said as compared, so that it does not contradict the hccl_timeout the answer shows.
        if configured == hccl:
            timeout = f"the HCCL timeout, {hccl} s"
        elif seconds == configured:
            timeout = f"the configured HCCL timeout, {configured} s ({hccl} s after rounding)"
        else:  # rounded up to the least the runtime takes
            timeout = f"the HCCL timeout, {hccl} s after rounding ({configured} s configured)"
        state.emit(
            Code.ADVICE,
            "stream_sync_timeout",
            "R-SST-2",
            f"stream_sync_timeout {sst} ms is not above {timeout}; "
            f"in a cluster job set it above {seconds * 1000} ms.",
        )


def debug_level_advice(state: State) -> None:
    """R-DEP-3: op_debug_level 1, 2 and 4 produce no TBE mapping files on a product that has
    none (atlas-350), and 4 no UB fusion compute description file on one without UB fusion;
    and the source advises against 2 (ccec -O0 -g, larger kernels) on a dynamic-shape graph,
    as it does for the ccec options of op_debug_config (R-ODC-1)."""
    level = state.value("op_debug_level")
    if level not in (1, 2, 4) or not state.is_set("op_debug_level"):
        return
    missing = [] if state.pid in TBE_MAPPING_FILES else ["TBE instruction mapping files"]
    if level == 4 and state.pid not in UB_FUSION:
        missing.append("UB fusion compute description file ({$kernel_name}_compute.json)")
    if missing:
        state.emit(
            Code.ADVICE,
            "op_debug_level",
            "R-DEP-3",
            f"op_debug_level {level} produces no {' and no '.join(missing)} on {state.pid}; "
            "do not rely on them for AI Core Error analysis there.",
        )
    dynamic = dynamic_shape(state) if level == 2 else None
    if dynamic is not None:
        state.emit(
            Code.ADVICE,
            "op_debug_level",
            "R-DEP-3",
            f"op_debug_level 2 compiles operators with ccec -O0 -g, which enlarges their kernels; "
            f"with {dynamic} true (dynamic shape) a kernel may grow too large to compile, and "
            "the source advises against 2 there: use 1 unless you need the ccec debug build.",
        )


def _set_and_flagged(state: State, flag: str) -> list[str]:
    """The options a caller, the environment or the policy set whose catalog entry has `flag`
    (experimental, deprecated), in catalog order."""
    views = state.view
    return [
        name for name in state.touched if views[name].flagged and getattr(views[name].option, flag)
    ]


def experimental_warning(state: State) -> None:
    """R-EXP-2: experimental options may change and are not for commercial products. One
    warning for each one a caller sets, whether or not it acts here: also for one the caller's
    config held that was dropped or refused since."""
    for name in _set_and_flagged(state, "experimental"):
        if state.is_set(name) or name in state.given or name in state.refused:
            state.emit(
                Code.EXPERIMENTAL,
                name,
                EXPERIMENTAL_RULE,
                f"{name} is experimental: it may change in later versions and is not for "
                "commercial products.",
            )


def deprecated_warning(state: State) -> None:
    """The 'to be removed' options still apply, with a warning when a caller sets them. Run
    last (FINAL, after the attachment rules): one an attachment's rule refuses (op_debug_level
    2 beside an op_debug_config of oom, R-DEP-3) does not still apply."""
    for name in _set_and_flagged(state, "deprecated"):
        if state.is_set(name):
            state.emit(
                Code.DEPRECATED,
                name,
                state.view[name].option.rule,
                f"{name} will be removed in a later version; it still applies now, plan to "
                "stop using it.",
            )


def cache_off_drops_dir(state: State) -> None:
    """R-OCD-1: with the operator compile cache off its folder has no effect ("启动算子编译缓存
    功能时，可通过op_compiler_cache_dir配置…"), whatever turned it off."""
    if state.value("op_compiler_cache_mode") != "disable":
        return
    slot = state.slots["op_compiler_cache_mode"]
    why = f" (turned off by {slot.detail})" if slot.source is Source.DERIVED else ""
    state.drop(
        "op_compiler_cache_dir",
        Code.DROPPED_NO_EFFECT,
        "R-OCD-1",
        f"op_compiler_cache_dir has no effect while op_compiler_cache_mode is 'disable'{why}: "
        "there is no cache to keep; remove it or turn the cache on.",
    )


def cache_dir_beats_cache_path(state: State) -> None:
    """R-OCD-1: op_compiler_cache_dir > $ASCEND_CACHE_PATH/kernel_cache > $HOME/atc_data. With
    the folder option in force the variable does nothing: said, as for an option's own
    variable, so that a job does not look for its cache where the variable points."""
    _folder_beats_variable(
        state,
        "ASCEND_CACHE_PATH",
        "the cache is in its kernel_cache folder; remove one of them to avoid confusion.",
    )


def debug_dir_beats_work_path(state: State) -> None:
    """R-DBG-1: 「配置参数“debug_dir” > 环境变量ASCEND_WORK_PATH > 默认存储路径」. The variable
    still places the other files it names (dumps, the fusion result): no removal is advised."""
    _folder_beats_variable(
        state,
        "ASCEND_WORK_PATH",
        "the operator compile's debug files go there; the variable still places the other "
        "files it names.",
    )


def _folder_beats_variable(state: State, var: str, then: str) -> None:
    """A folder option in force beside the variable it outranks (OUTRANKED_FOLDER_VARS): said
    (ENV_OVERRIDDEN, as for an option's own variable), unless both name the same folder.
    `then`: what follows."""
    option, rule, _ = OUTRANKED_FOLDER_VARS[var]
    slot = state.slots.get(option)
    path = state.env_path(var)
    if slot is None or not path:
        return
    if isinstance(slot.value, str) and posixpath.normpath(slot.value) == posixpath.normpath(path):
        return
    winner = {
        Source.POLICY: "the policy's default",
        Source.POLICY_LOCKED: "the policy's locked",
    }.get(slot.source, "the explicit")
    state.emit(
        Code.ENV_OVERRIDDEN,
        option,
        rule,
        f"{var} is set but {winner} {option} {show(slot.value)} wins: {then}",
    )


def cache_size_variables(state: State) -> None:
    """R-OCC-4: the cache size variables, read by the runtime, checked here; only while the
    operator compile cache is on (they mean nothing once it is off)."""
    if CACHE_ENV_VARS.keys().isdisjoint(state.env):
        return
    if state.value("op_compiler_cache_mode") in (None, "disable"):
        return
    for var, (least, greatest, expected, default) in CACHE_ENV_VARS.items():
        text = state.env.get(var)
        if text is None:
            continue
        stripped = text.strip()
        if not stripped:  # `export VAR=`: names no size, as a blank variable elsewhere
            blank_variable(
                state, var, "R-OCC-4", f"op_cache.ini or the default ({default}) applies"
            )
            continue
        digits = _ENV_INT.fullmatch(stripped)
        number = int(digits[1] + digits[2]) if digits else None
        if number is None or number < least or (greatest is not None and number > greatest):
            state.emit(
                Code.INVALID_VALUE,
                f"env.{var}",
                "R-OCC-4",
                f"environment variable {var}={show(text)} is not {expected}; fix or unset it.",
            )


CROSS_RULES: Final[tuple[CrossRule, ...]] = (
    CrossRule("R-PREC-1", Stage.DEFAULTS, precision_default),
    CrossRule("R-EXD-2", Stage.DERIVED, collect_path_forces_dump),
    CrossRule("R-ESC-1", Stage.DERIVED, inference_small_channel),
    CrossRule("R-OCC-2", Stage.DERIVED, debug_level_disables_cache),
    CrossRule("R-HCT-3", Stage.ROUNDING, round_hccl_timeout),
    CrossRule("R-PREC-1", Stage.CROSS, precision_conflict),
    CrossRule("R-IPL-2", Stage.CROSS, loop_with_mixed_compute),
    CrossRule("R-VPL-2", Stage.CROSS, host_placement_needs_mixed_compute),
    CrossRule("R-DEP-1", Stage.CROSS, loop_sinking_needs_getnext),
    CrossRule("R-DEP-7", Stage.CROSS, execute_mode_needs_dynamic_input),
    CrossRule("R-LRI-1", Stage.CROSS, rank_and_device_list_together),
    CrossRule("R-AOE-5", Stage.CROSS, aoe_options_need_aoe_mode),
    CrossRule("R-MML-1", Stage.CROSS, mixlist_needs_mixed_precision),
    CrossRule("R-CDT-1", Stage.CROSS, customize_dtypes_needs_reduced_precision),
    CrossRule("R-IFS-2", Stage.CROSS, fusion_size_static_only),
    CrossRule("R-SGM-1", Stage.CROSS, generalization_needs_jit),
    CrossRule("R-AMP-1", Stage.CROSS, multistream_static_only),
    CrossRule("R-ACN-2", Stage.CROSS, aicore_num_with_prebuilt),
    CrossRule("R-SST-2", Stage.CROSS, stream_sync_above_hccl),
    CrossRule("R-ESC-1", Stage.CROSS, small_channel_in_training),
    CrossRule("R-DEP-3", Stage.CROSS, debug_level_advice),
    CrossRule("R-EXP-2", Stage.CROSS, experimental_warning),
    # After the attachment rules: an option an attachment's rule refuses is in force nowhere.
    CrossRule("R-OPM-1", Stage.FINAL, op_precision_supersedes_implmode),
    CrossRule("R-DEP-5", Stage.FINAL, optypelist_needs_implmode),  # after R-OPM-1's drops
    CrossRule("R-DEP-1", Stage.FINAL, deprecated_warning),
    CrossRule("R-OCD-1", Stage.FINAL, cache_off_drops_dir),
    CrossRule("R-OCD-1", Stage.FINAL, cache_dir_beats_cache_path),
    CrossRule("R-DBG-1", Stage.FINAL, debug_dir_beats_work_path),
    CrossRule("R-OCC-4", Stage.FINAL, cache_size_variables),
)

CROSS_RULE_IDS: Final = frozenset(r.id for r in CROSS_RULES)
