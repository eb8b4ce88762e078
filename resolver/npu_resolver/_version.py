"""The installed distribution's version, read on first use: importlib.metadata would cost every
cold `npu-resolve` start some milliseconds."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("npu-config-resolver")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "unknown"
