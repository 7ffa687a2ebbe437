"""Read tensors and the operator graph of a .tflite flatbuffer without TensorFlow."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tflite
from tflite.BuiltinOperator import BuiltinOperator
from tflite.TensorType import TensorType

_OP_NAMES = {v: k for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
_NP_TYPES = {
    TensorType.FLOAT32: np.float32,
    TensorType.FLOAT16: np.float16,
    TensorType.INT32: np.int32,
    TensorType.INT64: np.int64,
    TensorType.INT8: np.int8,
    TensorType.UINT8: np.uint8,
    TensorType.INT16: np.int16,
    TensorType.BOOL: np.bool_,
}


class TfliteFormatError(ValueError):
    """The file is not the TFLite graph the converter expects."""


@dataclass(frozen=True)
class TfliteOp:
    """One operator of a subgraph: its builtin name and tensor indices."""

    index: int
    name: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


class TfliteFile:
    """A parsed .tflite model; tensors are returned dequantized to float32 where quantized."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._buf = self.path.read_bytes()
        try:
            self._model = tflite.Model.GetRootAsModel(self._buf, 0)
            self.num_subgraphs = self._model.SubgraphsLength()
        except Exception as exc:  # flatbuffers raises assorted errors on garbage
            raise TfliteFormatError(f"{self.path}: not a TFLite flatbuffer ({exc})") from exc
        self._names: dict[int, dict[str, int]] = {}

    def _subgraph(self, subgraph: int):
        if not 0 <= subgraph < self.num_subgraphs:
            raise TfliteFormatError(f"{self.path}: no subgraph {subgraph} (has {self.num_subgraphs})")
        return self._model.Subgraphs(subgraph)

    def tensor_index(self, name: str, subgraph: int = 0) -> int:
        """Index of the tensor called `name` in `subgraph`; TfliteFormatError if absent."""
        if subgraph not in self._names:
            sg = self._subgraph(subgraph)
            self._names[subgraph] = {
                sg.Tensors(i).Name().decode(): i for i in range(sg.TensorsLength())
            }
        try:
            return self._names[subgraph][name]
        except KeyError:
            raise TfliteFormatError(f"{self.path}: tensor {name!r} not in subgraph {subgraph}") from None

    def shape(self, index: int, subgraph: int = 0) -> tuple[int, ...]:
        return tuple(int(x) for x in self._subgraph(subgraph).Tensors(index).ShapeAsNumpy())

    def has_data(self, index: int, subgraph: int = 0) -> bool:
        t = self._subgraph(subgraph).Tensors(index)
        return self._model.Buffers(t.Buffer()).DataLength() > 0

    def array(self, index: int, subgraph: int = 0, dequantize: bool = True) -> np.ndarray:
        """The constant data of tensor `index`; int8 weights become int8 × scale (per-tensor, zero point 0)."""
        t = self._subgraph(subgraph).Tensors(index)
        buf = self._model.Buffers(t.Buffer())
        if buf.DataLength() == 0:
            raise TfliteFormatError(f"{self.path}: tensor {t.Name().decode()!r} holds no constant data")
        dtype = _NP_TYPES.get(t.Type())
        if dtype is None:
            raise TfliteFormatError(f"{self.path}: tensor {t.Name().decode()!r} has unsupported type {t.Type()}")
        shape = [int(x) for x in t.ShapeAsNumpy()] if t.ShapeLength() else []
        data = np.frombuffer(buf.DataAsNumpy().tobytes(), dtype=dtype).reshape(shape)
        q = t.Quantization()
        if dequantize and q is not None and q.ScaleLength() > 0 and dtype in (np.int8, np.uint8, np.int16):
            scale = q.ScaleAsNumpy().astype(np.float64)
            zero = q.ZeroPointAsNumpy().astype(np.float64) if q.ZeroPointLength() else np.zeros_like(scale)
            if scale.size != 1:
                raise TfliteFormatError(f"{self.path}: per-channel quantization is not supported")
            return ((data.astype(np.float64) - zero[0]) * scale[0]).astype(np.float32)
        return data.astype(np.float32) if dtype == np.float32 else data.copy()

    def named(self, name: str, subgraph: int = 0) -> np.ndarray:
        """Dequantized data of the tensor called `name`."""
        return self.array(self.tensor_index(name, subgraph), subgraph)

    def operators(self, subgraph: int = 0) -> list[TfliteOp]:
        """All operators of `subgraph` in execution order."""
        sg = self._subgraph(subgraph)
        ops = []
        for i in range(sg.OperatorsLength()):
            op = sg.Operators(i)
            oc = self._model.OperatorCodes(op.OpcodeIndex())
            code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
            name = _OP_NAMES.get(code, f"OP_{code}")
            if name == "CUSTOM":
                name = "CUSTOM:" + (oc.CustomCode() or b"").decode()
            ops.append(
                TfliteOp(
                    index=i,
                    name=name,
                    inputs=tuple(int(x) for x in op.InputsAsNumpy()) if op.InputsLength() else (),
                    outputs=tuple(int(x) for x in op.OutputsAsNumpy()) if op.OutputsLength() else (),
                )
            )
        return ops
