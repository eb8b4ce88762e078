"""npu-config-resolver: the effective NPURunConfig of a job, decided before launch.

The public surface is what this module exports; everything in underscored modules may change.
"""

from typing import TYPE_CHECKING

from ._catalog import CATALOG, Catalog, CatalogError
from ._fields import request_field
from ._fingerprint import fingerprint
from ._model import (
    CATALOG_VERSION,
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_ITEMS,
    MAX_EXACT_INT,
    MAX_OBJECT_DEPTH,
    Code,
    Diagnostic,
    Provenance,
    Resolution,
    ResolveRequest,
    Severity,
    Source,
)
from ._options import NAMED_ENV_VARS as ENV_VARS
from ._paths import PATH_KEYS
from ._pipeline import config_refused, resolve, unresolved
from ._products import PRODUCTS, Family, Product, product_id
from ._state import PolicyEntry, PolicyLayer, PolicyLike

_LAZY = {
    "__version__": "_version",
    "describe_catalog": "_describe",
    "describe_option": "_describe",
    "list_products": "_describe",
    "MAX_DIFF_PRODUCTS": "_diff",
    "MAX_PRODUCT_NAME": "_diff",
    "DiffCell": "_diff",
    "DiffError": "_diff",
    "check_diff_products": "_diff",
    "ordered_products": "_diff",
    "diff_columns": "_diff",
    "diff_of": "_diff",
    "DiffResult": "_diff",
    "DiffRow": "_diff",
    "diff": "_diff",
    "Policy": "_policy",
    "PolicyError": "_policy",
    "PolicyReadError": "_policy",
    "PolicySays": "_policy",
    "diagnostics_from_policy": "_policy",
    "policy_file_digest": "_policy",
    "load_policy": "_policy",
    "parse_policy": "_policy",
}


if not TYPE_CHECKING:  # a type checker sees the imports below: a misspelt name is an error

    def __getattr__(name: str) -> object:
        """Less-used parts load on first use, so that a cold `npu-resolve resolve` stays fast."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'npu_resolver' has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(f"npu_resolver.{module}"), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    """The lazy parts too, so that completion and help() show the whole public surface."""
    return sorted({*globals(), *_LAZY})


if TYPE_CHECKING:
    from ._describe import describe_catalog, describe_option, list_products
    from ._diff import (
        MAX_DIFF_PRODUCTS,
        MAX_PRODUCT_NAME,
        DiffCell,
        DiffError,
        DiffResult,
        DiffRow,
        check_diff_products,
        diff,
        diff_columns,
        diff_of,
        ordered_products,
    )
    from ._policy import (
        Policy,
        PolicyError,
        PolicyReadError,
        PolicySays,
        diagnostics_from_policy,
        load_policy,
        parse_policy,
        policy_file_digest,
    )
    from ._version import __version__

__all__ = [
    "CATALOG",
    "CATALOG_VERSION",
    "ENV_VARS",
    "MAX_CONFIG_DEPTH",
    "MAX_CONFIG_ITEMS",
    "MAX_DIFF_PRODUCTS",
    "MAX_EXACT_INT",
    "MAX_OBJECT_DEPTH",
    "MAX_PRODUCT_NAME",
    "PATH_KEYS",
    "PRODUCTS",
    "Catalog",
    "CatalogError",
    "Code",
    "Diagnostic",
    "DiffCell",
    "DiffError",
    "DiffResult",
    "DiffRow",
    "Family",
    "Policy",
    "PolicyEntry",
    "PolicyError",
    "PolicyLayer",
    "PolicyLike",
    "PolicyReadError",
    "PolicySays",
    "Product",
    "Provenance",
    "Resolution",
    "ResolveRequest",
    "Severity",
    "Source",
    "__version__",
    "check_diff_products",
    "config_refused",
    "describe_catalog",
    "describe_option",
    "diagnostics_from_policy",
    "diff",
    "diff_columns",
    "diff_of",
    "fingerprint",
    "list_products",
    "load_policy",
    "ordered_products",
    "parse_policy",
    "policy_file_digest",
    "product_id",
    "request_field",
    "resolve",
    "unresolved",
]
