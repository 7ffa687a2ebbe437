"""Dynamic int8 LSTM cells (fbgemm) for the CPU fast path: int8 weights, inputs quantized per call, fp32 gates."""

from __future__ import annotations

import logging
import warnings
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

log = logging.getLogger(__name__)

_GRID_TOLERANCE = 1e-3  # |w/s − round(w/s)| below this everywhere: the tensor already lies on the int8 grid of s


class Int8Error(ValueError):
    """A model cannot take the int8 path (e.g. it is not on the CPU or not float32)."""


@lru_cache(maxsize=1)
def has_vnni() -> bool:
    """True when the CPU has AVX-512 VNNI or AVX-VNNI (Linux /proc/cpuinfo); False when unknown.

    fbgemm's u8·s8 kernels without VNNI add pairs of products in int16 (vpmaddubsw), which can saturate with
    full 8-bit activations; that is why torch defaults to 7-bit activations ("reduce_range") on x86. With VNNI
    the products accumulate straight into int32, so full 8-bit activations are exact and halve the error.
    """
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


def quantize_weight(weight: torch.Tensor) -> torch.Tensor:
    """Symmetric int8 quantization of a [out, in] float weight for fbgemm.

    Per tensor with scale amax/127 when the weight already lies on that grid (then the int8 copy is exact:
    the Baker voice's weights came out of an int8 TFLite graph), else per output channel with amax_row/127.
    """
    w = weight.detach().float().contiguous()
    amax = float(w.abs().max())
    scale = amax / 127.0 if amax > 0 else 1.0
    q = w / scale
    with warnings.catch_warnings():  # torch 2.13 flags quantized tensors for removal in a later release
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        if float((q - q.round()).abs().max()) < _GRID_TOLERANCE:
            return torch.quantize_per_tensor(w, scale, 0, torch.qint8)
        row_scales = (w.abs().amax(dim=1) / 127.0).clamp_min(torch.finfo(torch.float32).tiny).double()
        zero_points = torch.zeros_like(row_scales, dtype=torch.long)
        return torch.quantize_per_channel(w, row_scales, zero_points, 0, torch.qint8)


class Int8LSTMCell(nn.Module):
    """Inference-only stand-in for a float nn.LSTMCell: gates = q8(x)·W_ih + q8(h)·W_hh + (b_ih + b_hh).

    Weights are int8 (see `quantize_weight`), packed once for fbgemm; x and h are quantized to uint8 per call
    (per tensor, dynamic range), the products accumulate in int32 and everything after the two matrix
    products (bias, sigmoid/tanh, cell update) runs in float32. The gate rows are stored in (i, f, o, g) order
    so one sigmoid and one tanh cover all gates. forward(x [B, in], (h [B, H], c [B, H])) -> (h', c').
    """

    def __init__(self, cell: nn.LSTMCell, reduce_range: bool | None = None):
        super().__init__()
        if not isinstance(cell, nn.LSTMCell):
            raise Int8Error(f"Int8LSTMCell wraps an nn.LSTMCell, not {type(cell).__name__}")
        if cell.weight_ih.device.type != "cpu" or cell.weight_ih.dtype != torch.float32:
            raise Int8Error(
                f"the int8 path needs a float32 CPU LSTMCell, got {cell.weight_ih.dtype} on {cell.weight_ih.device}"
            )
        H = cell.hidden_size
        self.input_size, self.hidden_size = cell.input_size, H
        self.reduce_range = (not has_vnni()) if reduce_range is None else bool(reduce_range)
        order = torch.cat([torch.arange(0, 2 * H), torch.arange(3 * H, 4 * H), torch.arange(2 * H, 3 * H)])
        with torch.no_grad():
            bias = torch.zeros(4 * H)
            if cell.bias:
                bias = (cell.bias_ih + cell.bias_hh).float()
            self._packed_ih = torch.ops.quantized.linear_prepack(
                quantize_weight(cell.weight_ih[order]), bias[order].contiguous()
            )
            self._packed_hh = torch.ops.quantized.linear_prepack(quantize_weight(cell.weight_hh[order]), None)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, reduce_range={self.reduce_range}"

    def forward(self, x: torch.Tensor, hc: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        h, c = hc
        H = self.hidden_size
        gates = torch.ops.quantized.linear_dynamic(x.contiguous(), self._packed_ih, self.reduce_range)
        gates += torch.ops.quantized.linear_dynamic(h.contiguous(), self._packed_hh, self.reduce_range)
        ifo = torch.sigmoid(gates[:, : 3 * H])
        c_new = torch.addcmul(ifo[:, H: 2 * H] * c, ifo[:, :H], torch.tanh(gates[:, 3 * H:]))
        return ifo[:, 2 * H:] * torch.tanh(c_new), c_new


def quantize_lstm_cells(model: nn.Module, reduce_range: bool | None = None) -> nn.Module:
    """Replace every nn.LSTMCell inside `model` (in place) by an Int8LSTMCell; returns the model.

    Linear and convolution layers stay float32: in Tacotron2 the two decoder LSTM cells hold 17.8 M of the
    18.3 M multiply-accumulates of a decoder step; quantizing the small linears too (torch.ao, 7-bit inputs)
    raised the teacher-forced mel error on the Baker voice from 1.7 % to 2.8 % with no measurable speed-up.
    A model that is itself an nn.LSTMCell is returned converted.
    """
    if isinstance(model, nn.LSTMCell):
        return Int8LSTMCell(model, reduce_range).train(False)
    targets = [(name, mod) for name, mod in model.named_modules() if isinstance(mod, nn.LSTMCell)]
    for name, cell in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, Int8LSTMCell(cell, reduce_range).train(False))
    if targets:
        log.info("int8 LSTM cells: %s", ", ".join(name for name, _ in targets))
    return model
