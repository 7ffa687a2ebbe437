"""Word timestamps on the real voice, through the engine in process as Synthesize would: order, never late,
spans over the text, and boundaries near the syllables an energy/pitch estimate finds in the audio."""

import asyncio

import numpy as np
import pytest

pytestmark = pytest.mark.slow

TEXTS = [("bill", "您好，您本月的话费账单已经生成，请在二十五号之前完成缴费。"),
         ("phone", "请拨打13501234567查询2026年的账单。")]


@pytest.fixture(scope="module")
def timed(baker_voice_folder):
    from bench.timestamps_accuracy import synthesize_and_time

    return asyncio.run(synthesize_and_time(TEXTS, str(baker_voice_folder)))  # a voice name or folder


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


def test_words_lie_on_speech_and_pauses_between_them(timed):
    from bench.timestamps_accuracy import HOP_S, sonority

    for item in timed:
        _, silent = sonority(item["audio"], item["rate_hz"])
        rate = item["rate_hz"]
        for w in item["words"]:
            a, b = int(w.start_sample / rate / HOP_S), int(w.end_sample / rate / HOP_S)
            assert (~silent[a:b]).mean() >= 0.7, (item["text"][w.start_char:w.end_char], (~silent[a:b]).mean())
        # at a comma the voice pauses: the time between the words around it is mostly silence
        for a, b in zip(item["words"], item["words"][1:]):
            if "，" in item["text"][a.end_char:b.start_char]:
                lo, hi = int(a.end_sample / rate / HOP_S), int(b.start_sample / rate / HOP_S)
                assert hi - lo >= 0.1 / HOP_S and silent[lo:hi].mean() >= 0.5, (a, b, silent[lo:hi].mean())


def test_boundaries_near_the_audio_estimate(timed):
    from bench.timestamps_accuracy import compare

    # a coarse guard (synthesis is seeded, so this is deterministic): a misaligned step or chunk mapping
    # shifts every boundary by hundreds of ms; the corpus figures are in docs/ssml.md
    errors = np.abs(np.concatenate([compare(item) for item in timed]))
    assert np.median(errors) <= 100.0, errors
