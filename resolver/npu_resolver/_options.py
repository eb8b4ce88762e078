"""The option table: one entry per NPURunConfig option of the source (version 900).

This is the one place that says what each option is. Adding an option means adding one entry;
adding a product means adding it to `_products.PRODUCTS`, whose families and capabilities are
the gates here, and naming it only where the source gives it a default of its own.
Where the source is silent, the entry says nothing (no default, no range).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from . import _grammars as fmt
from ._products import (
    AICORE_NUM,
    AOE_SUBGRAPH_TUNING,
    AOE_TUNING,
    HIFLOAT8,
    LEGACY_FAMILY,
    NEW_FAMILY,
)
from ._schema import Default, Mode, Option, OptType, Range, Section, ValueGate

INT32_MAX: Final = 2147483647
TRAINING, INFERENCE = Mode.TRAINING, Mode.INFERENCE

S = Section
T = OptType

# fmt: off
OPTIONS: Final[tuple[Option, ...]] = (
    # ---------------------------------------------------------------- basic
    Option(
        "graph_run_mode", S.BASIC, T.INT, "R-GRM-1",
        "Graph run mode: 0 online inference, 1 training.",
        choices=(0, 1), defaults=(Default(1, "R-GRM-1"),),
    ),
    Option(
        "session_device_id", S.BASIC, T.INT, "R-SDI-1",
        "Logical device id for this session; beats ASCEND_DEVICE_ID.",
        ranges=(Range("R-SDI-1", minimum=0),), env="ASCEND_DEVICE_ID", env_rule="R-SDI-1",
    ),
    Option(
        "distribute", S.BASIC, T.OBJECT, "R-DIST-1",
        "ParameterServerStrategy object for PS-Worker training (passed through).",
    ),
    Option(
        "deterministic", S.BASIC, T.INT, "R-DET-1",
        "Deterministic computation: 1 on, 0 off (slower when on).",
        choices=(0, 1), defaults=(Default(0, "R-DET-1"),),
    ),
    # ---------------------------------------------------------------- memory
    Option(
        "memory_config", S.MEMORY, T.OBJECT, "R-MEM-1",
        "MemoryConfig object (passed through).",
    ),
    Option(
        "external_weight", S.MEMORY, T.BOOL, "R-EXW-1",
        "Write Const weights to files so several models in a session can share them.",
        defaults=(Default(False, "R-EXW-1"),),
    ),
    Option(
        "input_fusion_size", S.MEMORY, T.INT, "R-IFS-1",
        "Threshold in bytes for merging small host inputs before the copy; 0 switches it off.",
        rules=("R-IFS-2",), ranges=(Range("R-IFS-1", 0, 33554432),),
        defaults=(Default(131072, "R-IFS-1"),),
    ),
    Option(
        "input_batch_cpy", S.MEMORY, T.BOOL, "R-IBC-1",
        "Batch memory copy of host inputs (only with more than one input).",
        defaults=(Default(False, "R-IBC-1"),), products=NEW_FAMILY, products_rule="R-IBC-1",
    ),
    # ---------------------------------------------------------------- dynamic shape
    Option(
        "ac_parallel_enable", S.DYNAMIC_SHAPE, T.STR, "R-ACP-1",
        "Let AI CPU and AI Core operators run in parallel in dynamic-shape graphs.",
        choices=("0", "1"), defaults=(Default("0", "R-ACP-1"),),
    ),
    Option(
        "compile_dynamic_mode", S.DYNAMIC_SHAPE, T.BOOL, "R-CDM-1",
        "Generalize every input shape to -1 (a static graph becomes dynamic).",
        defaults=(Default(False, "R-CDM-1"),),
    ),
    Option(
        "all_tensor_not_empty", S.DYNAMIC_SHAPE, T.BOOL, "R-ATN-1",
        "Remove the empty-tensor control nodes of dynamic-shape graphs.",
        defaults=(Default(False, "R-ATN-1"),),
    ),
    # ---------------------------------------------------------------- mixed computing
    Option(
        "mix_compile_mode", S.MIXED_COMPUTING, T.BOOL, "R-MIX-1",
        "Mixed computing: keep operators that cannot sink in the front-end framework.",
        defaults=(Default(False, "R-MIX-1"),),
    ),
    # ---------------------------------------------------------------- debugging
    Option(
        "enable_exception_dump", S.DEBUGGING, T.INT, "R-EXD-1",
        "Exception operator dump: 0 off, 1 ExceptionDump, 2 LiteExceptionDump.",
        rules=("R-EXD-2", "R-EXD-3", "R-EXD-4"), choices=(0, 1, 2),
        defaults=(Default(2, "R-EXD-1"),),
    ),
    Option(
        "op_debug_config", S.DEBUGGING, T.PATH, "R-ODC-1",
        "Path to a .cfg of operator debug options (oom, dump_cce, dump_loc, ccec_O0, ccec_g, "
        "check_flag) and an optional op_debug_list.",
        rules=("R-ODC-2", "R-ODC-3", "R-OCC-3"), validator=fmt.non_empty,
        validator_rule="R-ODC-1", attachment=True, empty_is_unset=True,
    ),
    Option(
        "debug_dir", S.DEBUGGING, T.PATH, "R-DBG-1",
        "Folder for operator compile debug files (.o, .json, .cce).",
        validator=fmt.non_empty, validator_rule="R-DBG-1",
    ),
    Option(
        "export_compile_stat", S.DEBUGGING, T.INT, "R-ECS-1",
        "fusion_result.json: 0 never, 1 at normal exit, 2 when graph compile ends.",
        choices=(0, 1, 2), defaults=(Default(1, "R-ECS-1"),),
    ),
    # ---------------------------------------------------------------- precision
    Option(
        "precision_mode_v2", S.PRECISION, T.STR, "R-PM2-1",
        "Operator precision mode (recommended over precision_mode).",
        rules=("R-PM2-2", "R-PM2-3", "R-PM2-4", "R-PREC-1", "R-PREC-2"),
        choices=(
            "fp16", "origin", "cube_fp16in_fp32out", "mixed_float16", "mixed_bfloat16",
            "mixed_hif8", "cube_hif8",
        ),
        defaults=(
            Default("fp16", "R-PM2-4", mode=INFERENCE),
            Default("origin", "R-PM2-4", products=NEW_FAMILY, mode=TRAINING),
        ),
        no_default_products=frozenset({"atlas-training"}),
        value_gates=(
            ValueGate("mixed_bfloat16", "R-PM2-2", products=NEW_FAMILY),
            ValueGate("mixed_hif8", "R-PM2-3", products=HIFLOAT8, unsupported_version=True),
            ValueGate("cube_hif8", "R-PM2-3", products=HIFLOAT8, unsupported_version=True),
        ),
    ),
    Option(
        "precision_mode", S.PRECISION, T.STR, "R-PM-1",
        "Operator precision mode (the older switch; not together with precision_mode_v2).",
        rules=("R-PM-2", "R-PM-3", "R-PM-4", "R-PM-5", "R-PREC-1", "R-PREC-2"),
        choices=(
            "allow_fp32_to_fp16", "force_fp16", "cube_fp16in_fp32out", "must_keep_origin_dtype",
            "allow_mix_precision_fp16", "allow_mix_precision_bf16", "allow_fp32_to_bf16",
        ),
        aliases=MappingProxyType(
            {"force_fp32": "cube_fp16in_fp32out", "allow_mix_precision": "allow_mix_precision_fp16"}
        ),
        aliases_rule="R-PM-2",
        defaults=(
            Default("must_keep_origin_dtype", "R-PM-5", products=NEW_FAMILY),
            Default("allow_fp32_to_fp16", "R-PM-5", products=frozenset({"atlas-training"})),
        ),
        value_gates=(
            ValueGate("force_fp16", "R-PM-3", mode=INFERENCE),
            ValueGate("allow_mix_precision_bf16", "R-PM-4", products=NEW_FAMILY),
            ValueGate("allow_fp32_to_bf16", "R-PM-4", products=NEW_FAMILY),
        ),
    ),
    Option(
        "modify_mixlist", S.PRECISION, T.PATH, "R-MML-1",
        "Path to a JSON black/white/gray list that adjusts mixed precision per op type.",
        validator=fmt.non_empty, validator_rule="R-MML-1", attachment=True,
    ),
    Option(
        "enable_reduce_precision", S.PRECISION, T.ANY, "R-ERP-1",
        "Not supported in this version.",
        unsupported_version=True, unsupported_rule="R-ERP-1",
    ),
    Option(
        "customize_dtypes", S.PRECISION, T.PATH, "R-CDT-1",
        "Path to a .cfg that sets the precision of single operators by name or type.",
        rules=("R-CDT-2",), validator=fmt.non_empty, validator_rule="R-CDT-1", attachment=True,
    ),
    # ---------------------------------------------------------------- precision comparison
    Option(
        "dump_config", S.PRECISION_COMPARISON, T.OBJECT, "R-DMP-1",
        "DumpConfig object (passed through).",
    ),
    Option(
        "quant_dumpable", S.PRECISION_COMPARISON, T.STR, "R-QDM-1",
        "Keep pre-quantization dump data of AMCT-quantized networks.",
        choices=("0", "1"), defaults=(Default("0", "R-QDM-1"),),
        mode=INFERENCE, mode_rule="R-QDM-1",
    ),
    Option(
        "fusion_switch_file", S.PRECISION_COMPARISON, T.PATH, "R-FSF-1",
        "Path to the JSON file that switches graph and UB fusion passes on or off.",
        rules=("R-FSF-2",), validator=fmt.path_chars, validator_rule="R-FSF-1",
        attachment=True,
    ),
    Option(
        "buffer_optimize", S.PRECISION_COMPARISON, T.STR, "R-BUF-1",
        "Buffer optimization: l2_optimize or off_optimize.",
        choices=("l2_optimize", "off_optimize"), defaults=(Default("l2_optimize", "R-BUF-1"),),
        mode=INFERENCE, mode_rule="R-BUF-1",
    ),
    # ---------------------------------------------------------------- performance
    Option(
        "iterations_per_loop", S.PERFORMANCE, T.INT, "R-IPL-1",
        "Training iterations per session.run on the device.",
        rules=("R-IPL-2",), ranges=(Range("R-IPL-1", minimum=1),),
        defaults=(Default(1, "R-IPL-1"),),
    ),
    Option(
        "hcom_parallel", S.PERFORMANCE, T.BOOL, "R-HCP-1",
        "Run Allreduce gradient updates in parallel with forward and backward passes.",
        defaults=(Default(True, "R-HCP-1"),),
    ),
    Option(
        "op_precision_mode", S.PERFORMANCE, T.PATH, "R-OPM-1",
        "Path to an .ini that sets the precision or performance mode per op type or node.",
        rules=("R-OPM-2", "R-OPM-3"), validator=fmt.non_empty, validator_rule="R-OPM-1",
        attachment=True,
    ),
    Option(
        "enable_scope_fusion_passes", S.PERFORMANCE, T.STR, "R-ESF-1",
        "Comma-separated non-general scope fusion passes to enable.",
        validator=fmt.name_list, validator_rule="R-ESF-1", canonical=fmt.canonical_list,
    ),
    Option(
        "stream_max_parallel_num", S.PERFORMANCE, T.STR, "R-SMP-1",
        "AI CPU / AI Core engine parallelism, e.g. 'DNN_VM_AICPU:10,AIcoreEngine:1' (NMT only).",
        validator=fmt.stream_max_parallel_num, validator_rule="R-SMP-1",
        canonical=fmt.canonical_stream_max_parallel_num,
    ),
    Option(
        "is_tailing_optimization", S.PERFORMANCE, T.BOOL, "R-TAIL-1",
        "Communication tailing optimization for distributed BERT training.",
        defaults=(Default(False, "R-TAIL-1"),),
    ),
    Option(
        "enable_small_channel", S.PERFORMANCE, T.INT, "R-ESC-1",
        "Small-channel convolution optimization: 0 off in training, always 1 in online inference.",
        choices=(0, 1),
        defaults=(Default(0, "R-ESC-1", mode=TRAINING), Default(1, "R-ESC-1", mode=INFERENCE)),
    ),
    Option(
        "variable_placement", S.PERFORMANCE, T.STR, "R-VPL-1",
        "Where variables live: Device or Host (Host needs mix_compile_mode).",
        rules=("R-VPL-2",), choices=("Device", "Host"), defaults=(Default("Device", "R-VPL-1"),),
    ),
    Option(
        "graph_max_parallel_model_num", S.PERFORMANCE, T.INT, "R-GMP-1",
        "Maximum parallel graph executions in online inference.",
        ranges=(Range("R-GMP-1", 1, INT32_MAX),), defaults=(Default(1, "R-GMP-1"),),
        mode=INFERENCE, mode_rule="R-GMP-1",
    ),
    # ---------------------------------------------------------------- profiling
    Option(
        "profiling_config", S.PROFILING, T.OBJECT, "R-PRF-1",
        "ProfilingConfig object (passed through).",
    ),
    # ---------------------------------------------------------------- AOE
    Option(
        "aoe_mode", S.AOE, T.STR, "R-AOE-2",
        "AOE tuning mode: '1' subgraph, '2' operator, '4' gradient split.",
        rules=("R-AOE-1", "R-AOE-3", "R-AOE-4"), choices=("1", "2", "4"),
        products=AOE_TUNING, products_rule="R-AOE-1", mode=TRAINING, mode_rule="R-AOE-1",
        env="AOE_MODE", env_rule="R-AOE-4",
        value_gates=(ValueGate("1", "R-AOE-3", products=AOE_SUBGRAPH_TUNING),),
    ),
    Option(
        "work_path", S.AOE, T.PATH, "R-AOE-5",
        "AOE working folder, absolute or relative to the job's working directory.",
        rules=("R-AOE-1",), validator=fmt.non_empty, validator_rule="R-AOE-5",
        products=AOE_TUNING, products_rule="R-AOE-1", mode=TRAINING, mode_rule="R-AOE-1",
    ),
    Option(
        "aoe_config_file", S.AOE, T.PATH, "R-AOE-6",
        "Path to the JSON file naming the operators to tune.",
        rules=("R-AOE-1", "R-AOE-7"), validator=fmt.non_empty, validator_rule="R-AOE-6",
        products=AOE_TUNING, products_rule="R-AOE-1", mode=TRAINING, mode_rule="R-AOE-1",
        attachment=True,
    ),
    # ---------------------------------------------------------------- operator compilation
    Option(
        "op_compiler_cache_mode", S.OP_COMPILATION, T.STR, "R-OCC-1",
        "Operator compile disk cache: enable, force or disable.",
        rules=("R-OCC-2", "R-OCC-3", "R-OCC-4"), choices=("enable", "force", "disable"),
        defaults=(Default("enable", "R-OCC-1"),),
    ),
    Option(
        "op_compiler_cache_dir", S.OP_COMPILATION, T.PATH, "R-OCD-1",
        "Folder of the operator compile cache (its kernel_cache subfolder holds it).",
        validator=fmt.path_chars, validator_rule="R-OCD-1",
    ),
    Option(
        "aicore_num", S.OP_COMPILATION, T.STR, "R-ACN-1",
        "Maximum Cube and Vector cores for operator compile, 'CUBE|VECTOR'; each at most the "
        "chip's own count (its platform_config/<soc_version>.ini), which the resolver does not "
        "know, so only > 0 is checked.",
        rules=("R-ACN-2",), validator=fmt.aicore_num, validator_rule="R-ACN-1",
        canonical=fmt.canonical_aicore_num,
        products=AICORE_NUM, products_rule="R-ACN-1",
    ),
    Option(
        "oo_constant_folding", S.OP_COMPILATION, T.BOOL, "R-OCF-1",
        "Constant folding at graph compile.",
        defaults=(Default(True, "R-OCF-1"),),
    ),
    # ---------------------------------------------------------------- data augmentation
    Option(
        "local_rank_id", S.DATA_AUGMENTATION, T.INT, "R-LRI-1",
        "Rank of this process in its server for main-process data de-duplication.",
        ranges=(Range("R-LRI-1", minimum=0),),
    ),
    Option(
        "local_device_list", S.DATA_AUGMENTATION, T.STR, "R-LRI-1",
        "Comma-separated device ids the main process sends data to (with local_rank_id).",
        validator=fmt.device_list, validator_rule="R-LRI-1", canonical=fmt.canonical_device_list,
    ),
    # ---------------------------------------------------------------- exception recovery
    Option(
        "hccl_timeout", S.EXCEPTION_RECOVERY, T.INT, "R-HCT-1",
        "Collective communication timeout in seconds; beats HCCL_EXEC_TIMEOUT.",
        rules=("R-HCT-2", "R-HCT-3", "R-HCT-4"),
        ranges=(
            Range("R-HCT-2", 0, INT32_MAX, products=NEW_FAMILY),
            Range("R-HCT-3", 0, 17340, min_exclusive=True, products=LEGACY_FAMILY),
        ),
        defaults=(Default(1836, "R-HCT-1"),), env="HCCL_EXEC_TIMEOUT", env_rule="R-HCT-4",
    ),
    Option(
        "op_wait_timeout", S.EXCEPTION_RECOVERY, T.INT, "R-OWT-1",
        "Operator wait timeout in seconds.",
        defaults=(Default(120, "R-OWT-1"),),
    ),
    Option(
        "op_execute_timeout", S.EXCEPTION_RECOVERY, T.INT, "R-OET-1",
        "Operator execution timeout in seconds (no documented default).",
    ),
    Option(
        "stream_sync_timeout", S.EXCEPTION_RECOVERY, T.INT, "R-SST-1",
        "Stream synchronization timeout in ms; -1 sets no time limit and reports no sync failure.",
        rules=("R-SST-2",), defaults=(Default(-1, "R-SST-1"),),
    ),
    Option(
        "event_sync_timeout", S.EXCEPTION_RECOVERY, T.INT, "R-EST-1",
        "Event synchronization timeout in ms; -1 sets no time limit and reports no sync failure.",
        defaults=(Default(-1, "R-EST-1"),),
    ),
    # ---------------------------------------------------------------- experimental
    Option(
        "experimental_config", S.EXPERIMENTAL, T.OBJECT, "R-EXP-1",
        "ExperimentalConfig object (passed through).",
        rules=("R-EXP-2",), experimental=True,
    ),
    Option(
        "jit_compile", S.EXPERIMENTAL, T.STR, "R-JIT-1",
        "Compile operators online ('true'), prefer prebuilt binaries ('false'), or 'auto'.",
        rules=("R-EXP-2",), choices=("auto", "true", "false"),
        defaults=(Default("auto", "R-JIT-1"),), experimental=True,
    ),
    Option(
        "shape_generalization_mode", S.EXPERIMENTAL, T.STR, "R-SGM-1",
        "Input shape generalization with jit_compile 'true': STRICT, FULL or ADAPTIVE.",
        rules=("R-EXP-2",), choices=("STRICT", "FULL", "ADAPTIVE"),
        defaults=(Default("STRICT", "R-SGM-1"),), experimental=True,
    ),
    Option(
        "auto_multistream_parallel_mode", S.EXPERIMENTAL, T.STR, "R-AMP-1",
        "'cv' runs Cube and Vector operators in parallel (static-shape recommendation training).",
        rules=("R-EXP-2",), choices=("cv",), mode=TRAINING, mode_rule="R-AMP-1",
        experimental=True,
    ),
    # ---------------------------------------------------------------- to be removed
    Option(
        "enable_data_pre_proc", S.DEPRECATED, T.BOOL, "R-DEP-1",
        "Sink the GetNext operator to the device.",
        defaults=(Default(True, "R-DEP-1"),), deprecated=True,
    ),
    Option(
        "variable_format_optimize", S.DEPRECATED, T.BOOL, "R-DEP-2",
        "Convert variables to a device-friendly format at initialization.",
        deprecated=True,
    ),
    Option(
        "op_debug_level", S.DEPRECATED, T.INT, "R-DEP-3",
        "Operator debug level 0-4 (1, 2 and 4 keep TBE mapping files).",
        rules=("R-OCC-2",), choices=(0, 1, 2, 3, 4), deprecated=True,
    ),
    Option(
        "op_select_implmode", S.DEPRECATED, T.STR, "R-DEP-4",
        "Built-in operator implementation: high_precision or high_performance.",
        rules=("R-OPM-1",), choices=("high_precision", "high_performance"), deprecated=True,
    ),
    Option(
        "optypelist_for_implmode", S.DEPRECATED, T.STR, "R-DEP-5",
        "Op types (Pooling, SoftmaxV2, LRN, ROIAlign) that use op_select_implmode.",
        rules=("R-OPM-1",), validator=fmt.implmode_optypes, validator_rule="R-DEP-5",
        canonical=fmt.canonical_list,
        deprecated=True,
    ),
    Option(
        "dynamic_input", S.DEPRECATED, T.BOOL, "R-DEP-6",
        "Whether the network's inputs are dynamic.",
        defaults=(Default(False, "R-DEP-6"),), deprecated=True,
    ),
    Option(
        "dynamic_graph_execute_mode", S.DEPRECATED, T.STR, "R-DEP-7",
        "Execution mode for dynamic inputs (with dynamic_input True).",
        choices=("dynamic_execute",), deprecated=True,
    ),
    Option(
        "dynamic_inputs_shape_range", S.DEPRECATED, T.STR, "R-DEP-8",
        "Shape ranges of dynamic inputs, 'getnext:[..],[..];data:[..]'.",
        validator=fmt.shape_range, validator_rule="R-DEP-8", deprecated=True,
    ),
    Option(
        "graph_memory_max_size", S.DEPRECATED, T.ANY, "R-DEP-9",
        "No longer takes effect: memory is allocated as the network needs it.",
        unsupported_version=True, unsupported_rule="R-DEP-9",
    ),
    Option(
        "variable_memory_max_size", S.DEPRECATED, T.ANY, "R-DEP-9",
        "No longer takes effect: memory is allocated as the network needs it.",
        unsupported_version=True, unsupported_rule="R-DEP-9",
    ),

)
# fmt: on

MENTIONED_ONLY: Final[Mapping[str, str]] = {
    "dynamic_dims": (
        'the source names it under dynamic_inputs_shape_range ("dynamic_dims wins" when both '
        "are set) but has no entry for it in version 900"
    ),
}
"""Option names the source mentions without documenting them: still UNKNOWN_OPTION (nothing is
known to check them against), said so rather than "not an option" with a near name."""

# Environment variables the source names but that set no option (paths, cache sizes, a flag),
# each with the rule a diagnostic about the variable itself cites: one that reads it
# (ASCEND_WORK_PATH is read by five; the dump folder's rule stands for them).
PATH_ENV_VARS: Final[Mapping[str, tuple[str, str]]] = {
    "ASCEND_WORK_PATH": ("R-EXD-3", "the folders it would hold take their defaults"),
    "NPU_COLLECT_PATH": (
        "R-EXD-2",
        "enable_exception_dump keeps its own value, the dump its own folder",
    ),
    "ASCEND_CACHE_PATH": (
        "R-OCD-1",
        "the operator cache is op_compiler_cache_dir's or $HOME/atc_data",
    ),
    "HOME": ("R-OCD-1", "the operator cache's default folder keeps <home>"),
}
"""The folder variables, with their rule and what applies when one is blank."""
OUTRANKED_FOLDER_VARS: Final[Mapping[str, tuple[str, str, bool]]] = {
    "ASCEND_CACHE_PATH": ("op_compiler_cache_dir", "R-OCD-1", True),
    "ASCEND_WORK_PATH": ("debug_dir", "R-DBG-1", False),
}
"""A folder variable an option outranks: variable -> (option, rule, whether the option in force
leaves the variable nothing to place; ASCEND_WORK_PATH still places the dumps and the fusion
result beside a debug_dir)."""
CACHE_ENV_VARS: Final[Mapping[str, tuple[int, int | None, str, str]]] = {
    "ASCEND_MAX_OP_CACHE_SIZE": (-1, None, "MB as an integer, -1 for no aging", "500 MB"),
    "ASCEND_REMAIN_CACHE_SIZE_RATIO": (1, 100, "an integer percentage in [1, 100]", "50% kept"),
}
"""R-OCC-4: the operator cache's size variables, with the least and greatest value each takes,
how the source describes a valid one, and what applies when neither op_cache.ini nor the
variable sets it ("默认磁盘空间大小500MB，默认保留缓存的空间50%")."""
FLAG_ENV_VARS: Final[Mapping[str, str]] = {"ENABLE_DYNAMIC_SHAPE_MULTI_STREAM": "R-AMP-1"}
ENV_VAR_RULES: Final[Mapping[str, str]] = {
    **{var: rule for var, (rule, _) in PATH_ENV_VARS.items()},
    **{o.env: o.env_rule for o in OPTIONS if o.env},
    **dict.fromkeys(CACHE_ENV_VARS, "R-OCC-4"),
    **FLAG_ENV_VARS,
}
"""Every environment variable rules.md names, with the rule its own diagnostics cite (for an
option's variable, the rule by which it gives the option)."""
NAMED_ENV_VARS: Final = tuple(ENV_VAR_RULES)
"""Every environment variable rules.md names: the only ones that matter to a resolution."""
