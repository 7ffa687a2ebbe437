"""Regenerates the checked-in Python stubs of voxpool/v1/tts.proto with grpcio-tools: `python -m protos.generate`."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path

PROTO_ROOT = Path(__file__).resolve().parent
PROTO_FILES = ("voxpool/v1/tts.proto",)

log = logging.getLogger(__name__)

# protoc writes `from voxpool.v1 import tts_pb2 as ...` (relative to the -I root); the stubs live in the
# `protos` package, so imports must read `from protos.voxpool.v1 import ...`.
_IMPORT_RE = re.compile(r"^from voxpool\.(\S+) import ", re.MULTILINE)


class GenerationError(RuntimeError):
    """protoc failed or produced unexpected files."""


def generated_names(proto: str) -> list[str]:
    """Paths (relative to the output root) protoc writes for one .proto: _pb2.py, _pb2.pyi, _pb2_grpc.py."""
    stem = proto[: -len(".proto")]
    return [f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py"]


def _fix_imports(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    fixed = _IMPORT_RE.sub(r"from protos.voxpool.\1 import ", text)
    if fixed != text:
        path.write_text(fixed, encoding="utf-8")


def generate(out_root: Path = PROTO_ROOT) -> list[Path]:
    """Run protoc on every proto under protos/ into `out_root` (same relative layout); return the files written."""
    from grpc_tools import protoc  # imported here: only the generator needs grpcio-tools
    import importlib.resources

    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    written: list[Path] = []
    for proto in PROTO_FILES:
        argv = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={out_root}",
            f"--pyi_out={out_root}",
            f"--grpc_python_out={out_root}",
            proto,
        ]
        rc = protoc.main(argv)
        if rc != 0:
            raise GenerationError(f"protoc failed on {proto} (exit {rc})")
        for name in generated_names(proto):
            path = out_root / name
            if not path.is_file():
                raise GenerationError(f"protoc did not write {path}")
            _fix_imports(path)
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """CLI entry: regenerate into protos/ (or --out DIR)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=PROTO_ROOT, help="output root (default: protos/)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for path in generate(args.out):
        log.info("wrote %s", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
