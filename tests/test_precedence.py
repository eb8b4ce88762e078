"""Where a value comes from, highest first (contract, resolution order step 5).

policy lock > explicit option > the job's environment variable > the policy profile's default
(a product table before the all-products table) > the documented default.

Each test proves one pair, on the two options that have an environment variable and no product
rounding on atlas-a2: hccl_timeout / HCCL_EXEC_TIMEOUT (R-HCT-1, R-HCT-2, R-HCT-4) and
session_device_id / ASCEND_DEVICE_ID (R-SDI-1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import pytest

from npu_resolver import (
    Code,
    Policy,
    Resolution,
    ResolveRequest,
    Source,
    parse_policy,
    resolve,
)

PRODUCT: Final = "atlas-a2"

LOCKED: Final[Policy] = parse_policy(
    """
[profiles.default.locked]
hccl_timeout = 2400
session_device_id = 0
""",
    "locked.toml",
)

DEFAULTS: Final[Policy] = parse_policy(
    """
[profiles.default.defaults]
hccl_timeout = 3600
session_device_id = 1

[profiles.default.products.atlas-a2.defaults]
hccl_timeout = 7200
session_device_id = 2

[profiles.nightly.defaults]
hccl_timeout = 4080
""",
    "defaults.toml",
)

EXPLICIT: Final[Mapping[str, int]] = {"hccl_timeout": 900, "session_device_id": 5}
ENV: Final[Mapping[str, str]] = {"HCCL_EXEC_TIMEOUT": "600", "ASCEND_DEVICE_ID": "3"}


class _NotRequested:
    """Marks a provenance that must carry no `requested` (the value is what was asked)."""


NOT_REQUESTED: Final = _NotRequested()


def run(
    *,
    config: Mapping[str, int] | None = None,
    env: Mapping[str, str] | None = None,
    policy: Policy | None = None,
    product: str = PRODUCT,
    profile: str = "",
) -> Resolution:
    request = ResolveRequest(
        product=product, config=dict(config or {}), env=dict(env or {}), profile=profile
    )
    result = resolve(request, policy=policy)
    assert result.ok, result.diagnostics
    return result


def check(
    result: Resolution,
    option: str,
    *,
    value: int,
    source: Source,
    requested: object = NOT_REQUESTED,
    env_var: str = "",
    detail: str = "",
) -> None:
    """The option's effective value and every provenance field the precedence decides."""
    assert result.options[option] == value
    assert type(result.options[option]) is int
    provenance = result.provenance[option]
    assert provenance.source is source
    if requested is NOT_REQUESTED:
        assert not provenance.has_requested, provenance
    else:
        assert provenance.has_requested, provenance
        assert provenance.requested == requested
        assert type(provenance.requested) is type(requested)
    assert provenance.env_var == env_var
    assert provenance.detail == detail


def codes(result: Resolution) -> list[tuple[str, Code]]:
    """The diagnostics as (option, code), in a stable order for comparison."""
    return sorted((d.option, d.code) for d in result.diagnostics)


def test_lock_over_explicit() -> None:
    result = run(config=EXPLICIT, policy=LOCKED)
    detail = "locked from [profiles.default.locked]"
    check(
        result,
        "hccl_timeout",
        value=2400,
        source=Source.POLICY_LOCKED,
        requested=900,
        detail=detail,
    )
    check(
        result,
        "session_device_id",
        value=0,
        source=Source.POLICY_LOCKED,
        requested=5,
        detail=detail,
    )
    assert codes(result) == [
        ("hccl_timeout", Code.POLICY_LOCKED),
        ("session_device_id", Code.POLICY_LOCKED),
    ]


def test_lock_over_env() -> None:
    result = run(env=ENV, policy=LOCKED)
    detail = "locked from [profiles.default.locked]"
    check(
        result,
        "hccl_timeout",
        value=2400,
        source=Source.POLICY_LOCKED,
        requested=600,  # the variable's value as read, as an ENV value rounded gives it
        detail=detail,
    )
    check(
        result,
        "session_device_id",
        value=0,
        source=Source.POLICY_LOCKED,
        requested=3,
        detail=detail,
    )
    assert codes(result) == [
        ("hccl_timeout", Code.POLICY_LOCKED),
        ("session_device_id", Code.POLICY_LOCKED),
    ]


def test_explicit_over_env() -> None:
    result = run(config=EXPLICIT, env=ENV)
    check(result, "hccl_timeout", value=900, source=Source.USER)
    check(result, "session_device_id", value=5, source=Source.USER)
    assert codes(result) == [
        ("hccl_timeout", Code.ENV_OVERRIDDEN),
        ("session_device_id", Code.ENV_OVERRIDDEN),
    ]


@pytest.mark.parametrize("product", ["atlas-a2", "atlas-training"])
def test_r_sdi_1_r_hct_2_an_answer_from_the_env_sent_back_beside_it_overrides_nothing(
    product: str,
) -> None:
    """ENV_OVERRIDDEN says the option beat its variable: not so when both say the same, as
    when a launcher sends back an answer taken from the job's variables beside them (on
    atlas-training 544 beside HCCL_EXEC_TIMEOUT=600, which takes effect as 544: R-HCT-3)."""
    env = {"ASCEND_DEVICE_ID": "3", "HCCL_EXEC_TIMEOUT": "600"}
    first = resolve(ResolveRequest(product, {}, env=env))
    again = resolve(ResolveRequest(product, dict(first.options), env=env))
    assert again.options == first.options
    assert not [d for d in again.diagnostics if d.code is Code.ENV_OVERRIDDEN]
    other = resolve(ResolveRequest(product, {**first.options, "session_device_id": 4}, env=env))
    assert [d.option for d in other.diagnostics if d.code is Code.ENV_OVERRIDDEN] == [
        "session_device_id"
    ]


def test_explicit_over_profile_default() -> None:
    result = run(config=EXPLICIT, policy=DEFAULTS)
    check(result, "hccl_timeout", value=900, source=Source.USER)
    check(result, "session_device_id", value=5, source=Source.USER)
    assert codes(result) == []


def test_env_over_profile_default() -> None:
    result = run(env=ENV, policy=DEFAULTS)
    check(result, "hccl_timeout", value=600, source=Source.ENV, env_var="HCCL_EXEC_TIMEOUT")
    check(result, "session_device_id", value=3, source=Source.ENV, env_var="ASCEND_DEVICE_ID")
    assert codes(result) == [
        ("hccl_timeout", Code.FROM_ENV),
        ("session_device_id", Code.FROM_ENV),
    ]


def test_profile_product_table_over_all_products_table() -> None:
    result = run(policy=DEFAULTS)
    detail = "default from [profiles.default.products.atlas-a2.defaults]"
    check(result, "hccl_timeout", value=7200, source=Source.POLICY, detail=detail)
    check(result, "session_device_id", value=2, source=Source.POLICY, detail=detail)
    assert codes(result) == []
    # A product without a table of its own takes the all-products table.
    other = run(policy=DEFAULTS, product="atlas-a3")
    detail = "default from [profiles.default.defaults]"
    check(other, "hccl_timeout", value=3600, source=Source.POLICY, detail=detail)
    check(other, "session_device_id", value=1, source=Source.POLICY, detail=detail)
    assert codes(other) == []


def test_profile_default_over_documented_default() -> None:
    result = run(policy=DEFAULTS, product="atlas-a3", profile="nightly")
    check(
        result,
        "hccl_timeout",
        value=4080,
        source=Source.POLICY,
        detail="default from [profiles.nightly.defaults]",
    )
    # The nightly profile says nothing of session_device_id, which has no documented default.
    assert "session_device_id" not in result.options
    assert codes(result) == []


def test_documented_default_when_nothing_set() -> None:
    silent = parse_policy("[profiles.default.defaults]\nop_wait_timeout = 200\n", "silent.toml")
    # No policy at all, and a policy that sets neither option: the documented default holds.
    for policy in (None, silent):
        result = run(policy=policy)
        check(result, "hccl_timeout", value=1836, source=Source.DEFAULT)
        # session_device_id has no documented default (R-SDI-1): nothing sets it, so it is absent.
        assert "session_device_id" not in result.options
        assert "session_device_id" not in result.provenance
        assert codes(result) == []


def test_slot_fields_are_in_the_order_the_plain_value_path_writes_them() -> None:
    """apply_precedence builds a caller's plain value's Slot by position (no constructor frame
    on the hot path): a field added or moved must be added or moved there too."""
    from npu_resolver._state import Slot

    assert Slot._fields == (
        "value",
        "source",
        "rules",
        "requested",
        "env_var",
        "detail",
        "all_products",
        "prov",
        "fragment",
    )


def test_env_values_asked_again_get_the_same_answer_on_every_product() -> None:
    """R-HCT-2, R-SDI-1: the slot and FROM_ENV note a variable's value gives are kept per
    product and mode for the values that recur; a warm catalog answers as a fresh one does,
    and one product's kept answer never reaches another's."""
    from npu_resolver import PRODUCTS, fingerprint
    from npu_resolver._catalog import Catalog
    from npu_resolver._options import OPTIONS

    envs = [ENV, {"HCCL_EXEC_TIMEOUT": " 600 ", "ASCEND_DEVICE_ID": "3"}, {"AOE_MODE": "2"}]
    for mode in (0, 1):
        for product in PRODUCTS:
            for env in envs:
                request = ResolveRequest(
                    product=product.id, config={"graph_run_mode": mode}, env=dict(env)
                )
                warm = [resolve(request) for _ in range(2)]
                fresh = resolve(request, catalog=Catalog(OPTIONS))
                assert warm[0] == warm[1] == fresh
                assert fresh.fingerprint == fingerprint(fresh.product, fresh.options)
