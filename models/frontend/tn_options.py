"""Normalization options and errors: a leaf module the normalizer's rule modules import (no cycle through normalize)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from models.frontend.tn_tables import HANZI_CHAR_RE


class NormalizationError(ValueError):
    """Input the normalizer cannot handle: overlapping or out-of-range spans, unknown span kinds, bad options."""


@dataclass(frozen=True)
class NormalizeOptions:
    """Deployment choices for readings.

    one_as_yao: digit-by-digit readings (phones, codes, card numbers) say 1 as 幺; False says 一.
    letter_x: reading of the final X of an ID card (叉, or e.g. 艾克斯).
    amount_style: "yuan_jiao_fen" (￥13.5 → 十三元五角) or "dian" (十三点五元).
    half_hour: read H:30 as H点半 instead of H点三十分.
    two_as_liang: 2 before measure words and 百/千/万/亿 reads 两 (两个人, 两千块); False keeps 二.
    data_units_spelled: GB/MB/KB/TB are spelled (吉比) instead of read as 吉字节/兆字节/千字节/太字节.
    read_country_code: read the +86 of a phone number (加八六); False drops it.
    code_group_size: pause (、) every N characters of a verification code; 0 reads it without pauses.
    extra_words: deployment lexicon for Latin words, (word, Hanzi reading) pairs matched case-insensitively,
        e.g. (("voxpool", "沃克斯普尔"),); a mapping is accepted and stored as sorted pairs.
    """

    one_as_yao: bool = True
    letter_x: str = "叉"
    amount_style: str = "yuan_jiao_fen"
    half_hour: bool = False
    two_as_liang: bool = True
    data_units_spelled: bool = False
    read_country_code: bool = True
    code_group_size: int = 0
    extra_words: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.amount_style not in ("yuan_jiao_fen", "dian"):
            raise NormalizationError(f"amount_style must be 'yuan_jiao_fen' or 'dian', not {self.amount_style!r}")
        if not _is_hanzi_text(self.letter_x):
            raise NormalizationError(f"letter_x must be Hanzi, not {self.letter_x!r}")
        if not isinstance(self.code_group_size, int) or self.code_group_size < 0:
            raise NormalizationError(f"code_group_size must be an int >= 0, not {self.code_group_size!r}")
        words = self.extra_words
        if isinstance(words, Mapping):
            words = tuple(sorted(words.items()))
        try:
            pairs = tuple((str(k), str(v)) for k, v in words)
        except (TypeError, ValueError) as exc:
            raise NormalizationError("extra_words must be (word, reading) pairs") from exc
        for word, reading in pairs:
            if not re.fullmatch(r"[A-Za-z]+(?:[-'][A-Za-z]+)*", word) or not _is_hanzi_text(reading):
                raise NormalizationError(f"extra_words entry {word!r} → {reading!r}: need Latin word → Hanzi reading")
        object.__setattr__(self, "extra_words", pairs)


def _is_hanzi_text(text: object) -> bool:
    return isinstance(text, str) and bool(text) and all(HANZI_CHAR_RE.match(c) for c in text)
