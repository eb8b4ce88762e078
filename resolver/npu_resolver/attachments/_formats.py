"""One record per attachment format, for `npu-resolve explain` and for dispatch by option."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from ._common import ParseIssue, frozen_map
from .aoe_config_file import parse_aoe_config
from .customize_dtypes import parse_customize_dtypes
from .fusion_switch_file import parse_fusion_switch
from .modify_mixlist import parse_modify_mixlist
from .op_debug_config import parse_op_debug_config
from .op_precision_mode import parse_op_precision_mode


class ParsedAttachment(Protocol):
    """What every parse result has: its issues, errors and notes alike."""

    @property
    def issues(self) -> tuple[ParseIssue, ...]: ...


@dataclass(frozen=True, slots=True)
class AttachmentFormat:
    """An option whose value names a file, and how that file's text is read."""

    option: str
    title: str
    description: str
    example: str
    parse: Callable[[str], ParsedAttachment]


# The examples are the source's own, with comments translated; op_precision_mode's drops the
# enable_hi_float_32_execution lines, a mode this version refuses (R-OPM-2).
_OP_DEBUG_EXAMPLE: Final = """\
op_debug_config= ccec_g,oom
op_debug_list=GatherV2,opType::ReduceSum
"""

_AOE_EXAMPLE: Final = """\
{
    "tune_ops_name": ["bert/embeddings/addbert/embeddings/add_1", "loss/MatMul"],
    "tune_ops_type": ["Add", "Mul"],
    "tune_optimization_level": "O1",
    "feature": ["deeper_opat"]
}
"""

_MIXLIST_EXAMPLE: Final = """\
{
    "black-list": {  // black list
        "to-remove": [  // black-list ops become gray-list ops
            "Xlog1py"
        ],
        "to-add": [  // white- or gray-list ops become black-list ops
            "MatMul",
            "Cast"
        ]
    },
    "white-list": {  // white list
        "to-remove": [  // white-list ops become gray-list ops
            "Conv2D"
        ],
        "to-add": [  // black- or gray-list ops become white-list ops
            "Bias"
        ]
    }
}
"""

_OP_PRECISION_EXAMPLE: Final = """\
[ByOpType]
optype1=high_precision
optype2=high_performance
optype3=support_out_of_bound_index
[ByNodeName]
nodename1=high_precision
nodename2=high_performance
nodename3=support_out_of_bound_index
"""

_FUSION_EXAMPLE: Final = """\
{
    "Switch": {
        "GraphFusion": {
            "ALL": "off",
            "SoftmaxFusionPass": "on"
        },
        "UBFusion": {
            "ALL": "off",
            "TbePool2dQuantFusionPass": "on"
        }
    }
}
"""

_DTYPES_EXAMPLE: Final = """\
# by op name
resnet_v1_50/block1/unit_3/bottleneck_v1/Relu::InputDtype:float16,int8,OutputDtype:float16,int8
# by op type
OpType::Relu:InputDtype:float16,int8,OutputDtype:float16,int8
"""

FORMATS: Final[Mapping[str, AttachmentFormat]] = frozen_map(
    {
        fmt.option: fmt
        for fmt in (
            AttachmentFormat(
                "op_debug_config",
                "Operator debug options (.cfg)",
                "A line 'op_debug_config = ' with comma-separated options from oom, dump_cce, "
                "dump_loc, ccec_O0, ccec_g and check_flag, and an optional line "
                "'op_debug_list = ' naming the only ops (or 'OpType::type') to compile with them.",
                _OP_DEBUG_EXAMPLE,
                parse_op_debug_config,
            ),
            AttachmentFormat(
                "aoe_config_file",
                "AOE tuning scope (JSON)",
                "A JSON object with 'tune_ops_name' and/or 'tune_ops_type' (lists, taken as a "
                "union), 'tune_optimization_level' O1 or O2 (default O2) and 'feature' "
                "(deeper_opat needs aoe_mode 2, nonhomo_split needs aoe_mode 1).",
                _AOE_EXAMPLE,
                parse_aoe_config,
            ),
            AttachmentFormat(
                "modify_mixlist",
                "Mixed-precision list changes (JSON)",
                "A JSON object whose 'black-list' and 'white-list' each hold 'to-remove' and "
                "'to-add' lists of op types; it acts only while mixed precision is on.",
                _MIXLIST_EXAMPLE,
                parse_modify_mixlist,
            ),
            AttachmentFormat(
                "op_precision_mode",
                "Precision mode per op (.ini)",
                "Sections [ByOpType] and [ByNodeName] of 'name=mode' lines, where a node's own "
                "line beats its type's and '#' or ';' starts a comment.",
                _OP_PRECISION_EXAMPLE,
                parse_op_precision_mode,
            ),
            AttachmentFormat(
                "fusion_switch_file",
                "Fusion pass switches (JSON)",
                "A JSON object {'Switch': {'GraphFusion': {...}, 'UBFusion': {...}}} mapping "
                "pass names, or 'ALL', to 'on' or 'off', where a named pass beats 'ALL'.",
                _FUSION_EXAMPLE,
                parse_fusion_switch,
            ),
            AttachmentFormat(
                "customize_dtypes",
                "Dtypes per op (.cfg)",
                "One op a line, 'Opname::InputDtype:d,...,OutputDtype:d,...' or "
                "'OpType::Type:InputDtype:d,...,OutputDtype:d,...', where a name line beats a "
                "type line for the same op and '#' starts a comment.",
                _DTYPES_EXAMPLE,
                parse_customize_dtypes,
            ),
        )
    }
)
"""Every attachment format, keyed by the option that names the file."""
