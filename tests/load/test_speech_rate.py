"""Speaking rate on the real voice (real DNSMOS): rates 0.8 and 1.25 sound as good as 1.0 and last 1/rate as long.

The engine's audio at a rate is exactly the whole-utterance time-scaled mel vocoded once (tests/engine/
test_speaking_rate.py), so scoring that here scores what the engine streams. Bounds from issue 17: mean DNSMOS
OVRL at most 0.15 below rate 1.0's on the ten call-center sentences, every duration within 5 % of its target."""

from __future__ import annotations

import pytest

from bench.speaking_rate_quality import DURATION_TOLERANCE_PCT, ENGINE_METHOD, OVRL_DROP_MAX, evaluate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def default_voice():
    """The default voice with the default config's weight path, as `voxpool serve` loads it."""
    from models.voices.bundle import load_voice
    from service.config import load_config
    from service.server import engine_config

    cfg = load_config(None, environ={})
    engine = engine_config(cfg, (cfg.voice.default,))
    return load_voice(cfg.voice.default, device=engine.device, weights=engine.weights)


def test_rates_keep_dnsmos_and_durations(default_voice):
    report = evaluate(default_voice, [0.8, 1.25], [ENGINE_METHOD])
    for rate in (0.8, 1.25):
        s = report["summary"][f"{ENGINE_METHOD}@{rate:g}"]
        assert s["ovrl"] >= report["rate1_ovrl"] - OVRL_DROP_MAX, s
        assert s["duration_error_max_pct"] <= DURATION_TOLERANCE_PCT, s
