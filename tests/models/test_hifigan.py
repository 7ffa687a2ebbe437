"""HiFi-GAN generator: shapes, configs, weight-norm folding, and the real universal checkpoint on a harmonic signal."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch

from models.hifigan import HiFiGAN, HiFiGANConfig, HiFiGANConfigError
from models.mb_melgan import EmptyMelError
from models.voices.convert_hifigan import (
    HiFiGANCheckpointError,
    convert_hifigan,
    fold_weight_norm,
)

# ---------------------------------------------------------------- jik876 mel recipe (research §7.2), test-only

def _hz_to_mel_slaney(hz: np.ndarray) -> np.ndarray:
    hz = np.asarray(hz, dtype=np.float64)
    f_sp, min_log_hz, min_log_mel, logstep = 200.0 / 3, 1000.0, 15.0, math.log(6.4) / 27.0
    mel = hz / f_sp
    return np.where(hz >= min_log_hz, min_log_mel + np.log(np.maximum(hz, 1e-10) / min_log_hz) / logstep, mel)


def _mel_to_hz_slaney(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    f_sp, min_log_hz, min_log_mel, logstep = 200.0 / 3, 1000.0, 15.0, math.log(6.4) / 27.0
    return np.where(mel >= min_log_mel, min_log_hz * np.exp(logstep * (mel - min_log_mel)), f_sp * mel)


def slaney_mel_basis(sample_rate_hz: int, n_fft: int, n_mels: int, fmin_hz: float, fmax_hz: float) -> np.ndarray:
    """librosa.filters.mel(htk=False, norm='slaney') re-implemented: [n_mels, n_fft // 2 + 1]."""
    fft_hz = np.linspace(0, sample_rate_hz / 2, n_fft // 2 + 1)
    mel_hz = _mel_to_hz_slaney(np.linspace(_hz_to_mel_slaney(fmin_hz), _hz_to_mel_slaney(fmax_hz), n_mels + 2))
    fdiff = np.diff(mel_hz)
    ramps = mel_hz[:, None] - fft_hz[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    return weights * (2.0 / (mel_hz[2:] - mel_hz[:-2]))[:, None]


def jik876_mel(audio: torch.Tensor, sample_rate_hz: int = 22050, n_fft: int = 1024, hop: int = 256,
               win: int = 1024, n_mels: int = 80, fmin_hz: float = 0.0, fmax_hz: float = 8000.0) -> torch.Tensor:
    """jik876 meldataset.mel_spectrogram: audio [N] → ln-mel [N // hop, n_mels] (reflect pad (n_fft−hop)/2, no centre)."""
    pad = (n_fft - hop) // 2
    y = torch.nn.functional.pad(audio[None, None].double(), (pad, pad), mode="reflect")[0, 0]
    spec = torch.stft(y, n_fft, hop_length=hop, win_length=win, window=torch.hann_window(win, dtype=torch.float64),
                      center=False, normalized=False, onesided=True, return_complex=True)
    mag = torch.sqrt(spec.real ** 2 + spec.imag ** 2 + 1e-9)
    basis = torch.from_numpy(slaney_mel_basis(sample_rate_hz, n_fft, n_mels, fmin_hz, fmax_hz))
    return torch.log(torch.clamp(basis @ mag, min=1e-5)).T.float()


def harmonic_signal(f0_hz: float, seconds: float, sample_rate_hz: int, harmonics: int = 12) -> torch.Tensor:
    """A steady voiced-like tone: harmonics k·f0 with 1/k amplitudes, peak about 0.5: [N]."""
    t = torch.arange(int(seconds * sample_rate_hz), dtype=torch.float64) / sample_rate_hz
    x = sum(torch.sin(2 * math.pi * k * f0_hz * t) / k for k in range(1, harmonics + 1))
    return (0.5 * x / x.abs().max()).float()


def weight_normed_reference(config: HiFiGANConfig, raw_state: dict[str, torch.Tensor]) -> HiFiGAN:
    """The same generator with legacy torch weight norm on every conv, loaded with the raw g/v state dict."""
    ref = HiFiGAN(config).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.nn.utils.weight_norm is deprecated, still the checkpoint's format
        for module in ref.modules():
            if isinstance(module, (torch.nn.Conv1d, torch.nn.ConvTranspose1d)):
                torch.nn.utils.weight_norm(module)
    ref.load_state_dict(raw_state)
    return ref


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


# ---------------------------------------------------------------- fast: tiny random models

@pytest.mark.parametrize("resblock", ["1", "2"])
def test_tiny_shapes_and_range(resblock: str) -> None:
    torch.manual_seed(0)
    cfg = HiFiGANConfig.tiny(resblock)
    model = HiFiGAN.from_config(cfg.to_dict()).eval()
    for frames in (1, 3, 17):
        with torch.no_grad():
            audio = model(torch.randn(2, frames, cfg.num_mels))
        assert audio.shape == (2, frames * cfg.hop_samples)
        assert torch.isfinite(audio).all() and audio.abs().max() <= 1.0


def test_zero_frames_raises() -> None:
    model = HiFiGAN(HiFiGANConfig.tiny())
    with pytest.raises(EmptyMelError):
        model(torch.zeros(1, 0, 8))
    with pytest.raises(ValueError):
        model(torch.zeros(1, 5, 7))


@pytest.mark.parametrize("factory", [HiFiGANConfig.v1, HiFiGANConfig.v2, HiFiGANConfig.v3])
def test_jik876_configs_build_with_expected_sizes(factory) -> None:
    cfg = factory()
    model = HiFiGAN(cfg)
    assert cfg.hop_samples == 256
    sd = model.state_dict()
    ch = cfg.upsample_initial_channel
    assert sd["conv_pre.weight"].shape == (ch, 80, 7)
    assert sd["ups.0.weight"].shape == (ch, ch // 2, cfg.upsample_kernel_sizes[0])  # ConvTranspose [in, out, k]
    assert sd["conv_post.weight"].shape == (1, ch // 2 ** len(cfg.upsample_rates), 7)
    assert len(model.resblocks) == len(cfg.upsample_rates) * len(cfg.resblock_kernel_sizes)
    if cfg.resblock == "2":
        assert "resblocks.0.convs.1.weight" in sd and "resblocks.0.convs1.0.weight" not in sd
    assert HiFiGANConfig.from_dict(cfg.to_dict()) == cfg
    json.dumps(cfg.to_dict())


def test_v1_parameter_count_matches_the_checkpoint_after_folding() -> None:
    # research §7.1: 13,926,017 values once weight_g is folded away
    assert sum(p.numel() for p in HiFiGAN(HiFiGANConfig.v1()).parameters()) == 13_926_017


@pytest.mark.parametrize("bad", [
    {"unknown_key": 1},
    {"resblock": "3"},
    {"upsample_rates": [8, 8], "upsample_kernel_sizes": [16]},
    {"upsample_kernel_sizes": [15, 16, 4, 4]},
    {"resblock_dilation_sizes": [[1, 3], [1, 3, 5], [1, 3, 5]]},
])
def test_config_rejects_bad_values(bad: dict) -> None:
    with pytest.raises(HiFiGANConfigError):
        HiFiGANConfig.from_dict({**HiFiGANConfig.v1().to_dict(), **bad})


def _weight_normed_state(model: HiFiGAN, seed: int) -> dict[str, torch.Tensor]:
    """A raw checkpoint-style state dict (weight_g / weight_v) with random g, from a model's random weights."""
    gen = torch.Generator().manual_seed(seed)
    raw = {}
    for key, value in model.state_dict().items():
        if key.endswith(".weight"):
            base = key[: -len(".weight")]
            raw[base + ".weight_v"] = value.clone()
            g_shape = (value.shape[0],) + (1,) * (value.dim() - 1)
            raw[base + ".weight_g"] = torch.rand(g_shape, generator=gen) + 0.5
        else:
            raw[key] = value.clone()
    return raw


@pytest.mark.parametrize("resblock", ["1", "2"])
def test_fold_equals_weight_normed_reference_tiny(resblock: str) -> None:
    torch.manual_seed(1)
    cfg = HiFiGANConfig.tiny(resblock)
    raw = _weight_normed_state(HiFiGAN(cfg), seed=2)
    folded = fold_weight_norm({k: v.numpy() for k, v in raw.items()})
    assert set(folded) == set(HiFiGAN(cfg).state_dict())
    model = HiFiGAN(cfg).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in folded.items()})
    ref = weight_normed_reference(cfg, raw)
    mel = torch.randn(2, 12, cfg.num_mels)
    with torch.no_grad():
        assert rel_l2(model(mel), ref(mel)) < 1e-5


def test_fold_rejects_mismatched_pairs() -> None:
    v = np.ones((4, 3, 5), np.float32)
    with pytest.raises(HiFiGANCheckpointError):
        fold_weight_norm({"a.weight_g": np.ones((3, 1, 1), np.float32), "a.weight_v": v})
    with pytest.raises(HiFiGANCheckpointError):
        fold_weight_norm({"a.weight_g": np.ones((4, 1, 1), np.float32)})


def test_convert_checks_keys_against_config(tmp_path) -> None:
    torch.manual_seed(0)
    cfg = HiFiGANConfig.tiny()
    raw = _weight_normed_state(HiFiGAN(cfg), seed=3)
    jik = {"resblock": "1", "upsample_rates": [4, 2], "upsample_kernel_sizes": [8, 4], "upsample_initial_channel": 16,
           "resblock_kernel_sizes": [3, 5], "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5]], "num_mels": 8,
           "sampling_rate": 8000, "hop_size": 8, "n_fft": 64, "win_size": 64, "fmin": 0, "fmax": None,
           "learning_rate": 0.0002, "batch_size": 16}
    (tmp_path / "config.json").write_text(json.dumps(jik))
    torch.save({"generator": raw}, tmp_path / "g.pth")
    config, tensors = convert_hifigan(tmp_path / "g.pth", tmp_path / "config.json")
    assert HiFiGANConfig.from_dict(config) == HiFiGANConfig.from_dict({**cfg.to_dict(), "mel_n_fft": 64,
                                                                        "mel_win_samples": 64, "mel_fmax_hz": None})
    assert all(t.dtype == np.float32 for t in tensors.values())
    # a checkpoint that does not fit the config fails clearly
    (tmp_path / "v2.json").write_text(json.dumps({**jik, "upsample_initial_channel": 32}))
    with pytest.raises(HiFiGANCheckpointError, match="shape|missing"):
        convert_hifigan(tmp_path / "g.pth", tmp_path / "v2.json")
    (tmp_path / "bad_hop.json").write_text(json.dumps({**jik, "hop_size": 256}))
    with pytest.raises(HiFiGANCheckpointError, match="hop_size"):
        convert_hifigan(tmp_path / "g.pth", tmp_path / "bad_hop.json")


def test_mel_recipe_puts_a_tone_in_the_right_bin() -> None:
    sr = 22050
    t = torch.arange(sr) / sr
    mel = jik876_mel(0.5 * torch.sin(2 * math.pi * 1000 * t))
    assert mel.shape == (sr // 256, 80)
    centres = _mel_to_hz_slaney(np.linspace(_hz_to_mel_slaney(0), _hz_to_mel_slaney(8000), 82))[1:-1]
    assert abs(centres[int(mel[20:-20].mean(0).argmax())] - 1000) < 60


# ---------------------------------------------------------------- slow: the real universal checkpoint

@pytest.fixture(scope="module")
def universal(hifigan_data_dir):
    config, tensors = convert_hifigan(hifigan_data_dir / "generator_universal.pth.tar", hifigan_data_dir / "config.json")
    model = HiFiGAN.from_config(config).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()})
    return config, model


@pytest.mark.slow
def test_universal_fold_is_exact(universal, hifigan_data_dir) -> None:
    config, model = universal
    assert HiFiGANConfig.from_dict(config) == HiFiGANConfig.v1()
    raw = torch.load(hifigan_data_dir / "generator_universal.pth.tar", map_location="cpu", weights_only=True)
    ref = weight_normed_reference(HiFiGANConfig.from_dict(config), raw["generator"])
    torch.manual_seed(0)
    mel = torch.randn(1, 24, 80) * 1.5 - 5.0
    with torch.no_grad():
        err = rel_l2(model(mel), ref(mel))
    assert err < 1e-5, err


@pytest.mark.slow
def test_universal_vocodes_harmonics_of_a_synthetic_tone(universal) -> None:
    """A 150 Hz harmonic tone → jik876 mel → universal HiFi-GAN: the audio's spectrum peaks at k·150 Hz."""
    _, model = universal
    sr, f0 = 22050, 150.0
    mel = jik876_mel(harmonic_signal(f0, 1.5, sr), sr)
    with torch.no_grad():
        audio = model(mel[None])[0].double()
    seg = audio[sr // 4: sr // 4 + sr]  # 1 s from the steady middle: 1 Hz bins
    spec = torch.fft.rfft(seg * torch.hann_window(seg.numel(), dtype=torch.float64)).abs()

    def band(hz: float) -> float:
        return float(spec[int(hz) - 4: int(hz) + 5].max())

    for k in range(1, 9):
        on, off = band(k * f0), band((k + 0.5) * f0)
        assert 20 * math.log10(on / off) > 15, (k, on, off)
    strongest_low = int(spec[50:400].argmax()) + 50
    assert abs(strongest_low - f0) <= 3
    assert 0.05 < float(audio.abs().max()) <= 1.0
    # re-analysed, the audio gives back the mel it came from where that mel is loud (measured: 0.43 ln units)
    again = jik876_mel(audio.float(), sr)[10:-10]
    loud = mel[10:-10] > -4.0
    assert float((again - mel[10:-10])[loud].abs().mean()) < 0.8
