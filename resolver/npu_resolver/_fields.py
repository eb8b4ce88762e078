"""Which field of a request an error is about: what a google.rpc.BadRequest violation names."""

from __future__ import annotations

from typing import Final

from ._catalog import CATALOG
from ._model import Code, Diagnostic, ResolveRequest

REQUEST_FIELDS: Final = ("product", "profile", "config", "attachments", "workdir")
"""Diagnostic `option`s that name a field of the request itself."""


def request_field(
    diagnostic: Diagnostic, request: ResolveRequest | None = None, *, policy_version: str = ""
) -> str:
    """The request field a diagnostic is about: `config.<option>`, `env.<NAME>`, `product`...
    An unknown option is always in `config`, whatever its name (a config holding a key
    'product' or 'env.HOME' must not blame the request's product or env field). With the
    `request`, an error on an option its config leaves unset (absent, null, or an empty text
    that means unset) names the field that gave the value, as step 5 ranks them: the
    option's variable in `env` (AOE_MODE) when the job sets it, else, under a policy
    (`policy_version`), `profile`, whose tables gave it."""
    option = diagnostic.option
    if diagnostic.code is not Code.UNKNOWN_OPTION and (
        option in REQUEST_FIELDS or option.startswith(("env.", "attachments."))
    ):
        return option
    known = CATALOG.by_name.get(option)
    if request is None or known is None:
        return f"config.{option}"
    given = request.config.get(option)
    if given is not None and not (given == "" and known.empty_is_unset):
        return f"config.{option}"
    variable = request.env.get(known.env, "") if known.env else ""
    if isinstance(variable, str) and variable.strip():
        return f"env.{known.env}"
    return "profile" if policy_version else f"config.{option}"
