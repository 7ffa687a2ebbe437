"""Pronunciation lexicons loaded from files (thousands of entries), validated line by line, swapped atomically."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from .g2p import Lexicon, LexiconEntry, LexiconError, validate_entry

log = logging.getLogger(__name__)

#: At most this many bad lines are listed in an error message (the count of the rest follows).
MAX_LISTED_ERRORS = 20
MAX_FILE_BYTES = 64 * 1024 * 1024


class LexiconFileError(LexiconError):
    """A lexicon file was refused; ``problems`` holds (line number, message) for every bad line."""

    def __init__(self, path: str, problems: list[tuple[int, str]]) -> None:
        self.path = path
        self.problems = problems
        listed = "; ".join(f"line {n}: {msg}" for n, msg in problems[:MAX_LISTED_ERRORS])
        more = len(problems) - MAX_LISTED_ERRORS
        suffix = f"; and {more} more bad lines" if more > 0 else ""
        super().__init__(
            f"lexicon file {path} refused ({len(problems)} bad line{'s' if len(problems) != 1 else ''}; nothing "
            f"was loaded): {listed}{suffix}. Each line is: Hanzi grapheme, a tab, tone-numbered pinyin with one "
            "syllable per character (招商银行<TAB>zhao1 shang1 yin2 hang2); # starts a comment"
        )


def parse_lexicon(text: str, origin: str = "<text>") -> Lexicon:
    """Parse lexicon lines (``grapheme<TAB>pinyin``); every bad line is reported, then the whole text is refused."""
    entries: dict[str, LexiconEntry] = {}
    first_line: dict[str, int] = {}
    problems: list[tuple[int, str]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip("\ufeff").rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) != 2:
            problems.append((lineno, f"{len(cols)} tab-separated fields, need 2 (grapheme, pinyin)"))
            continue
        grapheme, reading = cols[0].strip(), cols[1].strip()
        try:
            entry = validate_entry(grapheme, reading)
        except LexiconError as exc:
            problems.append((lineno, str(exc)))
            continue
        seen = first_line.get(grapheme)
        if seen is not None and entries[grapheme].syllables != entry.syllables:
            problems.append((lineno, f"{grapheme!r} is already on line {seen} with another reading; keep one"))
            continue
        first_line.setdefault(grapheme, lineno)
        entries[grapheme] = entry
    if problems:
        raise LexiconFileError(origin, problems)
    return Lexicon.from_entries(entries)


def load_lexicon_file(path: str | Path) -> Lexicon:
    """Read and validate a UTF-8 lexicon file; raises LexiconFileError (with line numbers) if anything is wrong."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise LexiconFileError(str(p), [(0, f"file is {size} bytes; at most {MAX_FILE_BYTES}")])
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        line = p.read_bytes()[: exc.start].count(b"\n") + 1
        raise LexiconFileError(str(p), [(line, "not UTF-8; save the file as UTF-8")]) from None
    except OSError as exc:
        raise LexiconFileError(str(p), [(0, f"cannot read the file: {exc.strerror or exc}")]) from None
    return parse_lexicon(text, str(p))


@dataclass(frozen=True)
class LoadedLexicon:
    """A lexicon and where it came from."""

    lexicon: Lexicon
    source: str


class LexiconStore:
    """The current server lexicon; ``reload`` swaps in a new file only if every line of it is valid.

    Readers call ``current()`` once per text and keep that object, so a swap never mixes two lexicons
    inside one text; a refused file leaves the previous lexicon in place.
    """

    def __init__(self, lexicon: Lexicon | None = None, source: str = "") -> None:
        self._current = LoadedLexicon(lexicon or Lexicon(), source)
        self._lock = threading.Lock()

    def current(self) -> Lexicon:
        """The lexicon in force now."""
        return self._current.lexicon

    @property
    def source(self) -> str:
        """Where the lexicon in force came from ("" when none was loaded)."""
        return self._current.source

    def reload(self, path: str | Path) -> int:
        """Validate ``path`` and make it current; returns its entry count. Raises LexiconFileError, keeping the old one."""
        with self._lock:
            try:
                lexicon = load_lexicon_file(path)
            except LexiconFileError as exc:
                log.warning("lexicon reload refused, keeping %s (%d entries): %s",
                            self._current.source or "the previous lexicon", len(self._current.lexicon), exc)
                raise
            self._current = LoadedLexicon(lexicon, str(path))
            log.info("lexicon %s loaded: %d entries", path, len(lexicon))
            return len(lexicon)
