"""The parsers of the files six options name: the source's examples, positioned errors, no raise.

Tests are named after the rule they check. The source examples below are the vendor reference's
own text (its table cells lose line breaks; they are restored here as the files would have them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_resolver import CATALOG, ResolveRequest, resolve
from npu_resolver._content import CONTENT_RULES, FORMAT_RULES
from npu_resolver.attachments import (
    FORMATS,
    MAX_ATTACHMENT_BYTES,
    AoeConfig,
    CustomDtypes,
    DtypeSpec,
    FusionSwitches,
    MixList,
    OpDebugConfig,
    OpPrecisionModes,
    ParsedAttachment,
    ParseIssue,
    check_path_chars,
    decode_attachment,
    parse_aoe_config,
    parse_customize_dtypes,
    parse_fusion_switch,
    parse_modify_mixlist,
    parse_op_debug_config,
    parse_op_precision_mode,
)


def _rules_md_modes() -> list[str]:
    """R-OPM-3's modes as rules.md lists them (tests/spec holds a verbatim copy)."""
    text = (Path(__file__).parent / "spec" / "rules.md").read_text("utf-8")
    found = re.search(r"Modes: (.*?\.)\n", text, re.S)
    assert found is not None, "rules.md no longer lists R-OPM-3's modes"
    return [mode.strip(" .\n") for mode in found.group(1).replace("\n", " ").split(",")]


RULES_MD_MODES = _rules_md_modes()

Parser = Callable[[str], ParsedAttachment]

PARSERS: dict[str, tuple[Parser, type]] = {
    "op_debug_config": (parse_op_debug_config, OpDebugConfig),
    "aoe_config_file": (parse_aoe_config, AoeConfig),
    "modify_mixlist": (parse_modify_mixlist, MixList),
    "op_precision_mode": (parse_op_precision_mode, OpPrecisionModes),
    "fusion_switch_file": (parse_fusion_switch, FusionSwitches),
    "customize_dtypes": (parse_customize_dtypes, CustomDtypes),
}
JSON_PARSERS: list[Parser] = [parse_aoe_config, parse_modify_mixlist, parse_fusion_switch]

SOURCE_OP_DEBUG = "op_debug_config = ccec_O0,ccec_g,oom\n"
SOURCE_OP_DEBUG_LIST = "op_debug_config= ccec_g,oom\nop_debug_list=GatherV2,opType::ReduceSum\n"
SOURCE_AOE = """{
"tune_ops_name":["bert/embeddings/addbert/embeddings/add_1","loss/MatMul"],
"tune_ops_type":["Add", "Mul"],
"tune_optimization_level":"O1",
"feature":["deeper_opat"]
}
"""
SOURCE_MIXLIST = """{
  "black-list": {                  // 黑名单
     "to-remove": [                // 黑名单算子转换为灰名单算子
     "Xlog1py"
     ],
     "to-add": [                   // 白名单或灰名单算子转换为黑名单算子
     "MatMul",
     "Cast"
     ]
  },
  "white-list": {                  // 白名单
     "to-remove": [                // 白名单算子转换为灰名单算子
     "Conv2D"
     ],
     "to-add": [                   // 黑名单或灰名单算子转换为白名单算子
     "Bias"
     ]
  }
}
"""
SOURCE_OP_PRECISION = """[ByOpType]
optype1=high_precision
optype2=high_performance
optype3=enable_hi_float_32_execution
optype4=support_out_of_bound_index
[ByNodeName]
nodename1=high_precision
nodename2=high_performance
nodename3=enable_hi_float_32_execution
nodename4=support_out_of_bound_index
"""
SOURCE_FUSION = """{
    "Switch":{
        "GraphFusion":{
            "RequantFusionPass":"on",
            "ConvToFullyConnectionFusionPass":"off",
            "SoftmaxFusionPass":"on",
            "NotRequantFusionPass":"on",
            "ConvConcatFusionPass":"on",
            "MatMulBiasAddFusionPass":"on",
            "PoolingFusionPass":"on",
            "ZConcatv2dFusionPass":"on",
            "ZConcatExt2FusionPass":"on",
            "TfMergeSubFusionPass":"on"
        },
        "UBFusion":{
            "TbePool2dQuantFusionPass":"on"
        }
    }
}
"""
SOURCE_FUSION_ALL_OFF = (
    '{\n"Switch":{\n"GraphFusion":{\n"ALL":"off"\n},\n"UBFusion":{\n"ALL":"off"\n}\n}\n}\n'
)
SOURCE_FUSION_ALL_BUT = """{
    "Switch":{
        "GraphFusion":{
            "ALL":"off",
            "SoftmaxFusionPass":"on"
        },
        "UBFusion":{
            "ALL":"off",
            "TbePool2dQuantFusionPass":"on"
        }
    }
}
"""
SOURCE_DTYPES = """# 按照算子名称配置
resnet_v1_50/block1/unit_3/bottleneck_v1/Relu::InputDtype:float16,int8,OutputDtype:float16,int8
# 按照算子类型配置
OpType::Relu:InputDtype:float16,int8,OutputDtype:float16,int8
"""

SOURCE_EXAMPLES: list[tuple[Parser, str]] = [
    (parse_op_debug_config, SOURCE_OP_DEBUG),
    (parse_op_debug_config, SOURCE_OP_DEBUG_LIST),
    (parse_aoe_config, SOURCE_AOE),
    (parse_modify_mixlist, SOURCE_MIXLIST),
    (parse_op_precision_mode, SOURCE_OP_PRECISION),
    (parse_fusion_switch, SOURCE_FUSION),
    (parse_fusion_switch, SOURCE_FUSION_ALL_OFF),
    (parse_fusion_switch, SOURCE_FUSION_ALL_BUT),
    (parse_customize_dtypes, SOURCE_DTYPES),
]


def errors(result: ParsedAttachment) -> list[ParseIssue]:
    return [issue for issue in result.issues if issue.is_error]


def notes(result: ParsedAttachment) -> list[ParseIssue]:
    return [issue for issue in result.issues if issue.normalized]


def only_error(result: ParsedAttachment) -> ParseIssue:
    found = errors(result)
    assert len(found) == 1, found
    return found[0]


# The format table -----------------------------------------------------------------------------


def test_formats_cover_the_six_options() -> None:
    assert set(FORMATS) == set(PARSERS)
    # One set of options names a file, whichever table asks: the catalog's flag (what
    # `explain` and DescribeCatalog say), the content and format rules, and the file formats.
    flagged = {option.name for option in CATALOG.options if option.attachment}
    assert flagged == set(CONTENT_RULES) == set(FORMAT_RULES) == set(FORMATS)
    for option, fmt in FORMATS.items():
        assert fmt.option == option
        assert fmt.parse is PARSERS[option][0]
        assert fmt.title
        assert fmt.description.endswith(".")
        assert fmt.description.count(". ") == 0


@pytest.mark.parametrize("option", sorted(FORMATS))
def test_formats_example_parses_without_errors(option: str) -> None:
    fmt = FORMATS[option]
    result = fmt.parse(fmt.example)
    assert isinstance(result, PARSERS[option][1])
    assert errors(result) == []


@pytest.mark.parametrize(("parse", "text"), SOURCE_EXAMPLES)
def test_source_examples_parse_without_errors(parse: Parser, text: str) -> None:
    assert errors(parse(text)) == []


# op_debug_config --------------------------------------------------------------------------------


def test_r_odc_1_source_example_is_read() -> None:
    result = parse_op_debug_config(SOURCE_OP_DEBUG_LIST)
    assert result.options == {"ccec_g", "oom"}
    assert result.op_debug_list == ("GatherV2", "OpType::ReduceSum")
    assert result.issues == ()
    assert parse_op_debug_config(SOURCE_OP_DEBUG).op_debug_list is None


@pytest.mark.parametrize(
    "option", ["oom", "dump_cce", "dump_loc", "ccec_O0", "ccec_g", "check_flag"]
)
def test_r_odc_1_every_documented_option_is_read(option: str) -> None:
    """The six the source lists (「oom … dump_cce … dump_loc … ccec_O0 … ccec_g … check_flag」)."""
    result = parse_op_debug_config(f"op_debug_config={option}\n")
    assert result.options == {option}
    assert result.issues == ()


def test_r_odc_1_hash_lines_are_read_as_comments_with_a_note() -> None:
    result = parse_op_debug_config("# debug build\nop_debug_config=oom\n")
    assert result.options == {"oom"}
    assert errors(result) == []
    (note,) = notes(result)
    assert note.line == 1 and "comments" in note.message


def test_r_odc_1_unknown_option_suggests_closest() -> None:
    issue = only_error(parse_op_debug_config("op_debug_config = omm,dump_cce"))
    assert (issue.line, issue.column, issue.suggestion, issue.rule) == (1, 19, "oom", "R-ODC-1")
    assert issue.message.startswith("line 1, column 19: unknown option 'omm'")
    assert "expected one of oom, dump_cce" in issue.message


def test_r_odc_1_option_case_matters_and_is_suggested() -> None:
    issue = only_error(parse_op_debug_config("op_debug_config=ccec_o0"))
    assert issue.suggestion == "ccec_O0"


def test_r_odc_1_unknown_key_gives_line_and_suggestion() -> None:
    result = parse_op_debug_config("op_debug_config=oom\n\n  op_debug_lst=GatherV2\n")
    issue = only_error(result)
    assert (issue.line, issue.column, issue.suggestion) == (3, 3, "op_debug_list")
    assert "unknown key 'op_debug_lst'" in issue.message


@pytest.mark.parametrize(
    ("text", "column"),
    [("op_debug_config=oom,,dump_cce", 21), ("op_debug_config=oom,  ,dump_cce", 23)],
)
def test_r_odc_1_an_empty_option_is_an_error_placed_past_its_blanks(text: str, column: int) -> None:
    issue = only_error(parse_op_debug_config(text))
    assert (issue.line, issue.column) == (1, column)
    assert "empty option" in issue.message


def test_r_odc_1_an_empty_option_list_is_one_error() -> None:
    issue = only_error(parse_op_debug_config("op_debug_config =\n"))
    assert (issue.line, issue.column) == (1, 18)
    assert "lists no option" in issue.message


def test_r_odc_1_bare_option_list_is_read_with_a_note() -> None:
    result = parse_op_debug_config("oom,ccec_O0")
    assert result.options == {"oom", "ccec_O0"}
    assert errors(result) == []
    assert len(notes(result)) == 1


def test_r_odc_1_op_type_prefix_in_any_case() -> None:
    result = parse_op_debug_config("op_debug_config=oom\nop_debug_list=A, optype::B,OPTYPE::C\n")
    assert result.op_debug_list == ("A", "OpType::B", "OpType::C")
    assert result.issues == ()


def test_r_odc_1_misspelt_prefix_suggests_optype() -> None:
    issue = only_error(parse_op_debug_config("op_debug_config=oom\nop_debug_list=OpTpe::B"))
    assert (issue.line, issue.column, issue.suggestion) == (2, 15, "OpType")


def test_r_odc_1_file_without_options_is_an_error() -> None:
    issue = only_error(parse_op_debug_config("op_debug_list=GatherV2\n"))
    assert "no 'op_debug_config" in issue.message


def test_r_odc_1_repeated_key_with_other_value_is_an_error() -> None:
    issue = only_error(parse_op_debug_config("op_debug_config=oom\nop_debug_config=dump_cce"))
    assert issue.line == 2
    assert "first on line 1" in issue.message


def test_r_odc_1_an_option_given_twice_is_a_note_at_the_repeat() -> None:
    result = parse_op_debug_config("op_debug_config=oom,dump_cce,oom")
    assert result.options == {"oom", "dump_cce"}
    (note,) = result.issues
    assert note.normalized
    assert note.message == "line 1, column 30: option 'oom' repeats line 1; ignored"


def test_r_odc_1_many_comment_lines_get_one_note() -> None:
    result = parse_op_debug_config("# a\n# b\n  # c\nop_debug_config=oom\n")
    (note,) = result.issues
    assert (note.line, note.normalized) == (1, True)


def test_r_odc_1_a_repeated_line_is_read_once_so_its_error_is_said_once() -> None:
    result = parse_op_debug_config("op_debug_config=omm\nop_debug_config=omm\n")
    issue = only_error(result)
    assert (issue.line, issue.column, issue.suggestion) == (1, 17, "oom")
    (note,) = notes(result)
    assert note.message == "line 2, column 1: key 'op_debug_config' repeats line 1; ignored"


def test_r_odc_1_an_empty_op_debug_list_is_an_error() -> None:
    result = parse_op_debug_config("op_debug_config=oom\nop_debug_list=\n")
    issue = only_error(result)
    assert issue.message == "line 2, column 15: 'op_debug_list' names no op"
    assert result.op_debug_list == ()


def test_r_odc_1_an_empty_op_name_between_commas_is_an_error_not_an_op() -> None:
    result = parse_op_debug_config("op_debug_config=oom\nop_debug_list=A,,B\n")
    issue = only_error(result)
    assert (issue.line, issue.column) == (2, 17)
    assert "empty op name" in issue.message
    assert result.op_debug_list == ("A", "B")


def test_r_odc_1_optype_prefix_without_a_type_is_an_error_not_an_op() -> None:
    result = parse_op_debug_config("op_debug_config=oom\nop_debug_list=GatherV2,OpType::\n")
    issue = only_error(result)
    assert issue.message == "line 2, column 24: no op type after 'OpType::'"
    assert result.op_debug_list == ("GatherV2",)


def test_r_odc_1_an_op_type_with_one_colon_is_refused_in_any_case_of_optype() -> None:
    """'optype:ReduceSum' is meant as the op type ('OpType' in any case, R-ODC-1); kept as a
    name it would match no op."""
    result = parse_op_debug_config("op_debug_config=oom\nop_debug_list=optype:ReduceSum\n")
    issue = only_error(result)
    assert (issue.line, issue.column, issue.suggestion) == (2, 15, "OpType::ReduceSum")
    assert result.op_debug_list == ()


# aoe_config_file --------------------------------------------------------------------------------


def test_r_aoe_7_source_example_is_read() -> None:
    result = parse_aoe_config(SOURCE_AOE)
    assert result.tune_ops_name == ("bert/embeddings/addbert/embeddings/add_1", "loss/MatMul")
    assert result.tune_ops_type == ("Add", "Mul")
    assert result.tune_optimization_level == "O1"
    assert result.features == {"deeper_opat"}


def test_r_aoe_7_level_defaults_to_o2() -> None:
    result = parse_aoe_config('{"tune_ops_type": ["Add"]}')
    assert result.tune_optimization_level == "O2"
    assert result.issues == ()


def test_r_aoe_7_wrong_type_names_the_key() -> None:
    issue = only_error(parse_aoe_config('{\n  "tune_ops_name": "loss/MatMul"\n}'))
    assert (issue.line, issue.column, issue.rule) == (2, 3, "R-AOE-7")
    assert "'tune_ops_name' must be a list of strings, not a string" in issue.message


def test_r_aoe_7_needs_one_tune_list() -> None:
    issue = only_error(parse_aoe_config('{"feature": ["deeper_opat"]}'))
    assert "tune_ops_name" in issue.message
    assert issue.rule == "R-AOE-7"


def test_r_aoe_7_unknown_level_suggests_closest() -> None:
    issue = only_error(
        parse_aoe_config('{"tune_ops_type": ["Add"], "tune_optimization_level": "o1"}')
    )
    assert issue.suggestion == "O1"


def test_r_aoe_7_unknown_key_suggests_closest() -> None:
    issue = only_error(parse_aoe_config('{"tune_ops_type": ["Add"],\n "tune_op_name": ["x"]}'))
    assert (issue.line, issue.column, issue.suggestion) == (2, 2, "tune_ops_name")


def test_r_aoe_6_unknown_feature_suggests_closest() -> None:
    text = '{"tune_ops_type": ["Add"],\n"feature": ["nonhomo_split", "deeper_opt"]}'
    issue = only_error(parse_aoe_config(text))
    assert (issue.line, issue.column, issue.rule) == (2, 30, "R-AOE-6")
    assert issue.suggestion == "deeper_opat"


def test_r_aoe_6_invalid_json_gives_line_and_column() -> None:
    issue = only_error(parse_aoe_config('{\n  "tune_ops_type": ["Add",]\n}'))
    assert (issue.line, issue.column) == (2, 27)
    assert issue.message == "line 2, column 27: invalid JSON: Expecting value"


def test_r_aoe_6_comments_are_refused_with_a_hint() -> None:
    issue = only_error(parse_aoe_config('{"tune_ops_type": ["Add"]  // ops\n}'))
    assert (issue.line, issue.column) == (1, 28)
    assert "'//' comments are not allowed here" in issue.message


@pytest.mark.parametrize("text", ['{"tune_ops_type": ["Add"]\n', '\n ["Add"]'])
def test_r_aoe_6_a_file_that_is_not_a_json_object_is_refused_under_r_aoe_6(text: str) -> None:
    """R-AOE-6 is what makes the file one of JSON; R-AOE-7 is about its keys."""
    issue = only_error(parse_aoe_config(text))
    assert (issue.line, issue.rule) == (2, "R-AOE-6")


def test_r_aoe_7_an_unknown_key_is_refused_under_r_aoe_7() -> None:
    issue = only_error(parse_aoe_config('{"tune_ops_type": ["Add"], "features": ["deeper_opat"]}'))
    assert (issue.rule, issue.suggestion) == ("R-AOE-7", "feature")


def test_r_aoe_7_a_level_that_is_not_a_string_leaves_the_default_o2() -> None:
    result = parse_aoe_config('{"tune_ops_type": ["Add"], "tune_optimization_level": 1}')
    issue = only_error(result)
    assert issue.message.endswith('\'tune_optimization_level\' must be "O1" or "O2", not a number')
    assert result.tune_optimization_level == "O2"


# modify_mixlist ---------------------------------------------------------------------------------


def test_r_mml_1_source_example_is_read_and_comments_noted() -> None:
    result = parse_modify_mixlist(SOURCE_MIXLIST)
    assert result.lists == {
        "black-list": {"to-remove": ("Xlog1py",), "to-add": ("MatMul", "Cast")},
        "white-list": {"to-remove": ("Conv2D",), "to-add": ("Bias",)},
    }
    (note,) = result.issues
    assert note.normalized
    assert (note.line, note.column, note.rule) == (2, 36, "R-MML-1")
    assert "'//' comments" in note.message


def test_r_mml_1_comment_marker_inside_a_string_is_kept() -> None:
    result = parse_modify_mixlist('{"black-list": {"to-add": ["a//b"]}}')
    assert result.lists["black-list"]["to-add"] == ("a//b",)
    assert result.issues == ()


def test_r_mml_1_unknown_list_suggests_closest() -> None:
    issue = only_error(parse_modify_mixlist('{\n"black_list": {"to-add": ["Cast"]}\n}'))
    assert (issue.line, issue.column, issue.suggestion) == (2, 1, "black-list")


def test_r_mml_1_unknown_action_suggests_closest() -> None:
    issue = only_error(parse_modify_mixlist('{"white-list": {"to_add": ["Cast"]}}'))
    assert issue.suggestion == "to-add"
    assert "in 'white-list'" in issue.message


def test_r_mml_1_parse_error_gives_line_and_column() -> None:
    issue = only_error(
        parse_modify_mixlist('{\n  "black-list": {  // note\n    "to-add": ["A" "B"]\n')
    )
    assert (issue.line, issue.column) == (3, 20)
    assert "invalid JSON: Expecting ',' delimiter" in issue.message


def test_r_mml_1_gray_list_is_read_with_a_note() -> None:
    result = parse_modify_mixlist('{"gray-list": {"to-add": ["Cast"]}}')
    assert result.lists["gray-list"]["to-add"] == ("Cast",)
    assert errors(result) == []
    assert len(notes(result)) == 1


def test_r_mml_1_non_string_op_names_its_item() -> None:
    issue = only_error(parse_modify_mixlist('{"black-list": {"to-add": ["Cast", 7]}}'))
    assert "'black-list' > 'to-add' > item 2 must be a string, not a number" in issue.message
    assert issue.column == 36


def test_r_mml_1_the_first_item_of_a_list_is_placed_at_itself() -> None:
    issue = only_error(parse_modify_mixlist('{"black-list": {"to-add": [7, "Cast"]}}'))
    assert issue.message == (
        "line 1, column 28: 'black-list' > 'to-add' > item 1 must be a string, not a number"
    )


def test_r_mml_1_an_item_of_only_spaces_is_said_to_be_empty() -> None:
    issue = only_error(parse_modify_mixlist('{"black-list": {"to-add": ["Cast", "  "]}}'))
    assert issue.message == "line 1, column 36: 'black-list' > 'to-add' > item 2 is empty"


def test_r_mml_1_a_number_of_thousands_of_digits_is_a_number_not_invalid_json() -> None:
    issue = only_error(parse_modify_mixlist('{"black-list": {"to-add": [' + "7" * 5000 + "]}}"))
    assert issue.message == (
        "line 1, column 28: 'black-list' > 'to-add' > item 1 must be a string, not a number"
    )


def test_r_mml_1_the_gray_list_note_is_placed_at_its_key() -> None:
    (note,) = parse_modify_mixlist('{\n  "gray-list": {"to-add": ["Cast"]}\n}').issues
    assert (note.line, note.column, note.normalized) == (2, 3, True)


def test_r_mml_1_an_issue_is_placed_exactly_only_within_20_000_tokens() -> None:
    """Positions are sought over at most 20,000 tokens of the file (MAX_SOUGHT_TOKENS)."""
    # 12 tokens lead to the list and each item takes two ("a" and its comma): the bad item
    # is the 20,000th token. With 5 tokens before the list, it is the 20,001st.
    within = '{"white-list": {"to-add": []}, "black-list": {"to-add": [' + '"a",' * 9_994 + "1]}}"
    past = '{"black-list": {"to-add": [' + '"a",' * 9_998 + "1]}}"
    within_issue = only_error(parse_modify_mixlist(within))
    assert (within_issue.line, within_issue.column) == (1, len(within) - 3)
    assert "which holds it" not in within_issue.message
    past_issue = only_error(parse_modify_mixlist(past))
    assert (past_issue.line, past_issue.column) == (1, 17)
    assert past_issue.message.endswith("which holds it)")


# op_precision_mode ------------------------------------------------------------------------------


def test_r_opm_3_source_example_is_read() -> None:
    result = parse_op_precision_mode(SOURCE_OP_PRECISION)
    assert result.by_op_type["optype3"] == "enable_hi_float_32_execution"
    assert result.by_node_name["nodename4"] == "support_out_of_bound_index"
    assert result.modes_used == {
        "high_precision",
        "high_performance",
        "enable_hi_float_32_execution",
        "support_out_of_bound_index",
    }
    assert result.issues == ()


@pytest.mark.parametrize("mode", RULES_MD_MODES)
def test_r_opm_3_every_documented_mode_is_read(mode: str) -> None:
    """Read, whatever a product or version then makes of it (R-OPM-2 judges that)."""
    result = parse_op_precision_mode(f"[ByOpType]\nMatMul={mode}\n")
    assert result.by_op_type == {"MatMul": mode}
    assert result.issues == ()


def test_r_opm_3_a_mode_in_capitals_is_refused_with_its_spelling() -> None:
    issue = only_error(parse_op_precision_mode("[ByOpType]\nA=HIGH_PRECISION\n"))
    assert (issue.line, issue.column, issue.suggestion) == (2, 3, "high_precision")


def test_r_opm_3_unknown_mode_suggests_closest() -> None:
    issue = only_error(parse_op_precision_mode("[ByOpType]\nMatMul = high_precison\n"))
    assert (issue.line, issue.column, issue.rule) == (2, 10, "R-OPM-3")
    assert issue.suggestion == "high_precision"


def test_r_opm_3_unknown_section_suggests_closest() -> None:
    issue = only_error(parse_op_precision_mode("[ByNodename]\nn1=keep_fp16\n"))
    assert (issue.line, issue.column, issue.suggestion) == (1, 2, "ByNodeName")


def test_r_opm_3_entry_outside_a_section_is_an_error() -> None:
    issue = only_error(parse_op_precision_mode("; c\n\nMatMul=keep_fp16\n[ByOpType]\n"))
    assert (issue.line, issue.column) == (3, 1)


def test_r_opm_3_comments_and_blank_lines_are_skipped() -> None:
    text = "# a\n; b\n\n[ByOpType]\n  # c\nAdd=keep_fp16\r\n"
    result = parse_op_precision_mode(text)
    assert result.by_op_type == {"Add": "keep_fp16"}
    assert result.issues == ()


def test_r_opm_3_name_and_type_together_is_a_note() -> None:
    result = parse_op_precision_mode(
        "[ByOpType]\nAdd=keep_fp16\n[ByNodeName]\nAdd=high_precision\n"
    )
    assert errors(result) == []
    (note,) = notes(result)
    assert note.line == 4
    assert note.message.startswith("line 4: 'Add' is set both by node name and by op type (line 2)")


def test_r_opm_3_a_header_without_its_bracket_is_said_so() -> None:
    issue = only_error(parse_op_precision_mode("[ByOpType\nA=keep_fp16\n"))
    assert issue.message == "line 1, column 1: a section header must end with ']'"


def test_r_opm_3_a_section_opened_again_is_a_note_naming_its_first_line() -> None:
    text = "[ByOpType]\nA=keep_fp16\n[ByOpType]\nB=keep_fp16\n[ByOpType]\nC=keep_fp16\n"
    result = parse_op_precision_mode(text)
    assert result.by_op_type == {"A": "keep_fp16", "B": "keep_fp16", "C": "keep_fp16"}
    assert [(i.line, i.message) for i in result.issues] == [
        (3, "line 3, column 1: [ByOpType] appears again (first on line 1)"),
        (5, "line 5, column 1: [ByOpType] appears again (first on line 1)"),
    ]


def test_r_opm_3_an_entry_without_a_name_is_an_error() -> None:
    result = parse_op_precision_mode("[ByOpType]\n=keep_fp16\n")
    assert only_error(result).message == "line 2, column 1: no name before '='"
    assert result.by_op_type == {}


def test_r_opm_3_an_entry_without_a_mode_is_an_error_where_the_mode_belongs() -> None:
    issue = only_error(parse_op_precision_mode("[ByOpType]\nA = \n"))
    assert issue.message == "line 2, column 4: no mode after 'A='"


# fusion_switch_file -----------------------------------------------------------------------------


def test_r_fsf_2_all_and_named_pass_are_read() -> None:
    result = parse_fusion_switch(SOURCE_FUSION_ALL_BUT)
    assert result.graph_fusion == {"ALL": "off", "SoftmaxFusionPass": "on"}
    assert result.ub_fusion == {"ALL": "off", "TbePool2dQuantFusionPass": "on"}


def test_r_fsf_2_unknown_state_suggests_closest() -> None:
    issue = only_error(parse_fusion_switch('{"Switch": {"GraphFusion": {"APass": "On"}}}'))
    assert (issue.line, issue.column, issue.rule) == (1, 29, "R-FSF-2")
    assert issue.suggestion == "on"


def test_r_fsf_2_unknown_section_suggests_closest() -> None:
    issue = only_error(parse_fusion_switch('{"Switch": {"UBfusion": {}}}'))
    assert issue.suggestion == "UBFusion"


def test_r_fsf_2_lower_case_all_suggests_capitals() -> None:
    issue = only_error(parse_fusion_switch('{"Switch": {"GraphFusion": {"all": "off"}}}'))
    assert issue.suggestion == "ALL"


def test_r_fsf_2_missing_switch_is_an_error() -> None:
    issue = only_error(parse_fusion_switch("{\n}"))
    assert (issue.line, issue.column) == (1, 1)
    assert "no 'Switch' object" in issue.message
    misplaced = errors(parse_fusion_switch('{"GraphFusion": {}}'))
    assert [i.column for i in misplaced] == [2, 1]


def test_r_fsf_2_repeated_key_is_an_error_at_the_repeat() -> None:
    text = '{"Switch": {"GraphFusion": {\n"P": "on",\n"P": "off"}}}'
    issue = only_error(parse_fusion_switch(text))
    assert (issue.line, issue.column) == (3, 1)
    assert "'P' appears twice" in issue.message


def test_r_fsf_2_parse_error_gives_line_and_column() -> None:
    issue = only_error(parse_fusion_switch('{"Switch": {\n  "GraphFusion": {"P": on}}}'))
    assert (issue.line, issue.column) == (2, 24)


@pytest.mark.parametrize("path", ["/home/test/fusion_switch.cfg", "rel/融合开关-1_a.cfg", "a"])
def test_r_fsf_1_allowed_path_characters(path: str) -> None:
    assert check_path_chars(path) is None


@pytest.mark.parametrize(
    ("path", "column"), [("/home/my file.cfg", 9), ("/tmp/a~b", 7), ("/x/é", 4), ("c:\\x", 2)]
)
def test_r_fsf_1_bad_path_character_names_its_column(path: str, column: int) -> None:
    issue = check_path_chars(path)
    assert issue is not None
    assert (issue.line, issue.column, issue.rule) == (0, column, "R-FSF-1")
    assert repr(path[column - 1]) in issue.message


def test_r_ocd_1_same_path_rule_under_its_own_id() -> None:
    issue = check_path_chars("/cache dir", "R-OCD-1")
    assert issue is not None
    assert issue.rule == "R-OCD-1"
    assert check_path_chars("") is not None


def test_r_fsf_1_the_message_names_the_column_of_the_bad_character() -> None:
    issue = check_path_chars("/home/my file.cfg")
    assert issue is not None
    assert issue.message.startswith("column 9: character ' ' (U+0020) is not allowed")


def test_r_fsf_2_a_state_that_is_true_is_refused_as_true_false() -> None:
    result = parse_fusion_switch('{"Switch": {"GraphFusion": {"P": true}}}')
    assert only_error(result).message == (
        "line 1, column 29: 'Switch' > 'GraphFusion' > 'P' must be \"on\" or \"off\", "
        "not true/false"
    )
    assert result.graph_fusion == {}


def test_r_fsf_2_an_empty_pass_name_is_an_error_not_a_pass() -> None:
    result = parse_fusion_switch('{"Switch": {"GraphFusion": {"": "on", "P": "off"}}}')
    issue = only_error(result)
    assert issue.message == "line 1, column 29: 'Switch' > 'GraphFusion' has an empty pass name"
    assert result.graph_fusion == {"P": "off"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{\n"Switch": ["GraphFusion"]}',
            "line 2, column 1: 'Switch' must be an object, not a list",
        ),
        (
            '\n  ["Switch"]',
            "line 2, column 3: the file must hold a JSON object {...}, not a list",
        ),
    ],
    ids=["switch", "file"],
)
def test_r_fsf_2_a_part_that_is_not_an_object_is_an_error_placed_at_it(
    text: str, message: str
) -> None:
    assert only_error(parse_fusion_switch(text)).message == message


# customize_dtypes -------------------------------------------------------------------------------


def test_r_cdt_2_source_example_is_read() -> None:
    result = parse_customize_dtypes(SOURCE_DTYPES)
    spec = DtypeSpec(("float16", "int8"), ("float16", "int8"))
    assert result.by_name == {"resnet_v1_50/block1/unit_3/bottleneck_v1/Relu": spec}
    assert result.by_type == {"Relu": spec}
    assert result.by_type["Relu"].line == 4
    assert result.issues == ()


def test_r_cdt_2_missing_output_part_gives_line_and_column() -> None:
    issue = only_error(parse_customize_dtypes("# c\n\nConv::InputDtype:float16\n"))
    assert (issue.line, issue.column, issue.rule) == (3, 7, "R-CDT-2")
    assert "no 'OutputDtype:' part" in issue.message


def test_r_cdt_2_output_dtype_before_input_dtype_is_an_error() -> None:
    """The source's form is `Opname::InputDtype:…,OutputDtype:…`, inputs first."""
    issue = only_error(parse_customize_dtypes("Relu::OutputDtype:float16,InputDtype:float16\n"))
    assert (issue.line, issue.column) == (1, 7)
    assert "'InputDtype' must come first" in issue.message


def test_r_cdt_2_unknown_keyword_suggests_closest() -> None:
    issue = only_error(parse_customize_dtypes("OpType::Relu:InputDtype:int8,OutDtype:int8"))
    assert (issue.column, issue.suggestion) == (30, "OutputDtype")


def test_r_cdt_2_optype_in_other_case_suggests_optype() -> None:
    issue = only_error(parse_customize_dtypes("optype::Relu:InputDtype:int8,OutputDtype:int8"))
    assert issue.suggestion == "OpType"


def test_r_cdt_2_unknown_dtype_is_a_note_with_a_suggestion() -> None:
    result = parse_customize_dtypes("Relu::InputDtype:flaot16,OutputDtype:float16")
    assert errors(result) == []
    (note,) = notes(result)
    assert (note.column, note.suggestion) == (18, "float16")


def test_r_cdt_2_repeats_are_a_note_when_equal_and_an_error_when_not() -> None:
    line = "Relu::InputDtype:int8,OutputDtype:int8\n"
    assert errors(parse_customize_dtypes(line * 2)) == []
    assert len(notes(parse_customize_dtypes(line * 2))) == 1
    issue = only_error(parse_customize_dtypes(line + line.replace("int8\n", "int16\n")))
    assert issue.line == 2


def test_r_cdt_2_name_beats_type_for_the_same_op_is_a_note() -> None:
    text = "OpType::Relu:InputDtype:int8,OutputDtype:int8\nRelu::InputDtype:int8,OutputDtype:int8"
    result = parse_customize_dtypes(text)
    assert errors(result) == []
    (note,) = notes(result)
    assert "by-name setting wins" in note.message


def test_r_cdt_2_name_beats_type_note_is_on_the_name_line_and_names_the_type_line() -> None:
    text = "OpType::Relu:InputDtype:int8,OutputDtype:int8\n\nRelu::InputDtype:int8,OutputDtype:int8"
    (note,) = parse_customize_dtypes(text).issues
    assert note.message.startswith(
        "line 3: 'Relu' is set both by node name and by op type (line 1)"
    )


def test_r_cdt_2_output_dtype_given_twice_is_an_error() -> None:
    text = "Relu::InputDtype:int8,OutputDtype:int8,OutputDtype:int16"
    result = parse_customize_dtypes(text)
    issue = only_error(result)
    assert (issue.line, issue.column) == (1, 40)
    assert "'OutputDtype' once after it" in issue.message
    assert result.by_name == {}


def test_r_cdt_2_a_dtype_holding_other_characters_is_not_a_dtype_name() -> None:
    issue = only_error(parse_customize_dtypes("Relu::InputDtype:float16-x,OutputDtype:int8"))
    assert issue.message == "line 1, column 18: 'float16-x' is not a dtype name"


def test_r_cdt_2_an_op_type_without_its_colon_is_an_error_after_the_type() -> None:
    issue = only_error(parse_customize_dtypes("OpType::Relu"))
    assert (issue.line, issue.column) == (1, 9)
    assert issue.message.startswith("line 1, column 9: expected ':' after the op type")


def test_r_cdt_2_a_dtype_before_input_dtype_is_placed_at_the_dtype() -> None:
    issue = only_error(parse_customize_dtypes("Relu::  float16,OutputDtype:float16"))
    assert issue.message.startswith("line 1, column 9: expected 'InputDtype:' first")


# Shared behaviour ------------------------------------------------------------------------------


@pytest.mark.parametrize("parse", JSON_PARSERS)
@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000, "{" * 3000 + "}" * 3000])
def test_deeply_nested_json_is_an_issue_not_a_crash(parse: Parser, text: str) -> None:
    issue = only_error(parse(text))
    assert "invalid JSON" in issue.message


@pytest.mark.parametrize("option", sorted(FORMATS))
def test_garbage_stops_after_the_issue_limit(option: str) -> None:
    text = "x=y:z,\n" * 50_000 if option not in ("aoe_config_file",) else "[" + "1," * 50_000 + "1]"
    result = FORMATS[option].parse(text)
    assert len(result.issues) <= 102


def test_many_json_errors_stop_at_the_limit() -> None:
    result = parse_aoe_config(json.dumps({"tune_ops_name": [1] * 5000}))
    assert len(result.issues) == 101
    assert result.issues[-1].is_error
    assert "reading stopped" in result.issues[-1].message


def test_byte_order_mark_is_noted_and_columns_stay_true() -> None:
    result = parse_op_precision_mode("\ufeff[ByOpType]\nA=x\n")
    assert notes(result)[0].line == 1
    assert only_error(result).column == 3
    # On the first line too: an editor counts no column for the mark.
    for parse, text in (
        (parse_op_debug_config, "op_debug_config=bad"),
        (parse_op_precision_mode, "[ByOpTyp]"),
        (parse_modify_mixlist, '{"black-list": {"to-add": [1]}}'),
    ):
        plain = [(i.line, i.column, i.message) for i in errors(parse(text))]
        marked = [(i.line, i.column, i.message) for i in errors(parse("\ufeff" + text))]
        assert plain and marked == plain, (marked, plain)


def test_non_text_input_is_an_issue() -> None:
    bad: Any = b"op_debug_config=oom"
    assert errors(parse_op_debug_config(bad))


def test_decode_accepts_utf8_and_checks_text() -> None:
    assert decode_attachment(b"op_debug_config=oom") == ("op_debug_config=oom", None)
    assert decode_attachment("[ByOpType]\n层=keep_fp16") == ("[ByOpType]\n层=keep_fp16", None)


def test_decode_refuses_more_than_1_mib() -> None:
    assert decode_attachment(b"a" * MAX_ATTACHMENT_BYTES)[1] is None
    text, issue = decode_attachment(b"a" * (MAX_ATTACHMENT_BYTES + 1))
    assert text is None
    assert issue is not None
    assert "1 MiB" in issue.message
    assert decode_attachment("é" * (MAX_ATTACHMENT_BYTES // 2 + 1))[1] is not None


def test_decode_refuses_invalid_utf8_at_its_position() -> None:
    text, issue = decode_attachment(b"[ByOpType]\nA\xc3\xa9=\xff")
    assert text is None
    assert issue is not None
    assert (issue.line, issue.column) == (2, 4)
    assert "not valid UTF-8" in issue.message


def test_decode_refuses_lone_surrogates() -> None:
    text, issue = decode_attachment("ok\nab\ud800")
    assert text is None
    assert issue is not None
    assert (issue.line, issue.column) == (2, 3)


def test_decode_accepts_text_of_exactly_1_mib() -> None:
    mib = 1024 * 1024
    for text in ("a" * mib, "é" * (mib // 2)):
        assert decode_attachment(text) == (text, None)
    assert decode_attachment("a" * (mib + 1))[1] is not None


def test_a_quoted_word_is_shown_whole_up_to_40_characters_then_cut() -> None:
    whole = only_error(parse_op_debug_config("op_debug_config=" + "o" * 40)).message
    cut = only_error(parse_op_debug_config("op_debug_config=" + "o" * 41)).message
    assert f"unknown option {'o' * 40!r};" in whole
    assert f"unknown option {'o' * 40!r}...;" in cut


def test_a_word_of_64_characters_gets_a_suggestion_and_a_longer_one_none() -> None:
    """Words past 64 characters are not matched against the choices (the cost is bounded)."""
    mode = "enable_hi_float_32_execution"
    near = only_error(parse_op_precision_mode(f"[ByOpType]\nA={mode + 'x' * 36}\n"))
    far = only_error(parse_op_precision_mode(f"[ByOpType]\nA={mode + 'x' * 37}\n"))
    assert (near.suggestion, far.suggestion) == (mode, "")
    assert "did you mean" not in far.message


def test_names_run_together_show_three_marks_then_an_ellipsis() -> None:
    three = only_error(parse_modify_mixlist('{"black-list": {"to-add": ["A;B、C D"]}}'))
    four = only_error(parse_modify_mixlist('{"black-list": {"to-add": ["A;B、C D；E"]}}'))
    assert "is 4 names run together (by ';', '、', ' '), and" in three.message
    assert "is 5 names run together (by ';', '、', ' ', ...), and" in four.message


def test_a_note_on_a_line_holding_a_full_width_mark_carries_no_hint_only_the_error_does() -> None:
    result = parse_op_debug_config("oom，dump_cce")
    (note,) = notes(result)
    assert note.message == "line 1, column 1: no 'op_debug_config =' key; read as the option list"
    assert only_error(result).message.endswith("(the line holds full-width '，'; write ',')")


def test_deeply_nested_json_is_said_to_be_nested_too_deeply() -> None:
    issue = only_error(parse_aoe_config("[" * 100_000))
    assert issue.message == "invalid JSON: it is nested too deeply"


def test_notes_past_100_are_counted_in_a_closing_note() -> None:
    text = "\n".join(f"Op{i}::InputDtype:fp16,OutputDtype:float16" for i in range(103))
    result = parse_customize_dtypes(text)
    assert errors(result) == []
    assert len(result.issues) == 101
    closing = result.issues[-1]
    assert (closing.message, closing.normalized, closing.summary) == (
        "3 more note(s) were not listed",
        True,
        True,
    )


# Properties: nothing raises, every answer is structured ------------------------------------------

_LINE_TOKENS = [
    "op_debug_config",
    "op_debug_list",
    "=",
    ",",
    "::",
    ":",
    "OpType",
    "opType::",
    "oom",
    "ccec_O0",
    "[ByOpType]",
    "[ByNodeName]",
    "[",
    "]",
    "keep_fp16",
    "InputDtype:",
    "OutputDtype:",
    "float16",
    "#",
    ";",
    " ",
    "\n",
    "\r\n",
    "\ufeff",
    "\x00",
    "层",
]
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.sampled_from(["on", "O1"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "Switch",
                    "GraphFusion",
                    "UBFusion",
                    "ALL",
                    "black-list",
                    "gray-list",
                    "to-add",
                    "tune_ops_name",
                    "feature",
                    "tune_optimization_level",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


def check_all_parsers(text: str) -> None:
    for parse, result_type in PARSERS.values():
        result = parse(text)
        assert isinstance(result, result_type)
        assert all(isinstance(issue, ParseIssue) for issue in result.issues)
        assert not any("could not be parsed" in issue.message for issue in result.issues)


@settings(max_examples=200)
@given(st.text(max_size=200))
def test_property_random_text_never_raises(text: str) -> None:
    check_all_parsers(text)


@settings(max_examples=200)
@given(st.binary(max_size=200))
def test_property_random_bytes_never_raise(data: bytes) -> None:
    text, issue = decode_attachment(data)
    assert (text is None) != (issue is None)
    if text is not None:
        check_all_parsers(text)


@settings(max_examples=200)
@given(st.lists(st.sampled_from(_LINE_TOKENS) | st.text(max_size=4), max_size=40))
def test_property_token_soup_never_raises(tokens: list[str]) -> None:
    check_all_parsers("".join(tokens))


@settings(max_examples=200)
@given(_json_values, st.booleans())
def test_property_json_shapes_never_raise(value: object, comment: bool) -> None:
    text = json.dumps(value, indent=1)
    check_all_parsers(text + "// end" if comment else text)


@settings(max_examples=200)
@given(st.text(max_size=60))
def test_property_path_check_never_raises(path: str) -> None:
    issue = check_path_chars(path)
    assert issue is None or 0 <= issue.column <= len(path)


@pytest.mark.parametrize(
    ("option", "config", "text", "expected"),
    [
        (  # R-MML-1: the source's ops are list items; a comma inside one names no op
            "modify_mixlist",
            {"precision_mode_v2": "mixed_float16"},
            '{"black-list": {"to-add": ["MatMul,Cast", "Bias"]}}',
            "op name 'MatMul,Cast' is 2 names run together (by ','), and names no op; "
            "give each op its own list item",
        ),
        (  # R-AOE-7
            "aoe_config_file",
            {"aoe_mode": "2"},
            '{"tune_ops_type": ["Add，Mul"]}',
            "op name 'Add，Mul' is 2 names run together (by '，')",
        ),
        (  # R-OPM-3
            "op_precision_mode",
            {},
            "[ByOpType]\nMatMul；Add=high_precision\n",
            "line 2, column 1: name 'MatMul；Add' is 2 names run together (by '；')",
        ),
        (  # R-CDT-2: one op a line
            "customize_dtypes",
            {"precision_mode_v2": "fp16"},
            "Relu1，Relu2::InputDtype:float16,OutputDtype:float16",
            "op name 'Relu1，Relu2' is 2 names run together (by '，'), and names no op; give "
            "each op its own line",
        ),
        (  # R-FSF-2
            "fusion_switch_file",
            {},
            '{"Switch": {"GraphFusion": {"SoftmaxFusionPass ALL": "on"}}}',
            "pass name 'SoftmaxFusionPass ALL' is 2 names run together (by ' '), and names no pass",
        ),
        (  # R-ODC-1: ops separated by English commas, an op type written OpType::typeName
            "op_debug_config",
            {},
            "op_debug_config=oom\nop_debug_list=GatherV2;ReduceSum\n",
            "op name 'GatherV2;ReduceSum' is 2 names run together (by ';'), and names no op; "
            "separate ops with ','",
        ),
        (  # a space an input method leaves at the end (U+3000) is kept by JSON: no op's
            "modify_mixlist",
            {"precision_mode_v2": "mixed_float16"},
            '{"black-list": {"to-add": ["Cast\u3000"]}}',
            "op name 'Cast\\u3000' begins or ends with a space, which no op's name does; remove it",
        ),
        (
            "op_debug_config",
            {},
            "op_debug_config=oom\nop_debug_list=OpType\uff1a\uff1aReduceSum\n",
            "write 'OpType::ReduceSum'",
        ),
        (
            "op_debug_config",
            {},
            "op_debug_config=oom\nop_debug_list=Add;OpType::ReduceSum\n",
            "op name 'Add;OpType::ReduceSum' is 2 names run together (by ';')",
        ),
        (
            "op_debug_config",
            {},
            "op_debug_config=oom\nop_debug_list=GatherV2,OpType:ReduceSum\n",
            "op name 'OpType:ReduceSum' is an op type written otherwise than 'OpType::'; write "
            "'OpType::ReduceSum'",
        ),
    ],
)
def test_a_name_that_is_names_run_together_is_refused_not_kept_matching_nothing(
    option: str, config: dict[str, Any], text: str, expected: str
) -> None:
    """No op type, TensorFlow node name or pass name holds a list separator or a space: kept,
    such a name would match nothing and the entry would do nothing, silently."""
    answer = resolve(
        ResolveRequest("atlas-a2", {option: "/job/f", **config}, attachments={option: text})
    )
    errors = [d for d in answer.errors if d.option == option]
    assert errors and expected in errors[0].message, errors
    assert option not in answer.options


@pytest.mark.parametrize(
    ("option", "config", "text", "said"),
    [
        ("modify_mixlist", {"precision_mode_v2": "mixed_float16"}, "{}", "moves no op"),
        ("modify_mixlist", {"precision_mode_v2": "mixed_float16"}, '{"white-list": {}}', "moves"),
        ("op_precision_mode", {}, "# modes to come\n[ByOpType]\n", "gives no op a mode"),
        ("customize_dtypes", {"precision_mode_v2": "fp16"}, "", "names no op"),
    ],
)
def test_a_file_that_changes_nothing_is_accepted_and_said_to(
    option: str, config: dict[str, Any], text: str, said: str
) -> None:
    """R-MML-1, R-OPM-3, R-CDT-2: a file that names no op is valid, and does nothing: a note
    says so (the other formats refuse an empty file: it lacks what they require)."""
    answer = resolve(
        ResolveRequest("atlas-a2", {option: "/job/f", **config}, attachments={option: text})
    )
    assert answer.ok and answer.options[option] == "/job/f"
    (note,) = [d for d in answer.diagnostics if d.option == option]
    assert (note.code.value, said in note.message) == ("NORMALIZED", True), note


def test_r_mml_1_a_name_of_thousands_run_together_is_said_in_a_short_message() -> None:
    """The marks a name holds are named, a few of them: a 700 KB list item of ';' runs and
    full-width marks gives a message of one line, not of the item's size."""
    item = ";".join("a" * (i % 7 + 1) for i in range(100_000)) + "；、，"
    text = json.dumps({"black-list": {"to-add": [item]}}, ensure_ascii=False)
    answer = resolve(
        ResolveRequest(
            "atlas-a2",
            {"modify_mixlist": "/m.json", "precision_mode_v2": "mixed_float16"},
            attachments={"modify_mixlist": text},
        )
    )
    (error,) = [d for d in answer.errors if d.option == "modify_mixlist"]
    assert "names run together (by ';', '；、，')" in error.message
    assert len(error.message) < 1_000


def test_r_prec_2_bfloat16_is_not_suggested_where_the_product_refuses_it() -> None:
    """'bf16' is near 'bfloat16', which R-PREC-2 refuses on atlas-training: the suggestion is
    not given there (it would only trade one failure for another), and the note says why."""
    text = "OpType::Relu:InputDtype:bf16,OutputDtype:float16"

    def advice(product: str, config: dict[str, Any]) -> Any:
        answer = resolve(
            ResolveRequest(product, {"customize_dtypes": "/c.cfg", **config}, attachments={
                "customize_dtypes": text
            })
        )  # fmt: skip
        (said,) = [d for d in answer.diagnostics if d.option == "customize_dtypes"]
        return said

    legacy = advice("atlas-training", {"precision_mode": "allow_mix_precision"})
    assert legacy.suggestion == ""
    assert legacy.message.endswith(
        "(bfloat16, which it may stand for, is not supported on atlas-training: R-PREC-2)"
    )
    assert "did you mean" not in legacy.message
    assert advice("atlas-a2", {"precision_mode_v2": "fp16"}).suggestion == "bfloat16"


def test_r_odc_1_spaces_around_the_op_type_prefix_are_read_as_the_prefix() -> None:
    """'OpType ::ReduceSum' is the op type ReduceSum, as customize_dtypes reads its prefix, not
    an unknown prefix 'OpType ' said to be 'OpType'."""
    parsed = parse_op_debug_config("op_debug_config=oom\nop_debug_list=OpType ::ReduceSum\n")
    assert not parsed.issues and parsed.op_debug_list == ("OpType::ReduceSum",)


def test_r_cdt_2_an_error_is_shown_before_the_warnings_that_would_crowd_it_out() -> None:
    """25 lines of a dtype the resolver does not know (a warning each, two a line), then one
    line that breaks the format: the error is among the shown findings, with its line, not
    counted in "more problems not shown"."""
    lines = [f"Op{i}::InputDtype:fp16,OutputDtype:fp16" for i in range(25)]
    lines.append("OpType::Relu:InputDtype:float16,OutputDtype:float16,")
    answer = resolve(
        ResolveRequest(
            product="atlas-a2",
            config={"customize_dtypes": "/x.cfg", "precision_mode_v2": "fp16"},
            attachments={"customize_dtypes": "\n".join(lines)},
        )
    )
    first = answer.diagnostics[0]
    assert (first.code.value, first.option) == ("INVALID_VALUE", "customize_dtypes")
    assert first.message.startswith("customize_dtypes file: line 26, column 53: empty dtype")
    assert [d.code.value for d in answer.diagnostics[1:3]] == ["ADVICE", "ADVICE"]
    assert answer.diagnostics[-1].message.endswith("31 more problems not shown.")


def test_r_fsf_2_more_problems_than_shown_says_how_many_and_that_reading_stopped() -> None:
    text = '{"Switch":{"GraphFusion":{' + ",".join(f'"P{i}":"maybe"' for i in range(300)) + "}}}"
    request = ResolveRequest(
        product="atlas-a2",
        config={"fusion_switch_file": "/f"},
        attachments={"fusion_switch_file": text},
    )
    last = resolve(request).diagnostics[-1]
    assert last.message.endswith(
        "80 more problems not shown; reading stopped after 100 errors; fix these and check again."
    )


def test_r_odc_1_a_mistyped_key_line_is_named_as_such() -> None:
    """'op_debug_list: GatherV2' has no '=': not 'op_debug_config set again', which the user
    never wrote."""
    parsed = parse_op_debug_config("op_debug_config = oom\nop_debug_list: GatherV2\n")
    (issue,) = [i for i in parsed.issues if i.is_error]
    assert issue.line == 2 and "write 'op_debug_list = op1,op2'" in issue.message


@pytest.mark.parametrize(
    "text",
    [
        '{\n"black-list": {"to-add": ["MatMul"]},\n"white-list": {\n  "to-add": ["MatMul"]\n}}',
        '{\n"black-list": {\n  "to-remove": ["MatMul"],\n  "to-add": ["MatMul"]\n}}',
    ],
    ids=["added-to-two-lists", "added-and-removed"],
)
def test_r_mml_1_an_op_moved_two_ways_is_refused_at_the_to_add_list(text: str) -> None:
    """The source does not say which move wins, as for repeated keys elsewhere."""
    issue = only_error(parse_modify_mixlist(text))
    assert "'MatMul'" in issue.message and "which wins" in issue.message
    assert (issue.line, issue.column) == (4, 3)


def test_r_mml_1_an_issue_far_into_a_long_file_is_placed_at_its_list() -> None:
    """Finding a position reads the file token by token: past MAX_SOUGHT_TOKENS the issue is
    placed at the nearest parent already found, and its message still names where it is."""
    from npu_resolver.attachments._json_layout import MAX_SOUGHT_TOKENS

    count = MAX_SOUGHT_TOKENS + 10
    near = parse_modify_mixlist('{"black-list": {"to-add": [' + '"a",' * 10 + "1]}}")
    far = parse_modify_mixlist('{"black-list": {"to-add": [' + '"a",' * count + "1]}}")
    near_issue, far_issue = only_error(near), only_error(far)
    assert (near_issue.line, near_issue.column) == (1, 68)
    assert (far_issue.line, far_issue.column) == (1, 17)  # the list it is in, at its key
    assert f"item {count + 1} must be a string" in far_issue.message
    held = "(the line and column are those of 'black-list' > 'to-add', which holds it)"
    assert far_issue.message.endswith(held) and held not in near_issue.message


def test_a_key_repeated_far_into_a_long_file_is_an_error_said_without_a_place() -> None:
    from npu_resolver.attachments._json_layout import MAX_SOUGHT_TOKENS

    switches = ",".join(f'"P{i}":"on"' for i in range(MAX_SOUGHT_TOKENS))
    far = parse_fusion_switch('{"Switch":{"GraphFusion":{' + switches + ',"P1":"off"}}}')
    near = parse_fusion_switch('{"Switch":{"GraphFusion":{"P1":"on","P1":"off"}}}')
    assert (
        only_error(near).message == "line 1, column 37: key 'P1' appears twice in the same object"
    )
    assert only_error(far).message == (
        "key 'P1' appears twice in the same object (too far into the file to say where)"
    )


def test_r_cdt_2_notes_left_out_are_said_in_a_closing_note_and_do_not_refuse_the_file() -> None:
    text = "\n".join(f"Op{i}::InputDtype:fp16,OutputDtype:float16" for i in range(103))
    answer = resolve(
        ResolveRequest(
            product="atlas-a2",
            config={"customize_dtypes": "/x.cfg", "precision_mode_v2": "fp16"},
            attachments={"customize_dtypes": text},
        )
    )
    assert answer.ok and answer.options["customize_dtypes"] == "/x.cfg"
    last = answer.diagnostics[-1]
    assert (last.code.value, last.rule) == ("NORMALIZED", "R-CDT-2")
    assert last.message == (
        "customize_dtypes file: 80 more problems not shown; 3 more note(s) were not listed."
    )


def test_r_fsf_2_the_closing_line_of_a_long_list_of_problems_cites_the_files_rule() -> None:
    text = '{"Switch":{"GraphFusion":{' + ",".join(f'"P{i}":"maybe"' for i in range(300)) + "}}}"
    request = ResolveRequest(
        product="atlas-a2",
        config={"fusion_switch_file": "/f"},
        attachments={"fusion_switch_file": text},
    )
    last = resolve(request).diagnostics[-1]
    assert (last.code.value, last.option, last.rule) == (
        "INVALID_VALUE",
        "fusion_switch_file",
        "R-FSF-2",
    )


def test_r_aoe_7_a_key_written_twice_is_placed_at_its_last_writing_which_json_keeps() -> None:
    """The value judged is the last one written (json.loads keeps it): its issues, and those of
    its list's items, point there, not at the first writing."""
    twice = parse_aoe_config('{"tune_ops_type": ["Add"],\n"tune_ops_type": "Mul"}')
    assert [issue.message for issue in twice.issues] == [
        "line 2, column 1: key 'tune_ops_type' appears twice in the same object",
        "line 2, column 1: 'tune_ops_type' must be a list of strings, not a string",
    ]
    items = parse_aoe_config('{"tune_ops_type": ["Add", 3],\n"tune_ops_type": ["Mul",\n 5]}')
    assert [issue.message for issue in items.issues][1:] == [
        "line 3, column 2: 'tune_ops_type' > item 2 must be a string, not a number"
    ]


def test_r_odc_1_an_op_name_holding_a_colon_is_refused_as_no_op_has_one() -> None:
    """No op's name holds ':' (a tensor's does, GatherV2:0): kept as a name, it would match no
    op and the options would quietly apply to nothing."""
    parsed = parse_op_debug_config(
        "op_debug_config = oom\nop_debug_list=OpType:,Foo:Bar,GatherV2:0,Add,OpType::Relu:0\n"
    )
    assert parsed.op_debug_list == ("Add",)
    assert [issue.message for issue in parsed.issues] == [
        *(
            f"line 2, column {column}: op name '{name}' holds ':', which no op's name does; "
            "an op type is written 'OpType::typeName'"
            for column, name in ((15, "OpType:"), (23, "Foo:Bar"), (31, "GatherV2:0"))
        ),
        "line 2, column 46: op type 'Relu:0' holds ':', which no type does",
    ]
