"""The engine's streamed postnet takes few call widths (kernels are built per shape) and stays exact.

Random asks the way the runner makes them — rows of different ages, a decoding row's final frames just past what it
asks (a paced chunk becomes ready as soon as its frames are decoded), finished rows — and every call width must be
one of `StreamedPostnet.widths`, every mel_after frame the whole-utterance postnet's."""

from __future__ import annotations

import random

import pytest
import torch

from engine.postnet import PostnetAsk, StreamedPostnet
from models.tacotron2 import Tacotron2
from tests.models.test_streaming_postnet import tiny_postnet_acoustic

BUCKET, MAX_FRAMES, SLOTS = 8, 400, 4


@pytest.fixture(scope="module")
def acoustic() -> Tacotron2:
    return tiny_postnet_acoustic()


@pytest.mark.parametrize("seed", range(6))
def test_random_asks_take_only_listed_widths_and_match_the_whole_postnet(acoustic: Tacotron2, seed: int) -> None:
    rng = random.Random(seed)
    n_mels = acoustic.config.n_mels
    postnet = StreamedPostnet(acoustic, SLOTS, BUCKET, MAX_FRAMES)
    allowed = set(postnet.widths(200))
    widths: list[int] = []
    step = postnet.streamer.step

    def recording_step(rows, frames, first):  # noqa: ANN001
        widths.append(frames.shape[1])
        return step(rows, frames, first)

    postnet.streamer.step = recording_step  # type: ignore[method-assign]
    mel = torch.zeros(SLOTS, MAX_FRAMES, n_mels)
    mel_after = torch.zeros_like(mel)
    lengths = [rng.randint(20, 300) for _ in range(SLOTS)]
    utterances = [torch.randn(n, n_mels) for n in lengths]
    decoded = [0] * SLOTS
    asked = [0] * SLOTS
    with torch.inference_mode():
        while any(a < n for a, n in zip(asked, lengths)):
            asks = []
            for slot in range(SLOTS):
                n = lengths[slot]
                if asked[slot] >= n:
                    continue
                decoded[slot] = min(n, decoded[slot] + rng.choice([2, 4, 6, 16]))
                mel[slot, : decoded[slot]] = utterances[slot][: decoded[slot]]
                finished = decoded[slot] == n
                # the runner asks for frames whose postnet context is decoded (or the end, once finished)
                top = n if finished else decoded[slot] - postnet.ctx
                if top <= asked[slot] or rng.random() < 0.3:
                    continue
                end = min(top, asked[slot] + rng.choice([8, 16, 24, 37, 48, 96]))
                end = top if finished and rng.random() < 0.5 else end
                asks.append(PostnetAsk(slot, end, MAX_FRAMES if finished else decoded[slot]))
                asked[slot] = end
            postnet.run(mel, mel_after, asks)
            for a in asks:
                assert postnet.fed[a.slot] - postnet.ctx >= a.end_frame  # what was asked is ready
    assert set(widths) <= allowed, sorted(set(widths) - allowed)
    for slot in range(SLOTS):
        whole = acoustic.postnet(utterances[slot][None])[0]
        torch.testing.assert_close(mel_after[slot, : lengths[slot]], whole, atol=1e-5, rtol=1e-4)


def test_a_row_whose_final_frames_end_between_multiples_is_fed_in_two_calls(acoustic: Tacotron2) -> None:
    """A first call needing 26 frames (16 asked + the delay of 10) with 30 final: 32 would read frames that are not
    final yet, so the row takes 24 and then 2; the next call rounds up to a multiple, which the final frames allow."""
    postnet = StreamedPostnet(acoustic, 1, BUCKET, MAX_FRAMES)
    calls: list[tuple[int, bool]] = []
    step = postnet.streamer.step
    postnet.streamer.step = lambda rows, frames, first: (calls.append((frames.shape[1], first[0])),  # type: ignore
                                                         step(rows, frames, first))[1]
    mel = torch.randn(1, MAX_FRAMES, acoustic.config.n_mels)
    after = torch.zeros_like(mel)
    with torch.inference_mode():
        postnet.run(mel, after, [PostnetAsk(0, 16, 30)])
        assert calls == [(24, True), (2, False)]
        calls.clear()
        postnet.run(mel, after, [PostnetAsk(0, 30, 64)])  # 14 more needed, 16 taken
        assert calls == [(16, False)]
