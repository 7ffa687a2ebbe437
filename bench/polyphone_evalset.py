"""The call-center polyphone test set: load its rows and score a frontend's readings on them, per character class."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from models.frontend.explain import Explanation

_CHECK_RE = re.compile(r"^(?P<char>.)(?:=(?P<lexical>[a-zv]+[1-5]))?(?:~(?P<spoken>[a-zv]+[1-5]))?$")
#: Character classes reported separately (everything else is counted under its own character).
SANDHI_CLASS = "sandhi"
#: dev: rules and the domain word list may be tuned on it; heldout, heldout2, heldout3, heldout4: scored, never
#: tuned on (heldout2 was written before the second round of rule changes, heldout3 before the third, heldout4
#: after the third round's rules were committed; docs/frontend.md).
SPLITS = ("dev", "heldout", "heldout2", "heldout3", "heldout4")


class EvalSetError(ValueError):
    """A row of the test set is malformed; the message gives the line number and what to change."""


@dataclass(frozen=True)
class Check:
    """One expected reading: ``char`` at ``position`` in the sentence, before (lexical) and/or after sandhi (spoken)."""

    char: str
    position: int
    lexical: str | None
    spoken: str | None

    @property
    def klass(self) -> str:
        """The class it is scored under: ``sandhi`` for spoken-reading checks, else the character."""
        return SANDHI_CLASS if self.spoken is not None and self.lexical is None else self.char


@dataclass(frozen=True)
class Case:
    """One sentence of the set with its checks."""

    case_id: str
    split: str
    domain: str
    sentence: str
    checks: tuple[Check, ...]
    line: int


@dataclass
class Miss:
    """A check the frontend got wrong."""

    case: Case
    check: Check
    got_lexical: str | None
    got_spoken: str | None
    origin: str


@dataclass
class Score:
    """Counts per class and split, and every miss."""

    total: dict[str, int] = field(default_factory=dict)
    right: dict[str, int] = field(default_factory=dict)
    misses: list[Miss] = field(default_factory=list)

    def add(self, klass: str, ok: bool) -> None:
        self.total[klass] = self.total.get(klass, 0) + 1
        self.right[klass] = self.right.get(klass, 0) + int(ok)

    @property
    def n(self) -> int:
        return sum(self.total.values())

    @property
    def n_right(self) -> int:
        return sum(self.right.values())

    @property
    def accuracy(self) -> float:
        return self.n_right / self.n if self.n else 1.0


def parse_cases(lines: Iterable[str]) -> list[Case]:
    """Rows of the TSV (id, split, domain, sentence, expected, source); raises EvalSetError with line numbers."""
    out: list[Case] = []
    for lineno, raw in enumerate(lines, start=1):
        line = raw.rstrip("\n")
        if not line.strip() or line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) != 6:
            raise EvalSetError(f"line {lineno}: {len(cols)} columns, need 6 (id, split, domain, sentence, expected, source)")
        case_id, split, domain, sentence, expected, _source = cols
        if split not in SPLITS:
            raise EvalSetError(f"line {lineno}: split must be one of {', '.join(SPLITS)}, not {split!r}")
        checks: list[Check] = []
        cursor = 0
        for item in expected.split():
            m = _CHECK_RE.match(item)
            if m is None or (m["lexical"] is None and m["spoken"] is None):
                raise EvalSetError(f"line {lineno}: check {item!r} must look like 行=hang2, 一~yi2 or 尽=jin3~jin2")
            pos = sentence.find(m["char"], cursor)
            if pos < 0:
                raise EvalSetError(f"line {lineno}: no {m['char']!r} left in the sentence after position {cursor}")
            checks.append(Check(m["char"], pos, m["lexical"], m["spoken"]))
            cursor = pos + 1
        if not checks:
            raise EvalSetError(f"line {lineno}: no checks")
        out.append(Case(case_id, split, domain, sentence, tuple(checks), lineno))
    return out


def load_cases(path: Path) -> list[Case]:
    """The cases of a test-set file."""
    return parse_cases(path.read_text(encoding="utf-8").splitlines())


def readings_by_input(explanation: Explanation) -> dict[int, tuple[str | None, str | None, str]]:
    """Input index → (lexical, spoken, origin) for the characters read as themselves."""
    out: dict[int, tuple[str | None, str | None, str]] = {}
    for c in explanation.chars:
        if c.input_char == c.char and c.input_index not in out:
            out[c.input_index] = (c.lexical, c.syllable, c.origin)
    return out


def score(explain: Callable[[str], Explanation], cases: Sequence[Case]) -> Score:
    """Score ``explain`` (e.g. ``MandarinFrontend().explain``) on ``cases``."""
    result = Score()
    for case in cases:
        got = readings_by_input(explain(case.sentence))
        for check in case.checks:
            lexical, spoken, origin = got.get(check.position, (None, None, "missing"))
            ok = (check.lexical is None or check.lexical == lexical) and (check.spoken is None or check.spoken == spoken)
            result.add(check.klass, ok)
            if not ok:
                result.misses.append(Miss(case, check, lexical, spoken, origin))
    return result


def format_misses(misses: Sequence[Miss]) -> str:
    """One line per miss: id, sentence with the character marked, expected and got."""
    lines = []
    for m in misses:
        s = m.case.sentence
        marked = f"{s[:m.check.position]}[{s[m.check.position]}]{s[m.check.position + 1:]}"
        want = "/".join(x for x in (m.check.lexical, m.check.spoken and f"~{m.check.spoken}") if x)
        got = f"{m.got_lexical}/~{m.got_spoken}"
        lines.append(f"{m.case.case_id} line {m.case.line}: {marked}  want {want}  got {got} ({m.origin})")
    return "\n".join(lines)
