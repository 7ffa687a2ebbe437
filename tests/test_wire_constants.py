"""Each wire constant (sample rates, frame-length rule, speaking-rate range, maximum lead) is defined once, in
protos/voxpool/v1/wire.py: no product file holds its own copy, and the proto's comments list the same values."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from protos.voxpool.v1 import wire

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("protos", "service", "engine", "models", "clients", "voxpool_cli", "bench")
DEFINITION = REPO / "protos" / "voxpool" / "v1" / "wire.py"
# the engine's own limit on speaking rates (what its time-scaling applies); the wire's range must lie inside it
ENGINE_RATE_RANGE = REPO / "models" / "time_scale_frames.py"

# text that spells a copy of a constant, in code, strings or comments
STRAY_TEXT = {
    "a list of sample rates": re.compile(r"\b8000\b[^\n]{0,24}\b(?:11025|16000)\b|\b8, 16 or 24 kHz"),
    "the speaking-rate range": re.compile(r"\b0\.5\s*,\s*2\.0\b|<=\s*2\.0\b"),
    "the maximum lead": re.compile(r"(?i)lead_ms\w*\s*(?:>|<=|=)\s*500\b|\b0\s*(?:-|\.\.)\s*500\b"),
    "the frame-length rule": re.compile(r"frame_ms\s*%\s*10\b|\b10\s*<=\s*[\w.]*frame_ms\s*<=\s*60\b"),
}


def _product_files() -> list[Path]:
    out = []
    for pkg in PRODUCT:
        for path in sorted((REPO / pkg).rglob("*.py")) if (REPO / pkg).is_dir() else ():
            if path != DEFINITION and not path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                out.append(path)
    return out


FILES = _product_files()


def _rate_sets(path: Path, root: Path = REPO) -> list[str]:
    """Tuple, list and set literals holding two or more of the offered rates (a copy of the rate set)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            rates = [e.value for e in node.elts if isinstance(e, ast.Constant) and type(e.value) is int
                     and e.value in wire.SAMPLE_RATES_HZ]
            if len(rates) >= 2:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {rates}")
    return found


def test_no_product_file_holds_its_own_rate_set():
    stray = [hit for path in FILES for hit in _rate_sets(path)]
    assert not stray, "read protos.voxpool.v1.wire.SAMPLE_RATES_HZ instead:\n" + "\n".join(stray)


@pytest.mark.parametrize("what", sorted(STRAY_TEXT))
def test_no_product_file_spells_a_wire_constant(what):
    pattern = STRAY_TEXT[what]
    stray = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in FILES if path != ENGINE_RATE_RANGE
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)
    ]
    assert not stray, f"{what} is defined in protos/voxpool/v1/wire.py; read it from there:\n" + "\n".join(stray)


def test_the_checker_finds_copies(tmp_path):
    """The patterns above match the copies they exist to catch (so an empty result means something)."""
    assert STRAY_TEXT["a list of sample rates"].search('raise X("use 8000, 16000 or 24000")')
    assert STRAY_TEXT["the speaking-rate range"].search("SPEAKING_RATE_RANGE = (0.5, 2.0)")
    assert STRAY_TEXT["the maximum lead"].search("    if lead_ms > 500:")
    assert STRAY_TEXT["the maximum lead"].search("MAX_LEAD_MS = 500")
    assert STRAY_TEXT["the speaking-rate range"].search("RATE_MIN, RATE_MAX = 0.5, 2.0")
    assert STRAY_TEXT["the frame-length rule"].search("if not 10 <= frame_ms <= 60 or frame_ms % 10:")
    probe = tmp_path / "probe.py"
    probe.write_text("RATES = (8000, 16000, 24000)\nchoices = [8000, 44100]\nONE = 24000\n", encoding="utf-8")
    assert [hit.split(": ", 1)[1] for hit in _rate_sets(probe, tmp_path)] == ["[8000, 16000, 24000]", "[8000, 44100]"]


def test_the_proto_lists_the_offered_rates_and_frame_lengths():
    proto = (REPO / "protos" / "voxpool" / "v1" / "tts.proto").read_text(encoding="utf-8")
    listed = re.search(r"//\s*(8000(?:, \d+)*,? or \d+); default 8000", proto)
    assert listed, "tts.proto's AudioFormat.sample_rate_hz comment should list the offered rates"
    assert tuple(int(r) for r in re.findall(r"\d+", listed.group(1))) == wire.SAMPLE_RATES_HZ
    assert "11025 Hz takes 40 only" in proto and wire.frame_ms_choices(11025) == (40,)
    assert f"0-{wire.MAX_LEAD_MS}" in proto
    assert "{}-{},".format(*wire.SPEAKING_RATE_RANGE) in proto  # SessionConfig.speaking_rate: "0.5-2.0,"


def test_the_wire_speaking_rates_are_ones_the_engine_applies():
    from models.time_scale_frames import RATE_RANGE

    lo, hi = wire.SPEAKING_RATE_RANGE
    assert RATE_RANGE[0] <= lo < 1.0 < hi <= RATE_RANGE[1]
