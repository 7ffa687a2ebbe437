"""Word timestamps on fake alignments: order, each word once, never after its audio, spans over the text."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.timestamps import AlignmentCursor, Unit, WordTime, WordTimer, covered_chars, word_units

HOP, R = 300, 2  # the Baker voice's geometry: 300 samples per mel frame, 2 frames per decoder step
STEP = HOP * R


def frontend(text: str):
    from models.frontend import MandarinFrontend

    return MandarinFrontend().to_ids(text)


def test_alignment_cursor_matches_the_frontends_heard_text_rule():
    result = frontend("您好，请拨打13501234567查询2026年的账单。")
    cursor = AlignmentCursor(result.id_source)
    rng = np.random.default_rng(0)
    peaks = np.sort(rng.integers(0, len(result.ids), 80))
    best = -1
    for chunk in np.array_split(peaks, 9):
        got = cursor.advance(chunk)
        if len(chunk):
            best = max(best, int(chunk.max()))
        assert got == result.spoken_chars(best + 1)
    assert cursor.advance([]) == result.spoken_chars(best + 1)
    assert covered_chars(result.id_source)[-1] == result.spoken_chars(len(result.ids))


def test_word_units_follow_the_frontends_prosodic_words():
    text = "您好，请拨打13501234567查询2026年的账单。VIP客户"
    r = frontend(text)
    words = [text[u.start_char:u.end_char] for u in word_units(text, r.phones, r.id_source)]
    assert words[:3] == ["您好", "请拨打", "135"]
    assert "2026年的" in words and "VIP" in words
    units = word_units(text, r.phones, r.id_source)
    # 您好 is followed by a pause (#3 at the comma): it ends when the alignment leaves it; 请拨打 runs on into
    # 135 (#1): it ends when the alignment reaches 135's first id
    assert units[0].end_id == units[0].last_id + 1 and r.phones[units[0].end_id] == "#3"
    assert units[1].end_id == units[2].first_id
    chars = [text[u.start_char:u.end_char] for u in word_units(text, r.phones, r.id_source, by="char")]
    assert chars[:4] == ["您", "好", "请", "拨"] and "2026" in chars and "，" not in "".join(chars)


def test_units_cover_every_spoken_character_once():
    text = "您好，请在二十五号之前完成缴费，感谢您的耐心等待。"
    r = frontend(text)
    for by in ("word", "char"):
        units = word_units(text, r.phones, r.id_source, by=by)
        covered = [c for u in units for c in range(u.start_char, u.end_char)]
        assert covered == sorted(set(covered))
        assert set(covered) == {i for i, c in enumerate(text) if c.isalnum()}


def run(timer: WordTimer, peaks: list[int], chunk_frames: list[int]):
    """Feed peaks (one per step) as chunks of the given frame counts; (word, audio received at emission)."""
    total_frames = len(peaks) * R
    got, frame = [], 0
    released_at_emission = []
    for n in chunk_frames:
        if frame >= total_frames:
            break
        end = min(total_frames, frame + n)
        positions = peaks[frame // R: -(-end // R)]
        words = timer.push(frame * HOP, (end - frame) * HOP, positions)
        for w in words:
            got.append((w, end * HOP))
        released_at_emission.append(timer.hold_from_sample())
        frame = end
    if frame < total_frames:
        positions = peaks[frame // R:]
        for w in timer.push(frame * HOP, (total_frames - frame) * HOP, positions):
            got.append((w, total_frames * HOP))
    for w in timer.finish():
        got.append((w, total_frames * HOP))
    return got


UNITS = [Unit(1, 4, 0, 2, 5), Unit(6, 10, 2, 5, 11), Unit(12, 13, 6, 7, 14), Unit(15, 20, 7, 9, 21)]


def test_words_end_when_the_alignment_moves_past_them():
    peaks = [0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 19, 20, 21]
    got = run(WordTimer(UNITS, HOP, R), peaks, [4] * 20)
    assert [w for w, _ in got] == [
        WordTime(0, 2, 1 * STEP, 6 * STEP), WordTime(2, 5, 7 * STEP, 12 * STEP),
        WordTime(6, 7, 13 * STEP, 15 * STEP), WordTime(7, 9, 16 * STEP, 20 * STEP),
    ]


def test_unfinished_and_skipped_words():
    # the attention jumps over the second word and the audio ends inside the last one
    got = run(WordTimer(UNITS, HOP, R), [1, 2, 3, 5, 11, 12, 13, 16, 17], [3] * 10)
    words = [w for w, _ in got]
    assert words[1] == WordTime(2, 5, 4 * STEP, 4 * STEP)  # never reached: zero length where it was skipped
    assert words[-1] == WordTime(7, 9, 7 * STEP, 9 * STEP)  # ended by the end of the audio


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.integers(-2, 4), min_size=1, max_size=120),
    chunks=st.lists(st.integers(1, 13), min_size=1, max_size=40),
)
def test_order_never_late_covering_and_independent_of_chunking(steps, chunks):
    peaks, p = [], 0
    for d in steps:  # mostly forward, sometimes back: an attention peak path
        p = max(0, min(22, p + d))
        peaks.append(p)
    got = run(WordTimer(UNITS, HOP, R), peaks, chunks)
    words = [w for w, _ in got]
    assert [(w.start_char, w.end_char) for w in words] == [(u.start_char, u.end_char) for u in UNITS]
    for (w, received), nxt in zip(got, words[1:] + [None]):
        assert 0 <= w.start_sample <= w.end_sample <= received  # never describes audio not yet there
        if nxt is not None:
            assert w.end_sample <= nxt.start_sample
    # the same words whatever the chunk sizes
    assert words == [w for w, _ in run(WordTimer(UNITS, HOP, R), peaks, [len(peaks) * R])]


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(st.integers(0, 3), min_size=1, max_size=80), chunks=st.lists(st.integers(1, 9), max_size=30))
def test_holding_audio_from_hold_from_sample_sends_every_word_before_its_audio(steps, chunks):
    peaks = list(np.minimum(np.cumsum(steps), 22))
    timer = WordTimer(UNITS, HOP, R)
    released = 0  # samples handed to the pacer so far
    frame, total = 0, len(peaks) * R
    sizes = iter(chunks + [total])
    while frame < total:
        end = min(total, frame + next(sizes))
        for w in timer.push(frame * HOP, (end - frame) * HOP, peaks[frame // R: -(-end // R)]):
            assert released <= w.start_sample  # no audio of the word was released before its timing
        hold = timer.hold_from_sample()
        released = max(released, end * HOP if hold is None else min(end * HOP, hold))
        frame = end
    for w in timer.finish():
        assert released <= w.start_sample or w.start_sample == w.end_sample


def run_with_ahead(peaks: list[int], chunk_steps: list[int], aheads: list[int], with_starts: bool):
    """Feed peaks as chunks of whole steps, each with `ahead` decided steps past it (the engine's AudioChunk),
    releasing audio up to hold_from_sample; returns [(word, chunk index at emission, samples released before)]."""
    timer = WordTimer(UNITS, HOP, R)
    got, step, released, k = [], 0, 0, 0
    sizes, more = iter(chunk_steps), iter(aheads)
    while step < len(peaks):
        end = min(len(peaks), step + max(1, next(sizes, len(peaks))))
        ahead = range(end, min(len(peaks), end + next(more, 0)))
        starts = [i * STEP for i in range(step, end)] if with_starts else None
        ahead_starts = [i * STEP for i in ahead] if with_starts else None
        for w in timer.push(step * STEP, (end - step) * STEP, peaks[step:end], starts,
                            ahead=[peaks[i] for i in ahead], ahead_starts=ahead_starts):
            got.append((w, k, released))
        hold = timer.hold_from_sample()
        released = max(released, end * STEP if hold is None else min(end * STEP, hold))
        step, k = end, k + 1
    for w in timer.finish():
        got.append((w, k, released))
    return got


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.integers(-1, 3), min_size=1, max_size=80),
    chunks=st.lists(st.integers(1, 9), min_size=1, max_size=30),
    aheads=st.lists(st.integers(0, 20), min_size=1, max_size=30),
    with_starts=st.booleans(),
)
def test_decided_steps_ahead_time_the_same_words_sooner_and_never_after_their_audio(steps, chunks, aheads,
                                                                                     with_starts):
    peaks, p = [], 0
    for d in steps:
        p = max(0, min(22, p + d))
        peaks.append(p)
    plain = run_with_ahead(peaks, chunks, [0] * len(chunks), with_starts)
    ahead = run_with_ahead(peaks, chunks, aheads, with_starts)
    assert [w for w, _, _ in ahead] == [w for w, _, _ in plain] == [w for w, _ in run(WordTimer(UNITS, HOP, R), peaks,
                                                                                        [len(peaks) * R])]
    for (w, k, released), (_, k_plain, _) in zip(ahead, plain):
        assert k <= k_plain  # never later than from the chunks alone
        assert released <= w.start_sample or w.start_sample == w.end_sample  # timed before any of its audio went


def test_a_word_the_decoder_passed_is_timed_before_the_chunk_that_ends_it():
    peaks = [0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17, 19, 20, 21]
    timer = WordTimer(UNITS, HOP, R)
    # the first chunk holds steps 0-2; the decoder has decided up to step 11 (the first word ends at step 6)
    words = timer.push(0, 3 * STEP, peaks[:3], [0, STEP, 2 * STEP], ahead=peaks[3:12],
                       ahead_starts=[k * STEP for k in range(3, 12)])
    assert words == [WordTime(0, 2, 1 * STEP, 6 * STEP)]
    assert timer.hold_from_sample() == 7 * STEP  # the second word started (step 7), its end is not decided yet
    without = WordTimer(UNITS, HOP, R)
    assert without.push(0, 3 * STEP, peaks[:3], [0, STEP, 2 * STEP]) == []
    assert without.hold_from_sample() == 1 * STEP  # from chunks alone, the first word's audio waits
    # the next chunk repeats the ahead steps as its own; nothing is timed twice
    assert timer.push(3 * STEP, 5 * STEP, peaks[3:8], [k * STEP for k in range(3, 8)]) == []
    with pytest.raises(ValueError, match="ahead_starts"):
        timer.push(8 * STEP, STEP, peaks[8:9], [8 * STEP], ahead=peaks[9:10])


def test_segment_words_release_more_audio_with_the_steps_decided_ahead():
    """The call path's SegmentWords, fed AudioChunk fields with and without `ahead_positions`: the same words, no
    word after its first released sample, and with the decided steps the audio is held less."""
    from service.call.words import SegmentWords

    text = "您好，请拨打13501234567查询账单，感谢您的耐心等待。"
    r = frontend(text)
    steps = np.repeat(np.arange(len(r.ids)), 3)  # three steps per id: an alignment walking through the text
    chunk_steps, ahead_steps = 8, 15  # the decoder ~15 steps (31 frames) ahead of the audio, as on the Baker voice

    def feed(with_ahead: bool):
        sw = SegmentWords(text, r.phones, r.id_source, 0, STEP)
        released, words, held_after = 0, [], []
        for first in range(0, len(steps), chunk_steps):
            end = min(len(steps), first + chunk_steps)
            ahead = range(end, min(len(steps), end + ahead_steps)) if with_ahead else range(0)
            out, timed = sw.push(first * STEP, np.zeros((end - first) * STEP, np.float32), steps[first:end],
                                 np.arange(first, end) * STEP, steps[ahead.start:ahead.stop],
                                 np.arange(ahead.start, ahead.stop) * STEP)
            for w in timed:
                assert w.start_sample >= released or w.start_sample == w.end_sample
            words += timed
            released += len(out)
            held_after.append(end * STEP - released)
        out, timed = sw.finish()
        return words + timed, held_after

    words_plain, held_plain = feed(False)
    words_ahead, held_ahead = feed(True)
    assert words_ahead == words_plain and len(words_plain) >= 5
    assert all(a <= p for a, p in zip(held_ahead, held_plain))
    assert sum(held_ahead) < sum(held_plain) / 2  # the hold shrinks (it is not only the last word's)


def test_bad_geometry_and_gaps_are_refused():
    with pytest.raises(ValueError):
        WordTimer(UNITS, 0, R)
    timer = WordTimer(UNITS, HOP, R)
    with pytest.raises(ValueError, match="skips"):
        timer.push(10 * STEP, STEP, [3])
    with pytest.raises(ValueError):
        word_units("x", ["sil"], [None], by="syllable")


def test_ssml_and_timestamps_never_import_torch_or_grpc():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, service.ssml, service.timestamps; "
            "service.ssml.parse_ssml('<speak>好</speak>'); "
            "sys.exit(1 if {'torch', 'grpc'} & set(sys.modules) else 0)")
    repo = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=repo, timeout=60).returncode == 0
