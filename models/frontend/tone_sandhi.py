"""Mandarin tone sandhi on pinyin words: 一 and 不 over a clause, third-tone sandhi within prosodic words.

Rules (the order matters: 一, then 不, then 3-3):

* 一 (yi): left alone in locked (lexicon) and digit-string words and when read 幺 (yao1). Read yi1 when
  counted or named: after 第, a numeral or a numeral's 点 (十一, 一百一, 零点一; not 清点一下), before a numeral or 点+numeral (一二三,
  一点五), after 按/拨/选 or as a word of its own after 回复/输入/选择… (请按一, 回复一可以, 回复一来确认; not before a measure word: 选择一种), before 月/号
  (一月, 一号), at the end of a word of two or more characters (统一, 唯一) or of the clause.
  Neutral (yi5) between a repeated character (看一看), but not in 一X一X (一件一件 yi2 jian4 yi2 jian4). Otherwise yi2 before
  a 4th (or neutral) tone and yi4 before tones 1, 2 and 3 (一样 yi2, 一天 yi4).
* 不 (bu): bu5 when pypinyin's phrase reading is already neutral (差不多) or between a repeated character
  (好不好, 是不是); bu2 before a 4th tone (不是, 不对); bu4 otherwise.
* 3-3: inside a prosodic word, a 3rd tone before a 3rd tone becomes 2nd, applied cyclically on the word
  structure, innermost constituent first: each lexical word of three or more syllables is split at its
  longest dictionary prefix (展览|馆 → zhan2 lan2 guan3) or else its longest dictionary suffix (纸|老虎 →
  zhi3 lao2 hu3); the lexical words of a prosodic word are then joined right to left (我|很好 → wo3 hen2
  hao3, 我也|很好 → wo2 ye3 hen2 hao3). Digit strings keep their citation tones (each digit is read as a
  unit), and nothing crosses a prosodic-word boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .g2p import Word

NUMERAL_CHARS = frozenset("零〇一二三四五六七八九十百千万亿两幺")
_DIGIT_NEXT = frozenset("零〇一二三四五六七八九十两幺")
_YI_NUMBER_AFTER = frozenset("按拨选")
#: Words after which a standalone 一 names the digit (回复一 "reply 1").
NUMBER_VERBS = frozenset({"按", "请按", "拨", "拨打", "选", "选择", "回复", "输入", "键入", "发送", "编辑", "请选择"})
_YI_DATE_NEXT = frozenset("月号")
#: Measure words and the like after 一 that make it the numeral "one" in a phrase (选择一种), not a digit.
MEASURES_AFTER_YI = frozenset("个种下次位项张份条遍件名家笔批些点样起般共直定致天年周块元分秒句声步段台部本套间会")

IsWord = Callable[[str], bool]


def tone_of(syllable: str) -> int:
    """The tone digit of a TONE3 syllable (5 = neutral)."""
    return int(syllable[-1])


def with_tone(syllable: str, tone: int) -> str:
    """The syllable with its tone digit replaced."""
    return f"{syllable[:-1]}{tone}"


def _flatten(words: Sequence[Word]) -> list[tuple[int, int, str]]:
    """(word index, syllable index, first character) of every syllable of a clause, in order."""
    out = []
    for wi, w in enumerate(words):
        for si, src in enumerate(w.sources):
            out.append((wi, si, w.text[src[0] - w.start]))
    return out


def yi_bu_sandhi(words: Sequence[Word]) -> None:
    """Apply the 一 and 不 rules in place over one clause (consecutive words with no pause between)."""
    flat = _flatten(words)
    n = len(flat)

    def char(i: int) -> str:
        return flat[i][2] if 0 <= i < n else ""

    def syl(i: int) -> str:
        wi, si, _ = flat[i]
        return words[wi].pinyin[si]

    def settable(i: int, base: str) -> bool:
        w = words[flat[i][0]]
        return not (w.locked or w.digits) and syl(i)[:-1] == base

    for i in range(n):
        if char(i) != "一" or not settable(i, "yi"):
            continue
        wi, si, _ = flat[i]
        w = words[wi]
        prev_c, next_c = char(i - 1), char(i + 1)
        in_one_x_one_x = (char(i + 2) == "一" and char(i + 3) == next_c) or (char(i - 2) == "一" and prev_c == next_c)
        if in_one_x_one_x and next_c not in NUMERAL_CHARS and i + 1 < n:
            nxt_tone = tone_of(syl(i + 1))
            tone = 2 if nxt_tone in (4, 5) else 4  # 一单一单, 一步一步: each 一 by the tone after it
        elif prev_c and prev_c == next_c and prev_c not in NUMERAL_CHARS:
            tone = 5  # 看一看 (not the second 一 of 一件一件)
        elif (
            prev_c == "第" or prev_c in NUMERAL_CHARS or prev_c in _YI_NUMBER_AFTER
            or (prev_c == "点" and char(i - 2) in NUMERAL_CHARS)  # 零点一 (not 清点一下)
        ):
            tone = 1
        elif (
            si == 0 and wi > 0 and words[wi - 1].text in NUMBER_VERBS and words[wi - 1].end == w.start
            and next_c not in MEASURES_AFTER_YI
        ):
            tone = 1
        elif (
            (next_c in _DIGIT_NEXT and next_c != "两")  # 一两天 "a day or two" is a count: yi4 liang3
            or next_c in _YI_DATE_NEXT or (next_c == "点" and char(i + 2) in _DIGIT_NEXT)
            or (prev_c == "月" and next_c == "日")  # 一月一日: the day of a date
        ):
            tone = 1
        elif i + 1 >= n or (si == len(w.pinyin) - 1 and len(w.text) > 1):
            tone = 1
        else:
            nxt = syl(i + 1)
            nxt_tone = 4 if char(i + 1) == "不" else tone_of(nxt)
            tone = 2 if nxt_tone in (4, 5) else 4
        w.pinyin[si] = with_tone(w.pinyin[si], tone)

    for i in range(n):
        if char(i) != "不" or not settable(i, "bu") or tone_of(syl(i)) == 5:
            continue
        wi, si, _ = flat[i]
        prev_c, next_c = char(i - 1), char(i + 1)
        if prev_c and prev_c == next_c:
            tone = 5
        elif i + 1 < n and tone_of(syl(i + 1)) == 4:
            tone = 2
        else:
            tone = 4
        words[wi].pinyin[si] = with_tone(words[wi].pinyin[si], tone)


class _Frozen:
    """Syllables of a locked or digit word inside a constituent tree: never changed, only context."""

    __slots__ = ("leaves",)

    def __init__(self, leaves: list[tuple[int, int]]) -> None:
        self.leaves = leaves


def _word_tree(text: str, leaves: list, is_word: IsWord) -> list | tuple:
    """Binary-ish constituent structure of one lexical word over its syllable leaves."""
    n = len(leaves)
    if n <= 2:
        return list(leaves) if n == 2 else leaves[0]
    for k in range(n - 1, 1, -1):  # longest dictionary prefix
        if is_word(text[:k]):
            return [_word_tree(text[:k], leaves[:k], is_word), _word_tree(text[k:], leaves[k:], is_word)]
    for k in range(1, n - 1):  # longest dictionary suffix
        if is_word(text[k:]):
            return [_word_tree(text[:k], leaves[:k], is_word), _word_tree(text[k:], leaves[k:], is_word)]
    return [leaves[0], _word_tree(text[1:], leaves[1:], is_word)]


def third_tone_sandhi(prosodic_word: Sequence[Word], is_word: IsWord) -> None:
    """Apply 3-3 → 2-3 in place within one prosodic word (a run of lexical words), cyclically on its structure."""
    frozen: set[tuple[int, int]] = set()
    children: list = []
    for wi, w in enumerate(prosodic_word):
        leaves = [(wi, si) for si in range(len(w.pinyin))]
        if not leaves:
            continue
        if w.locked or w.digits:
            frozen.update(leaves)
            children.append(_Frozen(leaves))  # context for its neighbours only
            continue
        if len(leaves) == len(w.text):
            children.append(_word_tree(w.text, leaves, is_word))
        else:  # erhua merged a syllable: no character-level structure, join right to left
            children.append(list(leaves) if len(leaves) > 1 else leaves[0])

    def tone(leaf: tuple[int, int]) -> int:
        return tone_of(prosodic_word[leaf[0]].pinyin[leaf[1]])

    def visit(node) -> list[tuple[int, int]]:
        if isinstance(node, tuple):
            return [node]
        if isinstance(node, _Frozen):
            return list(node.leaves)
        parts = [visit(c) for c in node]
        for b in range(len(parts) - 2, -1, -1):
            left, right = parts[b][-1], parts[b + 1][0]
            if left not in frozen and tone(left) == 3 and tone(right) == 3:
                w = prosodic_word[left[0]]
                w.pinyin[left[1]] = with_tone(w.pinyin[left[1]], 2)
        return [leaf for part in parts for leaf in part]

    if children:
        visit(children)
