"""The streamed postnet: every frame equals the whole-utterance Tacotron2.postnet (chunk sizes, random splits, rows of
different ages in one call, reused slots)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from models.streaming_postnet import StreamingPostnet, postnet_streamed
from models.tacotron2 import Tacotron2, Tacotron2Config
from tests.models.random_streams import random_calls

ATOL = 1e-5  # float32 rounding: a convolution over a shorter input may sum in another order


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_postnet_acoustic() -> Tacotron2:
    """Tiny random model, 5 postnet layers (context 10 as Baker) with non-trivial folded batch norms."""
    torch.manual_seed(0)
    model = Tacotron2(Tacotron2Config.tiny(postnet_layers=5, postnet_kernel=5)).eval()
    with torch.no_grad():
        for layer in model.postnet_convs:
            layer.scale.uniform_(0.5, 1.5)
            layer.shift.normal_(0, 0.3)
    return model


@pytest.fixture(scope="module")
def acoustic() -> Tacotron2:
    return tiny_postnet_acoustic()


def _whole(acoustic: Tacotron2, mel: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return acoustic.postnet(mel[None])[0]


def test_delay_is_the_postnet_context(acoustic) -> None:
    assert StreamingPostnet(acoustic, 1).delay_frames == acoustic.postnet_context_frames == 10


def test_every_chunk_size_equals_whole_utterance(acoustic) -> None:
    streamer = StreamingPostnet(acoustic, 2)
    mel = torch.randn(100, acoustic.config.n_mels, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        errors = {size: (postnet_streamed(streamer, mel, [size], slot=size % 2) - _whole(acoustic, mel)).abs().max()
                  for size in range(1, 97)}
        assert max(errors.values()) <= ATOL, errors
        for n in (1, 2, 5, 11):  # utterances shorter than the context
            short = mel[:n]
            torch.testing.assert_close(postnet_streamed(streamer, short, [3]), _whole(acoustic, short),
                                       atol=ATOL, rtol=0)


@pytest.mark.parametrize("seed", range(4))
def test_batched_rows_of_different_ages_and_random_splits(acoustic, seed) -> None:
    """Streams in different slots share calls (first and later calls in one batch, each row fed the same width),
    fed their frames then zeros; every stream's frames equal its whole-utterance postnet."""
    rng = random.Random(seed)
    slots, m = 4, acoustic.config.n_mels
    streamer = StreamingPostnet(acoustic, slots)
    gen = torch.Generator().manual_seed(seed)
    mels = [torch.randn(rng.randint(1, 150), m, generator=gen) for _ in range(8)]
    feeds = [torch.cat([x, x.new_zeros(streamer.delay_frames, m)]) for x in mels]
    pos = [0] * len(mels)
    out: list[list[torch.Tensor]] = [[] for _ in mels]
    live: dict[int, int] = {}  # slot → stream
    with torch.inference_mode():
        for width in random_calls(len(mels), slots, [1, 2, 3, 7, 10, 24, 47, 96], rng, live):
            rows = [(slot, s) for slot, s in sorted(live.items())
                    if rng.random() < 0.8 and (pos[s] > 0 or width >= streamer.min_first_frames)]
            if not rows:
                continue
            batch = torch.zeros(len(rows), width, m)  # past a stream's feed: more zeros, as the engine's buffer
            for b, (_, s) in enumerate(rows):
                piece = feeds[s][pos[s]: pos[s] + width]
                batch[b, : piece.shape[0]] = piece
            after = streamer.step([slot for slot, _ in rows], batch, [pos[s] == 0 for _, s in rows])
            for b, (slot, s) in enumerate(rows):
                out[s].append(after[b, max(0, streamer.delay_frames - pos[s]):])
                pos[s] += width
                if pos[s] >= feeds[s].shape[0]:
                    live.pop(slot)
                    streamer.reset([slot])
    for mel, pieces in zip(mels, out):
        joined = torch.cat(pieces)[: mel.shape[0]]
        torch.testing.assert_close(joined, _whole(acoustic, mel), atol=ATOL, rtol=0)


def test_a_reused_slot_keeps_nothing_of_its_previous_stream(acoustic) -> None:
    streamer = StreamingPostnet(acoustic, 1)
    torch.manual_seed(3)
    m = acoustic.config.n_mels
    with torch.inference_mode():
        streamer.step([0], torch.randn(1, 30, m) * 3, [True])  # cancelled mid-stream
        assert any(float(s.abs().sum()) > 0 for s in streamer.cache.slabs.values())
        streamer.reset([0])
        assert all(float(s.abs().sum()) == 0 for s in streamer.cache.slabs.values())
        mel = torch.randn(40, m)
        np.testing.assert_allclose(postnet_streamed(streamer, mel, [16, 24]).numpy(), _whole(acoustic, mel).numpy(),
                                   atol=ATOL, rtol=0)


def test_bad_shapes_are_refused(acoustic) -> None:
    streamer = StreamingPostnet(acoustic, 2)
    with pytest.raises(ValueError, match="mel_before"):
        streamer.step([0], torch.zeros(1, 4, acoustic.config.n_mels + 1), [True])
    with pytest.raises(ValueError, match="mel_before"):
        streamer.step([0, 1], torch.zeros(1, 4, acoustic.config.n_mels), [True, True])
    with pytest.raises(ValueError, match="first needs"):
        streamer.step([0], torch.zeros(1, 10, acoustic.config.n_mels), [True, False])
    with pytest.raises(ValueError, match="first call needs"):
        streamer.step([0], torch.zeros(1, streamer.min_first_frames - 1, acoustic.config.n_mels), [True])


@pytest.mark.slow
def test_baker_postnet_streamed_equals_whole_utterance(baker_fixtures, baker_voice_folder) -> None:
    """Real weights and decoded mels (tests/fixtures/baker), engine-like and odd chunk sizes."""
    from models.voices.bundle import load_voice

    acoustic = load_voice(str(baker_voice_folder), weights="fp32").acoustic.eval()
    streamer = StreamingPostnet(acoustic, 1)
    for n in range(3):
        mel = torch.from_numpy(np.load(baker_fixtures / f"seg{n}_mel_before.npy"))[0].float()
        whole = _whole(acoustic, mel)
        with torch.inference_mode():
            for sizes in ([47, 24], [47, 24, 48, 96], [1, 2, 3, 96], [7, 13]):
                out = postnet_streamed(streamer, mel, sizes)
                assert float((out - whole).abs().max()) <= ATOL, (n, sizes)
