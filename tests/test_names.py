"""Names that say what they hold: no product identifier is a bare `rate`, which in this code base could be a sample
rate (Hz), a speaking rate (× natural) or a token rate (per second). Strings are free to say "rate"."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ("protos", "service", "engine", "models", "clients", "voxpool_cli")
AMBIGUOUS = {"rate"}


def bare_names(source: str, names: set[str] = AMBIGUOUS) -> list[tuple[int, str]]:
    """(line, name) of each identifier token in `names`: variables, attributes, parameters and keywords alike."""
    return [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type == tokenize.NAME and t.string in names]


def test_the_check_finds_a_bare_rate_and_ignores_strings():
    assert bare_names('rate = 8000\nx.rate\nf(rate=1)\ns = "rate"\n# rate\n') == [(1, "rate"), (2, "rate"), (3, "rate")]


def test_no_product_identifier_is_a_bare_rate():
    found = []
    for package in PRODUCT:
        for path in sorted((REPO / package).rglob("*.py")):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            found += [f"{path.relative_to(REPO)}:{line}" for line, _ in bare_names(path.read_text(encoding="utf-8"))]
    assert not found, f"bare `rate` (say sample_rate_hz, speaking_rate or rate_per_s): {found}"
