"""Pure parsers for the text of the files six NPURunConfig options name.

Each parser takes the file's text (see decode_attachment for bytes) and returns a frozen
result whose `issues` hold the format errors and accepted-oddity notes; none opens a file,
evaluates anything or raises. The rules that combine a file with other options are the
core resolver's.
"""

from ._common import MAX_ATTACHMENT_BYTES, ParseIssue, decode_attachment
from ._formats import FORMATS, AttachmentFormat, ParsedAttachment
from .aoe_config_file import AoeConfig, parse_aoe_config
from .customize_dtypes import CustomDtypes, DtypeSpec, parse_customize_dtypes
from .fusion_switch_file import FusionSwitches, check_path_chars, parse_fusion_switch
from .modify_mixlist import MixList, parse_modify_mixlist
from .op_debug_config import OpDebugConfig, parse_op_debug_config
from .op_precision_mode import OpPrecisionModes, parse_op_precision_mode

__all__ = [
    "FORMATS",
    "MAX_ATTACHMENT_BYTES",
    "AoeConfig",
    "AttachmentFormat",
    "CustomDtypes",
    "DtypeSpec",
    "FusionSwitches",
    "MixList",
    "OpDebugConfig",
    "OpPrecisionModes",
    "ParseIssue",
    "ParsedAttachment",
    "check_path_chars",
    "decode_attachment",
    "parse_aoe_config",
    "parse_customize_dtypes",
    "parse_fusion_switch",
    "parse_modify_mixlist",
    "parse_op_debug_config",
    "parse_op_precision_mode",
]
