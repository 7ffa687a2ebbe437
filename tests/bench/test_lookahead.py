"""bench.lookahead on the tiny voice: the exact look-ahead reproduces the exact audio, a shorter one is measured
against it, the saved decoder steps follow the frame arithmetic, and the command writes its table and JSON."""

from __future__ import annotations

import json
import math

import pytest
import torch

from bench.lookahead import evaluate, first_chunk_errors, main, parse_lookaheads
from models.voices.bundle import tiny_voice


def test_parse_lookaheads_adds_the_exact_row_and_refuses_more_than_exact():
    assert parse_lookaheads("8,exact,0", 21) == [21, 8, 0]
    assert parse_lookaheads("4", 21) == [21, 4]
    with pytest.raises(ValueError, match="outside"):
        parse_lookaheads("22", 21)


@torch.inference_mode()
def test_the_exact_lookahead_is_the_exact_audio_and_none_is_not():
    voice = tiny_voice()
    torch.manual_seed(3)
    mel = torch.randn(60, voice.acoustic.config.n_mels)
    hop = int(voice.vocoder.hop_samples)
    exact = voice.vocoder(mel.unsqueeze(0))[0].float()
    full = first_chunk_errors(voice.vocoder, mel, exact, 16, 5, hop)  # tiny MB-MelGAN: 4.72 frames, rounded up
    assert full["rel_l2"] < 1e-5 and full["seam_jump"] < 1e-5
    assert full["joined"].shape == exact.numpy().shape
    none = first_chunk_errors(voice.vocoder, mel, exact, 16, 0, hop)
    assert none["rel_l2"] > 1e-3 and none["tail_rel_l2"] > none["rel_l2"]  # the error sits at the chunk's end


def test_report_rows_follow_the_frame_arithmetic():
    voice = tiny_voice()
    report = evaluate(voice, [5, 2, 0], first_frames=16, sentences=["您好，欢迎致电。"], use_dnsmos=False)
    r, ctx = report["reduction_factor"], report["postnet_context_frames"]
    assert report["exact_lookahead_frames"] == 5
    exact_steps = math.ceil((16 + 5 + ctx) / r)
    for row in report["summary"]:
        la = row["lookahead_frames"]
        assert row["decoded_frames_before_first_audio"] == 16 + la + ctx
        assert row["decoder_steps_saved"] == exact_steps - math.ceil((16 + la + ctx) / r)
    assert report["summary"][0]["rel_l2_max"] < 1e-5 and report["summary"][0]["decoder_steps_saved"] == 0


def test_the_command_prints_a_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "la.json"
    assert main(["--voice", "tiny", "--sentences", "2", "--lookahead", "exact,0", "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| look-ahead frames |" in table and "\n| 0 | " in table
    report = json.loads(out.read_text(encoding="utf-8"))
    assert [row["lookahead_frames"] for row in report["summary"]] == [5, 0]
    assert len(report["per_sentence"]["0"]) == 2
