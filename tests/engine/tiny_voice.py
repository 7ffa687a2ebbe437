"""A tiny random voice for engine tests: real Tacotron2 + MB-MelGAN code, with weights nudged to stop and be loud."""

from __future__ import annotations

import torch

from models.mb_melgan import MBMelGAN, MBMelGANConfig
from models.streaming_vocoder import VocoderStreamSpec
from models.tacotron2 import Tacotron2, Tacotron2Config
from models.voices.bundle import Voice

# L and R cover the tiny MB-MelGAN's whole receptive field, so chunked vocoding is exact up to float rounding.
TINY_SPEC = dict(left_context_frames=12, right_context_frames=12, crossfade_samples=32, min_frames=4)


def make_tiny_voice(seed: int = 0, max_decoder_steps: int = 80) -> Voice:
    """Tiny voice whose utterances stop after 6–50 decoder steps depending on ids and seed (loud frames)."""
    torch.manual_seed(seed)
    vocoder_cfg = MBMelGANConfig.tiny()
    acoustic = Tacotron2.from_config(
        Tacotron2Config.tiny(n_mels=vocoder_cfg.num_mels, max_decoder_steps=max_decoder_steps)
    ).eval()
    vocoder = MBMelGAN.from_config(vocoder_cfg).eval()
    with torch.no_grad():
        acoustic.frame_projection.bias += 1.0  # frames well above the trailing-trim threshold
        # a steep stop gate on a slowly drifting logit: rows stop at different, input-dependent steps
        k = 60.0
        acoustic.stop_projection.weight.mul_(k)
        acoustic.stop_projection.bias.copy_(k * (acoustic.stop_projection.bias - torch.tensor([-0.39, 0.40])))
    spec = VocoderStreamSpec(hop_samples=vocoder_cfg.hop_samples, sample_rate_hz=vocoder_cfg.sample_rate_hz, **TINY_SPEC)
    return Voice(
        name="tiny",
        acoustic=acoustic,
        vocoder=vocoder,
        stream_spec=spec,
        sample_rate_hz=vocoder_cfg.sample_rate_hz,
        symbols=[f"s{i}" for i in range(acoustic.config.n_symbols)],
        meta={"name": "tiny", "kind": "voice"},
    )


def whole_utterance(voice: Voice, ids: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: Tacotron2.synthesize (dropout on) + one vocoder pass over the whole mel → (audio [N], peaks)."""
    mel_after, peaks = voice.acoustic.synthesize(torch.tensor(ids), seed=seed, dropout=True)
    if mel_after.shape[0] == 0:
        return torch.zeros(0), peaks
    with torch.inference_mode():
        audio = voice.vocoder(mel_after.unsqueeze(0))[0]
    return audio, peaks
