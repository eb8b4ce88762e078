"""Platform policy files: what a good one does and how each kind of bad one is refused."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import npu_resolver
from npu_resolver import (
    PolicyError,
    ResolveRequest,
    load_policy,
    parse_policy,
    resolve,
)
from npu_resolver._policy import toml_key

EXAMPLE = """
[profiles.default.defaults]
hccl_timeout = 3600
[profiles.default.locked]
enable_exception_dump = 1
[profiles.default.products.atlas-training.defaults]
hccl_timeout = 1224
[profiles.debug.defaults]
op_debug_level = 1
"""


def refused(text: str) -> str:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.toml")
    return str(info.value)


def test_example_policy_defaults_locks_and_product_overrides() -> None:
    policy = parse_policy(EXAMPLE, "p.toml")
    a2 = resolve(ResolveRequest(product="atlas-a2"), policy=policy)
    assert a2.options["hccl_timeout"] == 3600
    assert a2.provenance["hccl_timeout"].source == "POLICY"
    assert a2.options["enable_exception_dump"] == 1
    assert a2.provenance["enable_exception_dump"].source == "POLICY_LOCKED"
    assert a2.policy_version == policy.version
    training = resolve(ResolveRequest(product="Ascend910ProB"), policy=policy)
    assert training.options["hccl_timeout"] == 1224


def test_r_exd_1_locked_dump_beats_caller_with_policy_locked_warning() -> None:
    policy = parse_policy(EXAMPLE, "p.toml")
    result = resolve(
        ResolveRequest(product="atlas-a2", config={"enable_exception_dump": 0}), policy=policy
    )
    assert result.ok
    assert result.options["enable_exception_dump"] == 1
    assert result.provenance["enable_exception_dump"].requested == 0
    assert [d.code for d in result.diagnostics] == ["POLICY_LOCKED"]
    strict = resolve(
        ResolveRequest(product="atlas-a2", config={"enable_exception_dump": 0}, strict=True),
        policy=policy,
    )
    # strict turns drops into errors (the contract), not a lock's replacement: still a warning
    assert strict.ok
    assert [(d.severity, d.code) for d in strict.diagnostics] == [("WARNING", "POLICY_LOCKED")]


def test_r_hct_3_policy_default_600_rounds_to_544_on_training() -> None:
    policy = parse_policy("[profiles.default.defaults]\nhccl_timeout = 600\n", "p.toml")
    result = resolve(ResolveRequest(product="atlas-training"), policy=policy)
    assert result.options["hccl_timeout"] == 544
    assert result.provenance["hccl_timeout"].source == "POLICY"
    assert [d.code for d in result.diagnostics] == ["ROUNDED"]


def test_debug_profile_turns_cache_off_through_r_occ_2() -> None:
    policy = parse_policy(EXAMPLE, "p.toml")
    result = resolve(ResolveRequest(product="atlas-a2", profile="debug"), policy=policy)
    assert result.options["op_debug_level"] == 1
    assert result.options["op_compiler_cache_mode"] == "disable"


def test_unknown_profile_names_the_known_ones() -> None:
    policy = parse_policy(EXAMPLE, "p.toml")
    result = resolve(ResolveRequest(product="atlas-a2", profile="debgu"), policy=policy)
    assert [d.code for d in result.diagnostics] == ["UNKNOWN_PROFILE"]
    assert "debug, default" in result.diagnostics[0].message
    assert result.diagnostics[0].suggestion == "debug"


def test_product_table_accepts_aliases() -> None:
    policy = parse_policy(
        "[profiles.default.products.Ascend910B3.defaults]\nhccl_timeout = 7\n", "p.toml"
    )
    assert resolve(ResolveRequest(product="atlas-a2"), policy=policy).options["hccl_timeout"] == 7


def test_all_products_default_skips_products_without_the_option() -> None:
    policy = parse_policy("[profiles.default.defaults]\ninput_batch_cpy = true\n", "p.toml")
    training = resolve(ResolveRequest(product="atlas-training"), policy=policy)
    assert "input_batch_cpy" not in training.options
    assert training.diagnostics == ()
    assert resolve(ResolveRequest(product="atlas-a2"), policy=policy).options["input_batch_cpy"]


def test_version_is_content_hash_stable_under_formatting() -> None:
    one = parse_policy("[profiles.default.defaults]\nhccl_timeout = 3600\n", "a.toml")
    two = parse_policy("# comment\n[profiles.default.defaults]\nhccl_timeout=3600\n", "b.toml")
    three = parse_policy("[profiles.default.defaults]\nhccl_timeout = 3601\n", "c.toml")
    assert one.version == two.version != three.version


def test_version_changes_with_an_every_product_value_beside_a_product_table() -> None:
    """Answers are cached by the version: a change of the every-product table while a product
    table of the same kind exists must give a new one."""
    product = "[profiles.default.products.atlas-a2.defaults]\nhccl_timeout = 7200\n"
    one = parse_policy(f"[profiles.default.defaults]\nhccl_timeout = 3600\n{product}", "a")
    two = parse_policy(f"[profiles.default.defaults]\nhccl_timeout = 1800\n{product}", "b")
    assert one.version != two.version


def test_refuses_one_products_table_written_under_two_aliases() -> None:
    message = refused(
        "[profiles.default.products.atlas-a2.defaults]\nhccl_timeout = 3600\n"
        '[profiles.default.products."Atlas A2".defaults]\nhccl_timeout = 7200\n'
    )
    assert (
        '[profiles.default.products."Atlas A2".defaults] repeats '
        "[profiles.default.products.atlas-a2.defaults]: both name atlas-a2, whose table is "
        "written once, under one of its names"
    ) in message


@pytest.mark.parametrize(("kind", "value"), [("defaults", "1"), ("locked", '"x"')])
def test_refuses_defaults_or_locked_that_is_not_a_table(kind: str, value: str) -> None:
    """`locked = "x"` read as no locks would drop every lock silently."""
    message = refused(f"[profiles.default]\n{kind} = {value}\n")
    assert f"[profiles.default.{kind}] must be a table of option = value" in message


def test_refuses_invalid_toml_naming_the_file() -> None:
    message = refused("[profiles.default.defaults\nx = 1")
    assert message.startswith("p.toml: invalid TOML")


def test_refuses_unknown_option_naming_table_and_key() -> None:
    message = refused("[profiles.default.defaults]\nhccl_timeot = 1\n")
    assert "[profiles.default.defaults] hccl_timeot: unknown option" in message
    assert "'hccl_timeout'" in message


def test_refuses_wrong_type_naming_table_and_key() -> None:
    message = refused("[profiles.default.locked]\nenable_exception_dump = 'yes'\n")
    assert "[profiles.default.locked] enable_exception_dump" in message


def test_r_hct_3_refuses_value_out_of_product_range() -> None:
    message = refused("[profiles.default.products.atlas-training.defaults]\nhccl_timeout = 20000\n")
    assert "[profiles.default.products.atlas-training.defaults] hccl_timeout" in message
    assert "R-HCT-3" in message


def test_r_hct_3_all_products_value_out_of_range_somewhere_is_refused() -> None:
    message = refused("[profiles.default.defaults]\nhccl_timeout = 20000\n")
    assert "atlas-training" in message and "hccl_timeout" in message


def test_r_ibc_1_refuses_option_the_product_lacks() -> None:
    message = refused("[profiles.default.products.atlas-training.locked]\ninput_batch_cpy = true\n")
    assert (
        "input_batch_cpy: the option does not exist on atlas-training (only atlas-350, atlas-a3, "
        "atlas-a2: R-IBC-1); remove it from this table"
    ) in message


def test_r_pm2_2_refuses_value_the_product_lacks() -> None:
    table = "[profiles.default.products.atlas-training.defaults]\n"
    message = refused(table + "precision_mode_v2 = 'mixed_bfloat16'\n")
    assert "R-PM2-2" in message


def test_r_vpl_2_refuses_locks_that_contradict_each_other() -> None:
    message = refused(
        "[profiles.strict.locked]\nvariable_placement = 'Host'\nmix_compile_mode = false\n"
    )
    assert "locked variable_placement in profile 'strict'" in message and "R-VPL-2" in message


def test_r_prec_1_refuses_locks_that_clash_only_in_online_inference() -> None:
    """force_fp16 is a value of online inference: in training the lock cannot act and does not
    meet precision_mode_v2, but every inference job under the profile would fail on the pair."""
    message = refused(
        "[profiles.default.locked]\nprecision_mode = 'force_fp16'\nprecision_mode_v2 = 'origin'\n"
    )
    assert (
        "locked precision_mode in profile 'default' on every product in online inference: "
        in message
    )
    assert "R-PREC-1" in message and " in training" not in message


def test_a_clash_in_every_mode_and_on_every_product_is_said_once_r_vpl_2() -> None:
    """Locks for every product clash alike on each: one problem names them all (the file's
    writer read the same words five times)."""
    message = refused(
        "[profiles.default.locked]\nvariable_placement = 'Host'\nmix_compile_mode = false\n"
    )
    assert message.count("R-VPL-2") == 1
    assert "locked variable_placement in profile 'default' on every product: " in message


def test_a_clash_in_each_products_own_table_names_each_table_r_vpl_2() -> None:
    """The same clash in two products' own tables is said for each, each naming its table:
    merged, the problem named one table, and the other was found on the next check."""
    message = refused(
        "[profiles.default.products.atlas-a2.locked]\nvariable_placement = 'Host'\n"
        "[profiles.default.products.atlas-a3.locked]\nvariable_placement = 'Host'\n"
        "[profiles.default.locked]\nmix_compile_mode = false\n"
    )
    assert message.count("R-VPL-2") == 2
    for pid in ("atlas-a2", "atlas-a3"):
        assert (
            f"locked variable_placement in profile 'default' on {pid}: " in message
            and f"[profiles.default.products.{pid}.locked]" in message
        )


def test_locks_that_clash_are_refused_once_naming_every_profile_r_prec_1_r_vpl_2() -> None:
    """R-PREC-1: a profile's own lock meets the default profile's inherited one. R-VPL-2:
    profiles that hold the same locks (inherited here) are checked once and named together."""
    message = refused(
        "[profiles.default.locked]\nprecision_mode = 'force_fp16'\n"
        "[profiles.b.locked]\nprecision_mode_v2 = 'origin'\n"
        "[profiles.c.defaults]\nhccl_timeout = 544\n"
    )
    assert "locked precision_mode in profile 'b' on every product in online inference: " in message
    assert "profile 'c'" not in message and "profile 'default'" not in message
    message = refused(
        "[profiles.default.locked]\nvariable_placement = 'Host'\nmix_compile_mode = false\n"
        "[profiles.c.defaults]\nhccl_timeout = 544\n[profiles.d.defaults]\nhccl_timeout = 68\n"
    )
    assert "in profiles 'default', 'c', 'd' (the same locks) on every product: " in message
    assert message.count("(the same locks)") == 1


def test_r_ipl_2_a_clash_with_an_inherited_lock_names_both_tables() -> None:
    """The other side of a clash may be the default profile's lock: its table is named too,
    so the platform team sees both places to edit (it named only the profile's own)."""
    message = refused(
        "[profiles.default.locked]\nmix_compile_mode = true\n"
        "[profiles.a.locked]\niterations_per_loop = 10\n"
    )
    line = next(line for line in message.splitlines() if "on every product:" in line)
    assert line.endswith(
        "(R-IPL-2) [profiles.a.locked]; mix_compile_mode locked in [profiles.default.locked]"
    )


def test_a_lock_the_locked_mode_refuses_is_refused_at_load() -> None:
    """force_fp16 is for online inference; with graph_run_mode locked to 1 no job can use it,
    and every job under the profile would fail."""
    message = refused(
        "[profiles.default.locked]\ngraph_run_mode = 1\nprecision_mode = 'force_fp16'\n"
    )
    assert "locked precision_mode in profile 'default' on every product in training: " in message
    assert message.rstrip().endswith("the policy locks graph_run_mode 1")


def test_a_profile_named_like_an_option_is_no_clash() -> None:
    """Messages quote the table a value came from; a profile called `deterministic` does not
    make `deterministic` a party to another lock's error (here force_fp16 refused in training,
    which a job can leave by running online inference)."""
    policy = parse_policy(
        "[profiles.deterministic.locked]\ndeterministic = 1\nprecision_mode = 'force_fp16'\n"
    )
    assert policy.profile_names() == ("deterministic",)


def test_a_quoted_profile_name_holding_a_bracket_and_an_option_is_no_clash() -> None:
    """The table path a message quotes is cut out whole, quotes and all: a `]` inside a
    profile's quoted name does not leave `deterministic` behind in the message."""
    policy = parse_policy(
        "[profiles.\"x] deterministic\".locked]\ndeterministic = 1\nprecision_mode = 'force_fp16'\n"
    )
    assert policy.profile_names() == ("x] deterministic",)


def test_a_profile_name_with_a_dot_is_quoted_where_its_table_is_named() -> None:
    """[profiles."team.a".locked] is one profile's table; written bare it would read as a
    table three levels down."""
    policy = parse_policy('[profiles."team.a".locked]\nhccl_timeout = 1800\n')
    answer = resolve(ResolveRequest("atlas-a2", profile="team.a"), policy=policy)
    assert answer.provenance["hccl_timeout"].detail == 'locked from [profiles."team.a".locked]'
    with pytest.raises(PolicyError) as refused_:
        parse_policy(
            '[profiles."team.a"]\nlockd = {}\n[profiles.plain.products."atlas a2"]\nx = 1\n'
        )
    assert '[profiles."team.a"] lockd: unknown key' in str(refused_.value)
    assert '[profiles.plain.products."atlas a2"] x: unknown key' in str(refused_.value)


def test_a_key_is_written_as_toml_reads_it_back() -> None:
    """Bare where TOML allows it; quoted otherwise, with DEL escaped (JSON leaves it raw, TOML
    refuses it raw in a quoted key)."""
    for key in (
        "default",
        "team-a_1",
        "team.a",
        "数据",
        "a b",
        'say "hi"',
        "tab\there",
        "a\x7fb",
        "",
    ):
        written = toml_key(key)
        assert tomllib.loads(f"{written} = 1") == {key: 1}, written
    assert toml_key("team-a_1") == "team-a_1"
    with pytest.raises(PolicyError) as refused_:
        parse_policy('[profiles.default.products."atlas.a2"]\n[profiles.default]\n"x y" = 1\n')
    assert '[profiles.default.products] "atlas.a2": unknown product' in str(refused_.value)
    assert '[profiles.default] "x y": unknown key' in str(refused_.value)


def test_many_profiles_with_the_same_clashing_locks_are_named_briefly() -> None:
    tables = "".join(
        f"[profiles.p{i:02}.locked]\nvariable_placement = 'Host'\nmix_compile_mode = false\n"
        for i in range(20)
    )
    message = refused(tables)
    assert message.count("R-VPL-2") == 1  # one problem for every product
    assert (
        "in profiles 'p00', 'p01', 'p02', 'p03', 'p04', 'p05', 'p06', 'p07' and 12 more " in message
    )


def test_refuses_unknown_product_and_unknown_table_keys() -> None:
    assert "atlas-9000: unknown product" in refused(
        "[profiles.default.products.atlas-9000.defaults]\n"
    )
    assert "defualts: unknown key" in refused("[profiles.default.defualts]\nhccl_timeout = 1\n")
    assert "unknown top-level key" in refused("[settings]\nx = 1\n")


def test_load_policy_reports_unreadable_and_non_utf8(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "missing.toml")
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b"[profiles.default.defaults]\n# \xe9\n")
    with pytest.raises(PolicyError) as info:
        load_policy(bad)
    assert info.value.problems == ["not UTF-8 at byte 30"]  # where the bad sequence starts


def test_empty_policy_is_refused() -> None:
    assert "defines no profile" in refused("# nothing here\n")


def test_policy_without_default_profile_leaves_unprofiled_requests_alone() -> None:
    policy = parse_policy("[profiles.gold.defaults]\nhccl_timeout = 7\n", "p.toml")
    plain = resolve(ResolveRequest(product="atlas-a2"), policy=policy)
    assert plain.ok and plain.options["hccl_timeout"] == 1836
    gold = resolve(ResolveRequest(product="atlas-a2", profile="gold"), policy=policy)
    assert gold.options["hccl_timeout"] == 7


def test_r_pm_3_a_lock_that_cannot_act_names_the_policy_and_who_can_change_it() -> None:
    policy = parse_policy('[profiles.default.locked]\nprecision_mode = "force_fp16"\n')
    result = resolve(ResolveRequest(product="atlas-a2"), policy=policy)
    (error,) = result.errors
    assert (error.code, error.option, error.rule) == (
        "UNSUPPORTED_VALUE",
        "precision_mode",
        "R-PM-3",
    )
    assert "the policy locks precision_mode" in error.message
    assert "[profiles.default.locked]" in error.message and "platform team" in error.message


def test_r_prec_1_conflict_with_a_locked_option_asks_to_remove_the_callers_one() -> None:
    policy = parse_policy('[profiles.default.locked]\nprecision_mode = "allow_fp32_to_fp16"\n')
    request = ResolveRequest(product="atlas-a2", config={"precision_mode_v2": "fp16"})
    (error,) = resolve(request, policy=policy).errors
    assert error.option == "precision_mode_v2"
    assert error.message.endswith("remove precision_mode_v2.")


def test_r_esc_1_forced_small_channel_from_the_policy_says_remove_it_from_the_policy() -> None:
    policy = parse_policy("[profiles.default.defaults]\nenable_small_channel = 0\n")
    request = ResolveRequest(product="atlas-a2", config={"graph_run_mode": 0})
    forced = [d for d in resolve(request, policy=policy).diagnostics if d.code.value == "FORCED"]
    assert [d.option for d in forced] == ["enable_small_channel"]
    assert forced[0].message.endswith("remove it from the policy.")


def test_a_lock_of_the_default_profile_holds_in_every_profile() -> None:
    """Locks are what callers cannot change: naming another profile does not escape them."""
    policy = parse_policy(EXAMPLE, "p.toml")
    debug = resolve(
        ResolveRequest("atlas-a2", {"enable_exception_dump": 0}, profile="debug"), policy=policy
    )
    assert debug.options["enable_exception_dump"] == 1
    assert debug.provenance["enable_exception_dump"].source == "POLICY_LOCKED"
    assert debug.provenance["enable_exception_dump"].detail == (
        "locked from [profiles.default.locked]"
    )
    assert [d.code for d in debug.diagnostics] == ["POLICY_LOCKED", "DEPRECATED"]
    # Defaults stay per profile: debug does not take default's hccl_timeout 3600.
    assert debug.options["hccl_timeout"] == 1836
    assert debug.options["op_debug_level"] == 1


def test_a_profile_may_lock_an_option_of_the_default_profile_to_another_value() -> None:
    policy = parse_policy(
        EXAMPLE + "[profiles.debug.locked]\nenable_exception_dump = 2\n", "p.toml"
    )
    debug = resolve(ResolveRequest("atlas-a2", profile="debug"), policy=policy)
    assert debug.options["enable_exception_dump"] == 2
    assert debug.provenance["enable_exception_dump"].detail == (
        "locked from [profiles.debug.locked]"
    )
    plain = resolve(ResolveRequest("atlas-a2"), policy=policy)
    assert plain.options["enable_exception_dump"] == 1


def test_r_qdm_1_r_buf_1_a_policy_value_the_mode_lacks_is_said_to_be_the_policys() -> None:
    """The caller never wrote it and cannot remove it: the warning names the policy's table and
    gives no advice to remove it; in the mode it is for, it applies."""
    policy = parse_policy(
        '[profiles.default.products.atlas-a2.defaults]\nquant_dumpable = "1"\n'
        '[profiles.default.products.atlas-a2.locked]\nbuffer_optimize = "l2_optimize"\n',
        "p.toml",
    )
    training = resolve(ResolveRequest(product="atlas-a2"), policy=policy)
    dropped = {d.option: d for d in training.warnings}
    assert "quant_dumpable" not in training.options and "buffer_optimize" not in training.options
    for name, rule, table in (
        ("quant_dumpable", "R-QDM-1", "default from [profiles.default.products.atlas-a2.defaults]"),
        ("buffer_optimize", "R-BUF-1", "locked from [profiles.default.products.atlas-a2.locked]"),
    ):
        diagnostic = dropped[name]
        assert (diagnostic.code, diagnostic.rule) == ("DROPPED_UNSUPPORTED_MODE", rule)
        assert diagnostic.message.startswith(f"the policy sets {name} ({table}), but ")
        assert "remove" not in diagnostic.message
    inference = resolve(
        ResolveRequest(product="atlas-a2", config={"graph_run_mode": 0}), policy=policy
    )
    assert inference.options["quant_dumpable"] == "1"
    assert inference.options["buffer_optimize"] == "l2_optimize"


def test_r_prec_1_a_policy_default_the_jobs_option_supersedes_is_named_once() -> None:
    """The message already says the value came from the policy: it is not wrapped in a
    second "the policy sets ..." lead."""
    policy = parse_policy('[profiles.default.defaults]\nprecision_mode_v2 = "fp16"\n', "p.toml")
    request = ResolveRequest(
        "atlas-a2", config={"precision_mode": "force_fp16", "graph_run_mode": 0}
    )
    (dropped,) = resolve(request, policy=policy).diagnostics
    assert (dropped.code, dropped.option, dropped.rule) == (
        "DROPPED_SUPERSEDED",
        "precision_mode_v2",
        "R-PREC-1",
    )
    assert dropped.message == (
        "precision_mode_v2 'fp16' from the policy (default from [profiles.default.defaults]) "
        "is dropped because the job sets precision_mode."
    )


def test_policy_check_names_the_defaults_a_lock_always_wins_over() -> None:
    """A default the default profile's lock (held by every profile) or a lock of the same
    table overrides can never act: the summary says so. One product's lock over a default
    for every product is not flagged: the default still acts on the other products."""
    policy = parse_policy(
        "[profiles.default.locked]\nhccl_timeout = 3600\n"
        "[profiles.gold.defaults]\nhccl_timeout = 7200\nop_wait_timeout = 100\n"
        "[profiles.gold.products.atlas-a2.locked]\nop_wait_timeout = 200\n"
        "[profiles.gold.products.atlas-a3.defaults]\nop_wait_timeout = 300\n"
        "[profiles.gold.products.atlas-a3.locked]\nop_wait_timeout = 400\n",
        "p.toml",
    )
    assert policy.summary()["defaults_that_never_act"] == [
        "hccl_timeout default from [profiles.gold.defaults] never acts on any product: "
        "it is locked from [profiles.default.locked]",
        "op_wait_timeout default from [profiles.gold.products.atlas-a3.defaults] never acts "
        "on atlas-a3: it is locked from [profiles.gold.products.atlas-a3.locked]",
    ]
    assert "defaults_that_never_act" not in parse_policy(EXAMPLE, "p.toml").summary()


def test_r_ibc_1_a_default_a_lock_wins_over_is_said_of_the_products_that_have_the_option() -> None:
    """input_batch_cpy exists only on atlas-350, atlas-a3 and atlas-a2: a default the default
    profile's lock always wins over is said to never act there, not on any product."""
    policy = parse_policy(
        "[profiles.default.locked]\ninput_batch_cpy = true\n"
        "[profiles.x.defaults]\ninput_batch_cpy = false\n",
        "p.toml",
    )
    assert policy.shadowed_defaults() == [
        "input_batch_cpy default from [profiles.x.defaults] never acts on atlas-350, atlas-a3, "
        "atlas-a2: it is locked from [profiles.default.locked]"
    ]


def test_a_default_locked_on_every_product_by_different_tables_is_said_never_to_act() -> None:
    """The default profile locks hccl_timeout for all products, and in its own tables for the
    two legacy ones: a profile's default for every product is locked everywhere, by three
    tables, and acts on none; the summary says so and names each table's products."""
    policy = parse_policy(
        "[profiles.default.locked]\nhccl_timeout = 3600\n"
        "[profiles.default.products.atlas-training.locked]\nhccl_timeout = 1224\n"
        "[profiles.default.products.atlas-300i-duo.locked]\nhccl_timeout = 1224\n"
        "[profiles.debug.defaults]\nhccl_timeout = 7200\n",
        "p.toml",
    )
    assert policy.shadowed_defaults() == [
        "hccl_timeout default from [profiles.debug.defaults] never acts on any product: it is "
        "locked from [profiles.default.locked] on atlas-350, atlas-a3, atlas-a2; it is locked "
        "from [profiles.default.products.atlas-training.locked] on atlas-training; it is locked "
        "from [profiles.default.products.atlas-300i-duo.locked] on atlas-300i-duo"
    ]


def test_r_aoe_1_a_training_default_in_a_profile_locked_to_online_inference_never_acts() -> None:
    """A profile that locks graph_run_mode 0 and sets a training-only default (aoe_mode,
    R-AOE-1): every job of it drops the default without a word, so the summary says it never
    acts, on the products that have the option."""
    policy = parse_policy(
        '[profiles.infer.locked]\ngraph_run_mode = 0\n[profiles.infer.defaults]\naoe_mode = "2"\n'
        "hccl_timeout = 3600\n",
        "p.toml",
    )
    assert policy.shadowed_defaults() == [
        "aoe_mode default from [profiles.infer.defaults] never acts on atlas-a3, atlas-a2, "
        "atlas-training: it acts in training only (R-AOE-1), and graph_run_mode 0 (online "
        "inference) is locked from [profiles.infer.locked]"
    ]
    result = npu_resolver.resolve(
        npu_resolver.ResolveRequest(product="atlas-a2", profile="infer"), policy=policy
    )
    assert "aoe_mode" not in result.options and not result.diagnostics


@pytest.mark.parametrize(
    ("profile", "product", "table"),
    [
        ("gold", "atlas-training", "profiles.gold.products.atlas-training.locked"),
        ("a.b", "atlas-training", 'profiles."a.b".products.atlas-training.defaults'),
        ("default", "atlas-300i-duo", 'profiles.default.products."Atlas 300I Duo".defaults'),
    ],
)
def test_r_hct_3_a_rounded_policy_value_names_the_table_to_write_it_in(
    profile: str, product: str, table: str
) -> None:
    """The ROUNDED note tells the platform team where to write the value that takes effect:
    the product's table in the profile the value came from (its name as written, quoted when
    it must be), or the very table, as written, when it already is the product's."""
    policy = parse_policy(
        "[profiles.gold.locked]\nhccl_timeout = 600\n"
        '[profiles."a.b".defaults]\nhccl_timeout = 3600\n'
        '[profiles.default.products."Atlas 300I Duo".defaults]\nhccl_timeout = 700\n',
        "p.toml",
    )
    request = npu_resolver.ResolveRequest(product=product, profile=profile)
    said = npu_resolver.resolve(request, policy=policy).diagnostics
    (rounded,) = [d for d in said if d.code is npu_resolver.Code.ROUNDED]
    assert rounded.message.endswith(f" in [{table}].")


def test_policy_check_says_when_no_profile_is_the_default_one() -> None:
    """Profile names are case-sensitive: a file whose only profile is 'Default' reaches no job
    that names no profile. The summary says so, and why; with a 'default' profile it says
    nothing."""
    policy = parse_policy("[profiles.Default.defaults]\nhccl_timeout = 3600\n", "p.toml")
    assert policy.summary()["no_default_profile"] == [
        "no profile is named 'default': a job that names no profile gets none of this "
        "policy's values, its locks included; 'Default' differs from 'default' only in case "
        "(profile names are case-sensitive)"
    ]
    result = npu_resolver.resolve(npu_resolver.ResolveRequest("atlas-a2"), policy=policy)
    assert result.provenance["hccl_timeout"].source is npu_resolver.Source.DEFAULT
    only_named = parse_policy("[profiles.debug.defaults]\nhccl_timeout = 3600\n", "p.toml")
    assert only_named.summary()["no_default_profile"][0].endswith("its locks included")
    assert "no_default_profile" not in parse_policy(EXAMPLE, "p.toml").summary()


def test_a_product_table_named_by_one_chip_is_said_to_reach_every_chip_of_its_product() -> None:
    """[...products.Ascend910B4] is atlas-a2's table: a job on Ascend910B1 gets its values
    too (the resolver tells products apart, not chips), which the writer of a per-chip table
    most likely did not mean; the summary says so. A product of one chip (Ascend310P3) or a
    table named by the product is not flagged."""
    policy = parse_policy(
        '[profiles.default.products.ascend910b4.locked]\naicore_num = "20|40"\n'
        "[profiles.default.products.Ascend310P3.defaults]\nhccl_timeout = 680\n"
        "[profiles.default.products.atlas-a3.defaults]\nhccl_timeout = 3600\n",
        "p.toml",
    )
    assert policy.summary()["tables_named_by_a_chip"] == [
        "[profiles.default.products.ascend910b4.locked] names the chip Ascend910B4, but applies "
        "to every atlas-a2 job, whichever its chip (Ascend910B1, Ascend910B2, Ascend910B2C, "
        "Ascend910B3, Ascend910B4-1): the resolver tells products apart, not chips; name the "
        "table by the product"
    ]
    other_chip = npu_resolver.resolve(npu_resolver.ResolveRequest("Ascend910B1"), policy=policy)
    assert other_chip.provenance["aicore_num"].source is npu_resolver.Source.POLICY_LOCKED
    assert "tables_named_by_a_chip" not in parse_policy(EXAMPLE, "p.toml").summary()


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "[profiles.default.defaults]\nHCCL_EXEC_TIMEOUT = 600\n",
            "[profiles.default.defaults] HCCL_EXEC_TIMEOUT: unknown option; HCCL_EXEC_TIMEOUT is "
            "an environment variable (R-HCT-4), which a policy cannot set: a job's environment "
            "is its own; set the option hccl_timeout instead",
        ),
        (
            '[profiles.default.locked]\nNPU_COLLECT_PATH = "/x"\n',
            "[profiles.default.locked] NPU_COLLECT_PATH: unknown option; NPU_COLLECT_PATH is an "
            "environment variable (R-EXD-2), which a policy cannot set: a job's environment is "
            "its own",
        ),
        (
            '[profiles.default.defaults]\ndynamic_dims = "1,2"\n',
            "[profiles.default.defaults] dynamic_dims: unknown option: the source names it under "
            'dynamic_inputs_shape_range ("dynamic_dims wins" when both are set) but has no entry '
            "for it in version 900, so the resolver cannot check it; remove it",
        ),
        (
            "[profiles.default.products.atlas-a2]\ndefault = 1\n",
            "[profiles.default.products.atlas-a2] default: unknown key; use defaults, locked",
        ),
        (
            "[profiles.default.defaults]\nhccl_timeout = 1\nx = [\n1,\n",
            "invalid TOML: Invalid value (at the end of the file, after line 4: perhaps a value "
            "left out, or an array, table or string not closed)",
        ),
    ],
    ids=["r-hct-4 variable", "r-exd-2 variable", "mentioned only", "product key", "unclosed"],
)
def test_a_refused_policy_key_is_said_as_what_it_is(text: str, said: str) -> None:
    """A job's environment variable written as an option (what a policy cannot set, and the
    option that can), a name the source mentions without documenting it (not a near option's
    misspelling), a product table's unknown key (with the keys it takes), and a file left
    open (tomllib names no line: the last one is)."""
    assert refused(text) == f"p.toml: {said}"


def test_a_profile_no_request_can_name_is_refused() -> None:
    """A request with an empty profile gets "default": values under an empty name would load
    and never act."""
    message = refused('[profiles."".defaults]\nhccl_timeout = 3600\n')
    assert "a profile needs a name" in message and "[profiles.default]" in message


def test_diagnostics_from_policy_name_the_profiles_a_lock_reaches_r_esc_1() -> None:
    """The default profile's lock holds in every profile but one that locks the option
    itself: the line names the profiles it reaches, the first few by name."""
    from npu_resolver._policy import diagnostics_from_policy

    others = "".join(f"[profiles.p{i}.defaults]\nhccl_timeout = 544\n" for i in range(10))
    policy = parse_policy(
        "[profiles.default.locked]\nenable_small_channel = 0\n"
        f"{others}[profiles.own.locked]\nenable_small_channel = 1\n"
    )
    lines = [says.text for says in diagnostics_from_policy(policy)]
    (line,) = [line for line in lines if "[profiles.default.locked]" in line]
    assert line.startswith(
        "enable_small_channel locked from [profiles.default.locked]: WARNING FORCED (R-ESC-1) "
        "on every product, in online inference, for profiles 'default', 'p0', 'p1', "
    )
    assert "'p6' and 3 more: " in line and "'own'" not in line


def test_policy_check_lines_r_esc_1_r_hct_3_r_dep_3_are_sorted_and_name_no_lone_profile() -> None:
    """With one profile, no line names a profile; a line for one product names it once,
    though its message names it too; a message naming no product is not said to be one
    product's words."""
    policy = parse_policy(
        "[profiles.default.defaults]\nop_debug_level = 0\nenable_small_channel = 0\n"
        "[profiles.default.products.atlas-training.defaults]\nhccl_timeout = 600\n"
    )
    lines = [says.text for says in npu_resolver.diagnostics_from_policy(policy)]
    heads = [
        "enable_small_channel default from [profiles.default.defaults]: WARNING FORCED "
        "(R-ESC-1) on every product, in online inference: ",
        "hccl_timeout default from [profiles.default.products.atlas-training.defaults]: INFO "
        "ROUNDED (R-HCT-3) on atlas-training, in training and online inference: ",
        "op_debug_level default from [profiles.default.defaults]: WARNING DEPRECATED (R-DEP-3) "
        "on every product, in training and online inference: ",
    ]
    assert len(lines) == len(heads)
    assert all(line.startswith(head) for line, head in zip(lines, heads, strict=True))


def test_policy_check_says_on_which_product_a_line_for_several_was_worded_r_hct_3() -> None:
    """A message that names the product it was said on is shown once for all the products:
    the line says which one's words they are."""
    policy = parse_policy("[profiles.default.defaults]\nhccl_timeout = 600\n")
    (line,) = [says.text for says in npu_resolver.diagnostics_from_policy(policy)]
    assert line.startswith(
        "hccl_timeout default from [profiles.default.defaults]: INFO ROUNDED (R-HCT-3) on "
        "atlas-training, atlas-300i-duo, in training and online inference (as said on "
        "atlas-training): the policy's hccl_timeout 600 "
    )


def test_policy_check_says_a_rounding_once_though_the_table_it_suggests_exists_r_hct_3() -> None:
    """The R-HCT-3 note suggests each product's own table; that the file already has one for
    atlas-training (for another option) does not split the line the two products share."""
    policy = parse_policy(
        "[profiles.default.defaults]\nhccl_timeout = 600\n"
        "[profiles.default.products.atlas-training.defaults]\nop_debug_level = 0\n"
    )
    said = [s.text for s in npu_resolver.diagnostics_from_policy(policy)]
    (rounded,) = [line for line in said if "ROUNDED" in line]
    assert "on atlas-training, atlas-300i-duo, in training and online inference" in rounded


def test_policy_check_keeps_apart_what_jobs_hear_differently_r_sst_2() -> None:
    """A value that makes one product's jobs hear another message (atlas-a3's locked
    hccl_timeout 0 never times out) gets a line of its own: the common line does not claim
    every product for words atlas-a3's jobs never hear."""
    policy = parse_policy(
        "[profiles.default.products.atlas-a3.locked]\nhccl_timeout = 0\n"
        "[profiles.default.defaults]\nstream_sync_timeout = 600000\n"
    )
    lines = [says.text for says in npu_resolver.diagnostics_from_policy(policy)]
    assert [line.split(": ", 2)[1] for line in lines] == [
        "WARNING ADVICE (R-SST-2) on atlas-350, atlas-a2, atlas-training, atlas-300i-duo, "
        "in training and online inference",
        "WARNING ADVICE (R-SST-2) on atlas-a3, in training and online inference",
    ]
    assert "1836 s" in lines[0] and "hccl_timeout 0 never times out" in lines[1]


def test_policy_check_names_each_mode_s_own_products_r_mml_1() -> None:
    """modify_mixlist without mixed precision is dropped on atlas-300i-duo in online inference
    only (in training there it is kept, its file unchecked): the line says which products in
    which mode, not every product in both."""
    policy = parse_policy('[profiles.default.defaults]\nmodify_mixlist = "/cfg/mix.json"\n')
    lines = [says.text for says in npu_resolver.diagnostics_from_policy(policy)]
    dropped = [line for line in lines if "DROPPED_NO_EFFECT" in line and "atlas-300i-duo" in line]
    assert [line.split(": ", 2)[1] for line in dropped] == [
        "WARNING DROPPED_NO_EFFECT (R-MML-1) on atlas-training, in training; "
        "on atlas-training, atlas-300i-duo, in online inference"
    ]
    assert any("NOT_CHECKED (R-MML-1) on atlas-300i-duo, in training:" in line for line in lines)


SHARED_AND_OWN = """
[profiles.default.defaults]
hccl_timeout = 20000
[profiles.default.products.atlas-training.defaults]
hccl_timeout = 1224
[profiles.default.products.atlas-300i-duo.defaults]
hccl_timeout = 1224
"""


def test_r_hct_3_a_value_for_every_product_is_checked_only_where_it_acts() -> None:
    """A default for all products with the products that refuse it given their own: the shared
    value never reaches those products, so they do not refuse it (R-HCT-3's bound there)."""
    policy = parse_policy(SHARED_AND_OWN, "p.toml")
    answers = {
        pid: resolve(ResolveRequest(product=pid), policy=policy)
        for pid in ("atlas-a2", "atlas-training", "atlas-300i-duo")
    }
    assert {pid: a.options["hccl_timeout"] for pid, a in answers.items()} == {
        "atlas-a2": 20000,
        "atlas-training": 1224,
        "atlas-300i-duo": 1224,
    }
    assert all(a.ok for a in answers.values())


def test_r_hct_3_a_value_for_every_product_one_product_refuses_names_its_own_table() -> None:
    text = SHARED_AND_OWN.split("[profiles.default.products.atlas-300i-duo", maxsplit=1)[0]
    assert refused(text) == (
        "p.toml: [profiles.default.defaults] hccl_timeout: hccl_timeout 20000 is outside "
        "(0, 17340] on atlas-300i-duo; use a value in that range. (R-HCT-3); give "
        "atlas-300i-duo a value of its own, as in "
        "[profiles.default.products.atlas-300i-duo.defaults], or write this one in the "
        "defaults tables of atlas-350, atlas-a3, atlas-a2 instead of "
        "[profiles.default.defaults]"
    )
    # A value every product refuses has no such remedy.
    assert refused("[profiles.default.defaults]\nhccl_timeout = nan\n") == (
        "p.toml: [profiles.default.defaults] hccl_timeout: hccl_timeout nan is not an integer; "
        "set an integer. (R-HCT-1)"
    )


def test_r_pm_4_a_value_for_every_product_several_products_refuse_names_each_of_them() -> None:
    """The tables named are those of the products that refuse the value; the example is the
    first of them."""
    assert refused(
        '[profiles.default.defaults]\nprecision_mode = "allow_mix_precision_bf16"\n'
    ) == (
        "p.toml: [profiles.default.defaults] precision_mode: value 'allow_mix_precision_bf16' "
        "is not supported on atlas-training (R-PM-4); give each of atlas-training, "
        "atlas-300i-duo a value of its own, as in "
        "[profiles.default.products.atlas-training.defaults], or write this one in the "
        "defaults tables of atlas-350, atlas-a3, atlas-a2 instead of [profiles.default.defaults]"
    )


def test_r_pm_4_a_default_for_every_product_is_not_checked_where_the_product_locks_it() -> None:
    """A product's lock wins over the shared default there: that product never gets it."""
    text = """
[profiles.default.defaults]
precision_mode = "allow_fp32_to_bf16"
[profiles.default.products.atlas-training.locked]
precision_mode = "allow_mix_precision_fp16"
[profiles.default.products.atlas-300i-duo.locked]
precision_mode = "allow_mix_precision_fp16"
"""
    policy = parse_policy(text, "p.toml")
    a2 = resolve(ResolveRequest(product="atlas-a2"), policy=policy)
    assert a2.options["precision_mode"] == "allow_fp32_to_bf16"
    training = resolve(ResolveRequest(product="atlas-training"), policy=policy)
    assert training.options["precision_mode"] == "allow_mix_precision_fp16"
    assert training.provenance["precision_mode"].source == "POLICY_LOCKED"


def test_a_file_of_thousands_of_bad_keys_is_refused_in_a_bounded_message() -> None:
    """The refusal travels in GetPolicy's reply and a log line: it lists 50 problems, each of
    at most 500 characters, and counts the rest."""
    text = "[profiles.default.defaults]\n" + "".join(f"k{i} = 1\n" for i in range(5000))
    text += "x" * 100_000 + " = 1\n"
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.toml")
    problems = info.value.problems
    assert len(problems) == 51 and problems[-1] == "and 4951 more problems not listed"
    assert problems[0] == "[profiles.default.defaults] k0: unknown option"
    assert len(str(info.value)) < 51 * 500


def test_a_problem_longer_than_500_characters_is_cut_to_500_ending_in_an_ellipsis() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy("[profiles.default.defaults]\n" + "k" * 1000 + " = 1\n", "p.toml")
    (problem,) = info.value.problems
    assert len(problem) == 500
    assert problem == "[profiles.default.defaults] " + "k" * 469 + "..."


@pytest.mark.parametrize(
    ("count", "last"),
    [
        (50, "[profiles.default.defaults] k49: unknown option"),
        (51, "and 1 more problem not listed"),
        (52, "and 2 more problems not listed"),
    ],
)
def test_problems_past_the_fiftieth_are_counted_in_one_line(count: int, last: str) -> None:
    text = "[profiles.default.defaults]\n" + "".join(f"k{i} = 1\n" for i in range(count))
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.toml")
    assert len(info.value.problems) == min(count, 51) and info.value.problems[-1] == last


def test_the_last_listed_unknown_option_still_gets_its_close_name() -> None:
    """Close names are sought for every problem listed: the fiftieth is still one."""
    text = "[profiles.default.defaults]\n" + "".join(f"k{i} = 1\n" for i in range(49))
    with pytest.raises(PolicyError) as info:
        parse_policy(text + "hccl_timout = 1\n", "p.toml")
    assert info.value.problems[-1] == (
        "[profiles.default.defaults] hccl_timout: unknown option; did you mean 'hccl_timeout'?"
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "[profiles.default.defaults]\nhccl_timeout = 1\nhccl_timeout = 2\n",
            "p.toml: invalid TOML: Cannot overwrite a value (at line 3, column 17) "
            "(a key or table written twice?)",
        ),
        (
            '{"profiles": {"default": {}}}\n',
            "p.toml: invalid TOML: Invalid statement (at line 1, column 1); a policy is TOML "
            "([profiles.default.defaults] ...), not JSON or YAML",
        ),
        (
            "[profiles.default.defaults]\nhccl_timeout = " + "9" * 5000 + "\n",
            "p.toml: invalid TOML: a number has too many digits to be an option's value",
        ),
    ],
)
def test_toml_refusals_say_what_the_writer_did(text: str, said: str) -> None:
    assert refused(text) == said


def test_r_odc_2_an_answers_options_resolved_again_take_the_files_they_name() -> None:
    """Under a lock that replaced the job's op_debug_config, the text the job attached is its
    own file's, not the locked one's: it is not read. Resolving the answer's options again
    with that same text attached says it is the locked file's, and the locked file is then
    judged by it; the answer's options are resolved again with the files they name."""
    policy = parse_policy('[profiles.default.locked]\nop_debug_config = "/policy/debug.cfg"\n')
    attached = {"op_debug_config": "op_debug_config = oom,ccec_O0\n"}
    first = resolve(
        ResolveRequest(
            product="atlas-a2", config={"op_debug_config": "/job/mine.cfg"}, attachments=attached
        ),
        policy=policy,
    )
    assert first.ok
    assert [(d.code, d.rule) for d in first.diagnostics] == [
        ("POLICY_LOCKED", "R-ODC-1"),
        ("NOT_CHECKED", "R-ODC-2"),
    ]
    again = resolve(
        ResolveRequest(product="atlas-a2", config=dict(first.options), attachments=attached),
        policy=policy,
    )
    assert [(d.code, d.rule) for d in again.errors] == [("CONFLICT", "R-ODC-2")]
    without = resolve(ResolveRequest(product="atlas-a2", config=dict(first.options)), policy=policy)
    assert without.ok and without.options == first.options


def test_r_hct_3_a_profiles_shared_default_is_not_checked_where_the_default_profile_locks_it() -> (
    None
):
    """Every profile holds the default profile's locks: a profile's default for every product
    never reaches a product the default profile locks the option on, so that product does not
    refuse it."""
    text = """
[profiles.default.products.atlas-training.locked]
hccl_timeout = 1224
[profiles.default.products.atlas-300i-duo.locked]
hccl_timeout = 1224
[profiles.ci.defaults]
hccl_timeout = 20000
"""
    policy = parse_policy(text, "p.toml")
    a2 = resolve(ResolveRequest(product="atlas-a2", profile="ci"), policy=policy)
    training = resolve(ResolveRequest(product="atlas-training", profile="ci"), policy=policy)
    assert a2.ok and a2.options["hccl_timeout"] == 20000
    assert training.ok and training.options["hccl_timeout"] == 1224
    assert training.provenance["hccl_timeout"].source == "POLICY_LOCKED"


def test_a_shared_default_its_profiles_own_shared_lock_wins_over_is_noted_not_refused() -> None:
    """The profile's own lock for every product wins everywhere, as the default profile's
    does: its default is checked nowhere (a value no config could hold is still refused)."""
    text = (
        "[profiles.ci.locked]\nhccl_timeout = 1224\n[profiles.ci.defaults]\nhccl_timeout = 20000\n"
    )
    policy = parse_policy(text, "p.toml")
    assert policy.summary()["defaults_that_never_act"] == [
        "hccl_timeout default from [profiles.ci.defaults] never acts on any product: it is "
        "locked from [profiles.ci.locked]"
    ]
    garbage = "[profiles.default.locked]\nhccl_timeout = 1224\n"
    garbage += '[profiles.ci.defaults]\nhccl_timeout = "x"\n'
    assert refused(garbage) == (
        "p.toml: [profiles.ci.defaults] hccl_timeout: hccl_timeout 'x' is not an integer; set an "
        "integer. (R-HCT-1)"
    )


@pytest.mark.parametrize("text", ['[{"profiles": {}}]\n', "profiles.default.defaults:\n  a: 1\n"])
def test_a_policy_written_as_json_or_yaml_is_told_it_is_toml(text: str) -> None:
    assert refused(text).endswith(
        "; a policy is TOML ([profiles.default.defaults] ...), not JSON or YAML"
    )


def test_r_pm_3_policy_check_blames_a_refused_lock_for_its_error_only() -> None:
    """The lock refused in training leaves precision_mode unset, and on atlas-300i-duo the
    source gives no training default: that UNDOCUMENTED note is about the missing value, not
    something the lock tells jobs, so the check does not list it under the lock."""
    policy = parse_policy('[profiles.default.locked]\nprecision_mode = "force_fp16"\n')
    said = [s.text for s in npu_resolver.diagnostics_from_policy(policy)]
    assert len(said) == 1 and "ERROR UNSUPPORTED_VALUE (R-PM-3)" in said[0]


def test_r_pm_3_policy_check_tells_the_platform_team_to_change_its_lock_a_job_to_ask_them() -> None:
    """The same refusal, in the words of each reader: a job is sent to the platform team;
    `policy check`, which the platform team reads, tells them to change the lock."""
    policy = parse_policy('[profiles.default.locked]\nprecision_mode = "force_fp16"\n')
    (said,) = [s.text for s in npu_resolver.diagnostics_from_policy(policy)]
    assert said.endswith("a value that is only for online inference; change the lock.")
    job = resolve(ResolveRequest("atlas-a2"), policy=policy)
    (refused_,) = [d for d in job.diagnostics if d.code is npu_resolver.Code.UNSUPPORTED_VALUE]
    assert refused_.message.endswith("; ask the platform team to change the lock.")


@pytest.mark.parametrize(
    ("defaults", "option", "settled"),
    [
        (
            'precision_mode = "allow_fp32_to_fp16"\nprecision_mode_v2 = "fp16"',
            "precision_mode",
            {"precision_mode_v2": "fp16"},
        ),
        (
            "iterations_per_loop = 10\nmix_compile_mode = true",
            "iterations_per_loop",
            {"iterations_per_loop": 1},
        ),
        ('variable_placement = "Host"', "variable_placement", {"mix_compile_mode": False}),
    ],
)
def test_r_prec_1_r_ipl_2_r_vpl_2_a_conflict_the_policys_defaults_make_says_so(
    defaults: str, option: str, settled: dict[str, object]
) -> None:
    """A job that set none of the options is told that the policy's defaults made the conflict
    (and where), and that its own value takes their place; one that does so is resolved."""
    policy = parse_policy(f"[profiles.default.defaults]\n{defaults}\n")
    [error] = resolve(ResolveRequest("atlas-a2"), policy=policy).errors
    assert error.code.value == "CONFLICT" and error.option == option
    assert "The policy's defaults set " in error.message
    assert "[profiles.default.defaults]" in error.message
    assert "takes the place of the policy's default" in error.message
    assert resolve(ResolveRequest("atlas-a2", settled), policy=policy).ok
    own = resolve(ResolveRequest("atlas-a2", {"variable_placement": "Host"}))
    assert "policy" not in own.errors[0].message  # the job's own conflict says nothing of it


def test_r_opm_1_an_implmode_superseded_by_the_policys_op_precision_mode_is_told_so() -> None:
    """The job set op_select_implmode only: the drop names the policy's table that set the
    op_precision_mode taking its place (it said 'op_precision_mode is set', as if the job had)."""
    policy = parse_policy('[profiles.default.defaults]\nop_precision_mode = "/p.ini"\n')
    answer = resolve(
        ResolveRequest("atlas-a2", {"op_select_implmode": "high_precision"}), policy=policy
    )
    [drop] = [d for d in answer.diagnostics if d.code.value == "DROPPED_SUPERSEDED"]
    assert drop.option == "op_select_implmode" and drop.rule == "R-OPM-1"
    assert "op_precision_mode is set by the policy (default from [profiles.default.defaults])" in (
        drop.message
    )


def test_r_prec_1_under_strict_a_conflict_of_the_policys_defaults_is_said_to_need_the_policy() -> (
    None
):
    """Under strict, whatever precision option the job sets, the policy's other default is
    dropped, an error too: the message does not send the job after a fix that fails."""
    policy = parse_policy(
        '[profiles.default.defaults]\nprecision_mode = "allow_fp32_to_fp16"\n'
        'precision_mode_v2 = "fp16"\n'
    )
    [error] = resolve(ResolveRequest("atlas-a2", strict=True), policy=policy).errors
    assert "under strict, setting either does not settle this" in error.message
    assert "name a profile without these defaults" in error.message
    assert "takes the place" not in error.message and "keep only" not in error.message
    followed = resolve(
        ResolveRequest("atlas-a2", {"precision_mode_v2": "fp16"}, strict=True), policy=policy
    )
    assert [(d.code.value, d.option) for d in followed.errors] == [
        ("DROPPED_SUPERSEDED", "precision_mode")
    ]
