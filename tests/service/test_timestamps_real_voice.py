"""Word timestamps on the real voice, through the engine in process as Synthesize would: order, never late,
spans over the text, and boundaries near the syllables an energy/pitch estimate finds in the audio."""

import asyncio

import numpy as np
import pytest

pytestmark = pytest.mark.slow

TEXTS = [("bill", "您好，您本月的话费账单已经生成，请在二十五号之前完成缴费。"),
         ("phone", "请拨打13501234567查询2026年的账单。")]


@pytest.fixture(scope="module")
def timed():
    from service.timestamps_accuracy import synthesize_and_time

    return asyncio.run(synthesize_and_time(TEXTS, "baker-zh"))  # the voice installed in ~/.cache/voxpool


def test_words_in_order_never_late_and_covering_the_text(timed):
    for item in timed:
        text, words, rate = item["text"], item["words"], item["rate_hz"]
        assert item["late"] == 0  # no word was emitted before the audio it ends in had arrived
        assert [(w.start_char, w.end_char) for w in words] == [(u.start_char, u.end_char) for u in item["units"]]
        spoken = {i for w in words for i in range(w.start_char, w.end_char)}
        assert spoken == {i for i, c in enumerate(text) if c.isalnum()}
        for a, b in zip(words, words[1:]):
            assert a.end_char <= b.start_char and a.end_sample <= b.start_sample
        assert all(0 <= w.start_sample < w.end_sample <= len(item["audio"]) for w in words)
        assert words[-1].end_sample / rate > 0.5 * len(item["audio"]) / rate


def test_boundaries_near_the_audio_estimate(timed):
    from service.timestamps_accuracy import compare

    errors = np.abs(np.concatenate([compare(item) for item in timed]))
    assert np.median(errors) <= 60.0, errors
