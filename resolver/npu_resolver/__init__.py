"""npu-config-resolver: the effective NPURunConfig of a job, decided before launch.

The public surface is what this module exports; everything in underscored modules may change.
"""

from ._catalog import CATALOG, Catalog, CatalogError
from ._model import (
    CATALOG_VERSION,
    Code,
    Diagnostic,
    Provenance,
    ResolveRequest,
    Resolution,
    Severity,
    Source,
)
from ._pipeline import fingerprint, resolve
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
    "PolicyEntry",
    "PolicyLayer",
    "PolicyLike",
    "Product",
    "Provenance",
    "ResolveRequest",
    "Resolution",
    "Severity",
    "Source",
    "fingerprint",
    "product_id",
    "resolve",
]
