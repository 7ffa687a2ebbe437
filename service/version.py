"""The server's version, from the installed package's metadata (pyproject.toml is the one source)."""

from __future__ import annotations

from importlib import metadata

try:
    VERSION = metadata.version("voxpool")
except metadata.PackageNotFoundError:  # running from a source tree that was never installed
    VERSION = "0+unknown"
