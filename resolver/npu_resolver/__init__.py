"""npu-config-resolver: the effective NPURunConfig of a job, decided before launch.

The public surface is what this module exports; everything in underscored modules may change.
"""

from ._catalog import CATALOG, Catalog, CatalogError
from ._describe import describe_catalog, describe_option, list_products
from ._diff import DiffCell, DiffResult, DiffRow, diff
from ._model import (
    CATALOG_VERSION,
    Code,
    Diagnostic,
    Provenance,
    Resolution,
    ResolveRequest,
    Severity,
    Source,
)
from ._pipeline import fingerprint, resolve
from ._policy import Policy, PolicyError, load_policy, parse_policy
from ._products import PRODUCTS, Product, product_id
from ._state import PolicyEntry, PolicyLayer, PolicyLike

__all__ = [
    "CATALOG",
    "CATALOG_VERSION",
    "PRODUCTS",
    "Catalog",
    "CatalogError",
    "Code",
    "Diagnostic",
    "DiffCell",
    "DiffResult",
    "DiffRow",
    "Policy",
    "PolicyEntry",
    "PolicyError",
    "PolicyLayer",
    "PolicyLike",
    "Product",
    "Provenance",
    "Resolution",
    "ResolveRequest",
    "Severity",
    "Source",
    "describe_catalog",
    "describe_option",
    "diff",
    "fingerprint",
    "list_products",
    "load_policy",
    "parse_policy",
    "product_id",
    "resolve",
]
