"""A local voxpool server (tiny voice, loopback) for the framework adapters."""

from __future__ import annotations

import importlib
import os

import pytest

from tests.service.conftest import running_server


def require(module: str):
    """Import a framework extra: skipped locally when absent, an error in CI (`make test` installs the extras)."""
    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f"{module} is not installed: pip install -e '.[pipecat,livekit,gateway]'")


@pytest.fixture
async def vox_server():
    """A started server with the tiny voice; yields the VoxpoolServer (`.port`)."""
    async with running_server() as server:
        yield server


def target(server) -> str:
    return f"127.0.0.1:{server.port}"
