"""Fast tests of Tacotron2 on tiny random models: shapes, batching, chunking, state moves, postnet windows, errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models.tacotron2 import (
    DecoderState,
    EncoderOutput,
    Tacotron2,
    Tacotron2Config,
    Tacotron2ConfigError,
    Tacotron2InputError,
    dropout_hash,
)

ATOL = 1e-5


def lively_model(seed: int = 0, **overrides) -> Tacotron2:
    """Tiny random model with weights scaled up so stop logits drift across 0 at different steps per row."""
    torch.manual_seed(seed)
    model = Tacotron2(Tacotron2Config.tiny(**overrides)).eval()
    with torch.no_grad():
        for cell in (model.attention_lstm, model.decoder_lstm):
            cell.weight_ih.mul_(3.0)
            cell.weight_hh.mul_(3.0)
        model.frame_projection.weight.mul_(3.0)
        model.attention_v.weight.mul_(4.0)
        model.stop_projection.weight.mul_(40.0)
        model.stop_projection.bias.zero_()
    return model


def batch_inputs(lengths: list[int], n_symbols: int = 12, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.randint(1, n_symbols, (len(lengths), T), generator=g)
    for b, n in enumerate(lengths):
        ids[b, n:] = 0
    return ids, torch.tensor(lengths)


def assert_outputs_equal(a, b, atol: float = ATOL) -> None:
    torch.testing.assert_close(a.frames, b.frames, atol=atol, rtol=0)
    assert torch.equal(a.stop, b.stop)
    assert torch.equal(a.peak, b.peak)
    assert torch.equal(a.finished, b.finished)
    assert torch.equal(a.n_steps, b.n_steps)


def cat_outputs(outs):
    """Concatenate chunked DecodeOutputs along the step axis."""
    return dataclasses.replace(
        outs[-1],
        frames=torch.cat([o.frames for o in outs], 1),
        stop=torch.cat([o.stop for o in outs], 1),
        peak=torch.cat([o.peak for o in outs], 1),
        n_steps=sum(o.n_steps for o in outs),
        truncated=torch.stack([o.truncated for o in outs]).any(0),
    )


# ---------------------------------------------------------------- config


def test_config_round_trip_and_unknown_keys():
    cfg = Tacotron2Config.tiny(reduction_factor=1, n_prosody_symbols=4)
    d = cfg.to_dict()
    assert d["prenet_dims"] == [12, 12]
    assert Tacotron2Config.from_dict(d) == cfg
    with pytest.raises(Tacotron2ConfigError, match="Tacotron2Config: unknown key.*'bogus'"):
        Tacotron2Config.from_dict({**d, "bogus": 1})
    with pytest.raises(Tacotron2ConfigError):
        Tacotron2Config.tiny(postnet_kernel=4)
    model = Tacotron2.from_config(d)
    assert model.config == cfg


def test_baker_defaults():
    cfg = Tacotron2Config()
    assert (cfg.memory_dim, cfg.reduction_factor, cfg.n_mels, cfg.attention_window) == (512, 2, 80, 6)
    assert (cfg.sample_rate_hz, cfg.hop_samples, cfg.max_decoder_steps, cfg.max_input_len) == (24000, 300, 1000, 512)
    assert Tacotron2(Tacotron2Config.tiny(postnet_layers=5, postnet_kernel=5)).postnet_context_frames == 10


# ---------------------------------------------------------------- shapes


def test_encode_and_decode_shapes_and_masking():
    model = lively_model()
    c = model.config
    ids, lengths = batch_inputs([9, 5, 2])
    enc = model.encode(ids, lengths)
    assert enc.memory.shape == (3, 9, c.memory_dim)
    assert enc.keys.shape == (3, 9, c.attention_dim)
    assert torch.equal(enc.lengths, lengths)
    assert enc.memory[1, 5:].abs().max() == 0 and enc.memory[2, 2:].abs().max() == 0
    assert enc.memory[1, :5].abs().min(dim=-1).values.gt(0).all()
    state = model.new_state(enc, torch.tensor([1, 2, 3]))
    out = model.decode(state, 7)
    assert out.frames.shape == (3, 7 * c.reduction_factor, c.n_mels)
    assert out.stop.shape == out.peak.shape == (3, 7)
    assert out.finished.shape == out.n_steps.shape == out.truncated.shape == (3,)
    produced = out.peak >= 0
    assert torch.equal(produced.sum(1), out.n_steps)
    for b, n in enumerate(lengths.tolist()):  # alignment stays inside each row's input
        assert out.peak[b][produced[b]].max() < n
    assert torch.equal(state.step, out.n_steps)


def test_padding_does_not_leak_into_the_encoder():
    """A row's memory equals the memory of the same ids encoded alone, whatever the padding holds."""
    model = lively_model()
    ids, lengths = batch_inputs([9, 4])
    ids[1, 4:] = 7  # garbage (but valid) ids in the padding
    enc = model.encode(ids, lengths)
    alone = model.encode(ids[1:, :4], lengths[1:])
    torch.testing.assert_close(enc.memory[1, :4], alone.memory[0], atol=ATOL, rtol=0)
    torch.testing.assert_close(enc.keys[1, :4], alone.keys[0], atol=ATOL, rtol=0)


# ---------------------------------------------------------------- batching and chunking


@pytest.mark.parametrize("dropout", [True, False])
def test_batched_decoding_equals_each_row_alone(dropout):
    model = lively_model()
    ids, lengths = batch_inputs([9, 5, 2, 7])
    seeds = torch.tensor([11, 22, 33, 44])
    steps = 30
    state = model.new_state(model.encode(ids, lengths), seeds)
    batched = model.decode(state, steps, dropout=dropout)
    n_steps = batched.n_steps.tolist()
    assert len(set(n_steps)) > 1, "precondition: rows must finish at different steps"
    assert batched.finished.any() and not batched.finished.all()
    for b in range(4):
        n = int(lengths[b])
        alone_state = model.new_state(model.encode(ids[b:b + 1, :n], lengths[b:b + 1]), seeds[b:b + 1])
        alone = model.decode(alone_state, steps, dropout=dropout)
        row = dataclasses.replace(
            batched, frames=batched.frames[b:b + 1], stop=batched.stop[b:b + 1], peak=batched.peak[b:b + 1],
            finished=batched.finished[b:b + 1], n_steps=batched.n_steps[b:b + 1],
        )
        assert_outputs_equal(row, alone)


def test_finished_rows_emit_zero_frames_and_keep_state():
    model = lively_model()
    ids, lengths = batch_inputs([9, 5, 2, 7])
    state = model.new_state(model.encode(ids, lengths), torch.tensor([11, 22, 33, 44]))
    out = model.decode(state, 30, dropout=False)
    r = model.config.reduction_factor
    for b in range(4):
        n = int(out.n_steps[b])
        if out.finished[b]:
            assert bool(out.stop[b, n - 1]) and int(out.stop[b].sum()) == 1  # the firing step is emitted
            assert out.frames[b, n * r:].abs().max() == 0
            assert (out.peak[b, n:] == -1).all()
        assert out.frames[b, : n * r].abs().sum(-1).gt(0).all()
    snapshot = dataclasses.replace(state)
    frozen = {f.name: getattr(state, f.name).clone() for f in dataclasses.fields(state)}
    again = model.decode(snapshot, 5, dropout=False)
    done = out.finished
    assert again.frames[done].abs().max() == 0 and not again.stop[done].any()
    assert torch.equal(again.n_steps[done], torch.zeros(int(done.sum()), dtype=torch.long))
    for name in ("att_h", "dec_c", "attn_cum", "last_frame", "step", "peak"):
        assert torch.equal(getattr(snapshot, name)[done], frozen[name][done]), name


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_chunked_decoding_equals_one_long_decode(chunk):
    model = lively_model()
    ids, lengths = batch_inputs([9, 5, 2, 7])
    seeds = torch.tensor([5, 6, 7, 8])
    steps = 21
    whole = model.decode(model.new_state(model.encode(ids, lengths), seeds), steps, dropout=True)
    state = model.new_state(model.encode(ids, lengths), seeds)
    outs = [model.decode(state, min(chunk, steps - s), dropout=True) for s in range(0, steps, chunk)]
    assert_outputs_equal(cat_outputs(outs), whole, atol=0.0)


def test_dropout_mask_depends_only_on_seed_step_layer_unit():
    model = lively_model()
    keys = model._dropout_unit_keys
    seeds = torch.tensor([3, 3, 4, -5, 2**40 + 3])
    steps = torch.tensor([0, 1, 0, 0, 0])
    h = dropout_hash(seeds, steps, keys)
    assert h.min() >= 0 and h.max() < 2**32
    # same (seed, step) in another batch, alone, or another position gives the same hash
    torch.testing.assert_close(dropout_hash(seeds[2:3], steps[2:3], keys), h[2:3], atol=0, rtol=0)
    assert not torch.equal(h[0], h[1])  # step changes the mask
    assert not torch.equal(h[0], h[2])  # seed changes the mask
    assert not torch.equal(h[0], h[4])  # the high 32 bits of the seed count
    # keep probability ≈ 0.5 over many (seed, step, unit)
    big = dropout_hash(torch.arange(200), torch.arange(200) % 7, keys)
    keep = (big < model._keep_below).float().mean().item()
    assert 0.47 < keep < 0.53
    # consecutive steps of one row are not correlated
    a = dropout_hash(torch.zeros(100, dtype=torch.long), torch.arange(100), keys) < model._keep_below
    agree = (a[1:] == a[:-1]).float().mean().item()
    assert 0.45 < agree < 0.55


def _py_fmix32(x: int) -> int:
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & 0xFFFFFFFF
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_dropout_hash_is_murmur3_fmix_chain():
    """The documented hash, recomputed with Python's unbounded ints: pins seeded audio across versions."""
    model = lively_model()
    seeds = [0, 1, -1, 2**33 + 5, -(2**62) + 7, 2**63 - 1]
    steps = [0, 999, 3, 2**31 + 1, 17, 5]
    got = dropout_hash(torch.tensor(seeds), torch.tensor(steps), model._dropout_unit_keys)
    dims = model.config.prenet_dims
    units = [(layer << 20) + u for layer, d in enumerate(dims) for u in range(d)]
    for b, (seed, step) in enumerate(zip(seeds, steps)):
        s = seed & 0xFFFFFFFFFFFFFFFF
        key = _py_fmix32(_py_fmix32((s & 0xFFFFFFFF) ^ 0x9E3779B9) ^ (s >> 32))
        h = _py_fmix32(key ^ (step & 0xFFFFFFFF))
        expected = [_py_fmix32(h ^ _py_fmix32(u)) for u in units]
        assert got[b].tolist() == expected


def test_dropout_flag_changes_output_and_seed_matters():
    model = lively_model()
    ids, lengths = batch_inputs([6])
    enc = model.encode(ids, lengths)
    on_a = model.decode(model.new_state(enc, torch.tensor([1])), 5, dropout=True)
    on_b = model.decode(model.new_state(enc, torch.tensor([2])), 5, dropout=True)
    off = model.decode(model.new_state(enc, torch.tensor([1])), 5, dropout=False)
    assert not torch.allclose(on_a.frames, on_b.frames)
    assert not torch.allclose(on_a.frames, off.frames)
    off_other_seed = model.decode(model.new_state(enc, torch.tensor([2])), 5, dropout=False)
    torch.testing.assert_close(off.frames, off_other_seed.frames, atol=0, rtol=0)


# ---------------------------------------------------------------- state pool


def test_index_select_index_copy_round_trip():
    model = lively_model()
    cfg = model.config
    pool = DecoderState.allocate(cfg, capacity=6, max_len=12)
    assert pool.finished.all() and pool.memory.abs().max() == 0
    ids, lengths = batch_inputs([9, 5, 2])
    seeds = torch.tensor([11, 22, 33])
    fresh = model.new_state(model.encode(ids, lengths), seeds)
    rows = torch.tensor([4, 0, 2])
    pool.index_copy_(rows, fresh)
    assert pool.memory[4, 9:].abs().max() == 0 and pool.lengths.tolist() == [5, 0, 2, 0, 9, 0]

    # decode via the pool: gather two rows (cropped to their longest), step, scatter back
    sub = pool.index_select(torch.tensor([0, 2]))
    assert sub.max_len == 5
    out_sub = model.decode(sub, 4)
    pool.index_copy_(torch.tensor([0, 2]), sub)
    sub2 = pool.index_select(rows)
    assert sub2.max_len == 9
    out_rest = model.decode(sub2, 6)

    # the same work without the pool: rows 1, 2 advance 4 steps (cropped to T=5), then all rows 6 steps
    ref = model.new_state(model.encode(ids, lengths), seeds)
    part = ref.index_select(torch.tensor([1, 2]))
    assert part.max_len == 5
    assert_outputs_equal(out_sub, model.decode(part, 4))
    ref.index_copy_(torch.tensor([1, 2]), part)
    assert_outputs_equal(out_rest, model.decode(ref, 6))

    # round trip preserves every field
    back = pool.index_select(rows)
    pool2 = DecoderState.allocate(cfg, capacity=6, max_len=12)
    pool2.index_copy_(rows, back)
    for f in dataclasses.fields(pool):
        assert torch.equal(getattr(pool2, f.name)[rows], getattr(pool, f.name)[rows]), f.name


def test_index_copy_rejects_mismatched_rows():
    cfg = Tacotron2Config.tiny()
    pool = DecoderState.allocate(cfg, capacity=3, max_len=4)
    big = DecoderState.allocate(cfg, capacity=1, max_len=8)
    with pytest.raises(Tacotron2InputError):
        pool.index_copy_(torch.tensor([0]), big)
    with pytest.raises(Tacotron2InputError):
        pool.index_copy_(torch.tensor([0, 1]), DecoderState.allocate(cfg, capacity=1, max_len=4))


# ---------------------------------------------------------------- postnet


def test_postnet_windows_equal_whole_utterance():
    model = lively_model(postnet_layers=5, postnet_kernel=5)
    ctx = model.postnet_context_frames
    assert ctx == 10
    g = torch.Generator().manual_seed(3)
    T, M = 47, model.config.n_mels
    mel = torch.randn(1, T, M, generator=g)
    whole = model.postnet(mel)
    # explicit zeros after the end change nothing (the graph's buffer is zero past the last frame)
    torch.testing.assert_close(model.postnet(torch.cat([mel, torch.zeros(1, 30, M)], 1))[:, :T], whole)
    for a, b in [(0, 7), (3, 12), (7, 20), (20, 33), (33, 47), (0, 47), (45, 47)]:
        lo, hi = max(0, a - ctx), min(T, b + ctx)
        got = model.postnet(mel[:, lo:hi])[:, a - lo: b - lo]
        torch.testing.assert_close(got, whole[:, a:b], atol=1e-5, rtol=1e-5)
        padded = torch.cat([mel[:, lo:hi], torch.zeros(1, b + ctx - hi, M)], 1)  # zeros past the end
        torch.testing.assert_close(model.postnet(padded)[:, a - lo: b - lo], whole[:, a:b], atol=1e-5, rtol=1e-5)
    # a batch of left-aligned windows of different lengths
    windows = [(0, 5), (20, 33), (40, 47)]
    spans = [(max(0, a - ctx), min(T, b + ctx)) for a, b in windows]
    width = max(hi - lo for lo, hi in spans)
    batch = torch.zeros(len(windows), width, M)
    for i, (lo, hi) in enumerate(spans):
        batch[i, : hi - lo] = mel[0, lo:hi]
    out = model.postnet(batch)
    for i, ((a, b), (lo, _)) in enumerate(zip(windows, spans)):
        torch.testing.assert_close(out[i, a - lo: b - lo], whole[0, a:b], atol=1e-5, rtol=1e-5)
    # one frame less of context is not enough in the middle of an utterance
    short = model.postnet(mel[:, 20 - ctx + 1: 33 + ctx - 1])[:, ctx - 1: ctx - 1 + 13]
    assert (short - whole[:, 20:33]).abs().max() > 1e-4


# ---------------------------------------------------------------- errors and limits


def test_bad_inputs_raise_typed_errors():
    model = lively_model(n_symbols=12, max_input_len=16)
    ok_ids, ok_len = batch_inputs([5, 3])
    cases = [
        (torch.tensor([[1, 2, 12]]), torch.tensor([3])),  # id out of range
        (torch.tensor([[1, -1, 2]]), torch.tensor([3])),  # negative id
        (torch.zeros(1, 0, dtype=torch.long), torch.tensor([0])),  # empty
        (ok_ids, torch.tensor([5, 0])),  # empty row
        (torch.ones(1, 17, dtype=torch.long), torch.tensor([17])),  # too long
        (ok_ids, torch.tensor([6, 3])),  # length > T
        (ok_ids, torch.tensor([5])),  # wrong number of lengths
        (ok_ids.float(), ok_len),  # not integer ids
        (ok_ids[0], ok_len[:1]),  # not [B, T]
    ]
    for ids, lengths in cases:
        with pytest.raises(Tacotron2InputError):
            model.encode(ids, lengths)
    with pytest.raises(Tacotron2InputError):
        model.encode(ok_ids, ok_len, prosody=torch.zeros_like(ok_ids))  # no prosody table
    state = model.new_state(model.encode(ok_ids, ok_len), torch.tensor([1, 2]))
    for steps in (-1, 2.0, True):
        with pytest.raises(Tacotron2InputError):
            model.decode(state, steps)
    with pytest.raises(Tacotron2InputError):
        model.new_state(model.encode(ok_ids, ok_len), torch.tensor([1]))
    with pytest.raises(Tacotron2InputError):
        model.postnet(torch.zeros(1, 4, 5))
    assert issubclass(Tacotron2InputError, ValueError)


def test_max_steps_caps_and_never_hangs():
    model = lively_model(max_decoder_steps=9)
    with torch.no_grad():
        model.stop_projection.bias.fill_(-1e4)  # the stop rule never fires
    ids, lengths = batch_inputs([6, 3])
    state = model.new_state(model.encode(ids, lengths), torch.tensor([1, 2]))
    first = model.decode(state, 5)
    assert not first.finished.any() and not first.truncated.any()
    with pytest.raises(Tacotron2InputError):
        model.decode(state, 10)  # more than max_decoder_steps in one call
    out = model.decode(state, 9)
    assert out.finished.all() and out.truncated.all() and not out.stop.any()
    assert out.n_steps.tolist() == [4, 4] and state.step.tolist() == [9, 9]
    assert out.frames[:, 4 * model.config.reduction_factor:].abs().max() == 0
    later = model.decode(state, 3)
    assert not later.truncated.any() and later.n_steps.tolist() == [0, 0]
    mel, path = model.synthesize(ids[0, :6], seed=3)
    assert path.shape == (9,) and mel.shape[0] <= 9 * model.config.reduction_factor


def test_empty_pool_rows_and_zero_steps():
    model = lively_model()
    pool = DecoderState.allocate(model.config, capacity=3, max_len=5)
    out = model.decode(pool, 4)  # empty slots are finished: nothing happens, nothing breaks
    assert out.n_steps.tolist() == [0, 0, 0] and out.frames.abs().max() == 0
    assert torch.isfinite(pool.att_h).all()
    ids, lengths = batch_inputs([4])
    state = model.new_state(model.encode(ids, lengths), torch.tensor([0]))
    zero = model.decode(state, 0)
    assert zero.frames.shape == (1, 0, model.config.n_mels) and state.step.tolist() == [0]


# ---------------------------------------------------------------- whole utterance and the paper's variant


def test_synthesize_matches_incremental_path_with_trim():
    model = lively_model()
    ids, lengths = batch_inputs([7])
    mel, path = model.synthesize(ids[0], seed=9)
    state = model.new_state(model.encode(ids, lengths), torch.tensor([9]))
    out = model.decode(state, model.config.max_decoder_steps)
    n = int(out.n_steps[0])
    assert torch.equal(path, out.peak[0, :n])
    before = out.frames[0, : n * model.config.reduction_factor]
    keep = model.trailing_trim_frames(before)
    assert mel.shape == (keep, model.config.n_mels)
    torch.testing.assert_close(mel, model.postnet(before[None])[0, :keep], atol=1e-6, rtol=0)


def test_trailing_trim_drops_only_quiet_tail():
    model = lively_model()
    mel = torch.ones(6, model.config.n_mels)
    mel[2] = 0.0  # quiet frame inside: kept
    mel[4:] = 0.01  # quiet tail (sum|x| = 0.06 < 1): dropped
    assert model.trailing_trim_frames(mel) == 4
    assert model.trailing_trim_frames(torch.zeros(3, model.config.n_mels)) == 0


def test_r1_prosody_variant_runs_and_uses_prosody():
    model = lively_model(reduction_factor=1, n_prosody_symbols=4)
    assert model.stop_projection.out_features == 1 and model.frame_projection.out_features == model.config.n_mels
    assert "prosody_embedding.weight" in model.state_dict()
    ids, lengths = batch_inputs([8, 5])
    prosody = torch.zeros_like(ids)
    prosody[:, 3] = 3
    with pytest.raises(Tacotron2InputError):
        model.encode(ids, lengths)  # prosody is required
    with pytest.raises(Tacotron2InputError):
        model.encode(ids, lengths, prosody=prosody + 4)  # out of range
    enc = model.encode(ids, lengths, prosody=prosody)
    plain = model.encode(ids, lengths, prosody=torch.zeros_like(ids))
    assert not torch.allclose(enc.memory, plain.memory)
    state = model.new_state(enc, torch.tensor([1, 2]))
    out = model.decode(state, 6)
    assert out.frames.shape == (2, 6, model.config.n_mels) and out.stop.shape == (2, 6)
    alone = model.decode(model.new_state(model.encode(ids[1:, :5], lengths[1:], prosody[1:, :5]), torch.tensor([2])), 6)
    torch.testing.assert_close(out.frames[1:], alone.frames, atol=ATOL, rtol=0)
    mel, path = model.synthesize(ids[0], seed=1, prosody=prosody[0])
    assert mel.shape[1] == model.config.n_mels and path.numel() >= 1


def test_encoder_output_is_a_dataclass_with_the_documented_fields():
    assert [f.name for f in dataclasses.fields(EncoderOutput)] == ["memory", "keys", "lengths"]
    names = [f.name for f in dataclasses.fields(DecoderState)]
    assert names == [
        "memory", "keys", "lengths", "last_frame", "context", "attn", "attn_cum", "att_h", "att_c",
        "dec_h", "dec_c", "peak", "step", "finished", "seed",
    ]
