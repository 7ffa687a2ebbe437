"""Polyphones chosen from context: the call-center domain word list (data) and context rules over a clause's words.

Order inside the frontend: lexicon (locked, never changed) → domain word list (word-level readings of the
words jieba cuts, see ``domain_words.tsv``) → pypinyin's phrase table for everything else → the context
rules below, which look at the neighbouring characters and jieba's word boundaries:

* 得 as a word of its own is the modal "must" (dei3) after a pronoun (您得先…, 我们得…) or before a verb-like
  word that a complement never starts with (先, 本人, 在, 拍照 …); 得到 after a pronoun and before a place is
  dei3 + dao4 (您得到现场). Complement 得 (说得对, 办得很及时) stays neutral.
  A 得 of its own between a verb and a degree word or adjective is the complement marker de5 (调得太低).
* 地 as a word of its own between a two-character word and what follows is the adverbial particle de5
  (耐心地等待); at the end of a clause or inside a word it is di4 (地址, 参保地).
* 为 as a word of its own is wei4 before a person or 了/何/什么/此 (为您, 为了) and at the start of a clause
  before a purpose (为保障…), wei2 otherwise: the copula (期限为一年, 调整为两万元, 以此为准).
* A polyphonic surname before a title (单先生, 解女士, 曾先生) takes its surname reading.
* Neighbour rules: 还 before 款/钱/清… or after 归/偿/退… is huan2; 重 before 置/新/复… chong2; 长 after a
  degree word (较长, 太长) chang2; 调 before 得/高/低/整 tiao2.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import lru_cache
from importlib import resources

from .symbols import PinyinError, parse_tone3

log = logging.getLogger(__name__)

ORIGIN_DOMAIN = "domain word list"
ORIGIN_RULE = "context rule"
DOMAIN_WORDS_FILE = "domain_words.tsv"

#: char → [(previous characters, next characters, reading)], first match wins; "" matches nothing.
NEIGHBOUR_RULES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "还": (("归偿退应待已未欠", "款钱清贷债", "huan2"),),  # 还款 应还 已还 (not 还是 还有)
    "重": (("", "置新复试启设拨播输填", "chong2"),),  # 重置 重新 重复 重试 (not 重要 重量)
    "长": (("较很太更最过挺偏超延加越", "", "chang2"),),  # 较长 太长 延长 越长 (not 增长 行长)
    "调": (("", "得高低成好整节试大小快慢亮暗", "tiao2"),),  # 调得太低 调高 调大 (not 调取 调查)
    "数": (("面", "一清完错遍了", "shu3"),),  # 当面数 数一数 数清 (the verb; not 数量 次数)
}
#: Characters whose neighbour rule applies only when read alone (数 inside 次数, 分数 keeps its word reading).
_NEIGHBOUR_ALONE_ONLY = frozenset("数")
#: Things that are fetched or moved (调 diao4: 档案调得慢, 调取): the word before 调 names one of them.
_MOVED_BEFORE_DIAO = ("档案", "记录", "资料", "材料", "监控", "录像", "流水", "凭证", "人事", "工作", "干部", "人员", "岗位")
_NUMERAL_CHARS = frozenset("零一二三四五六七八九十百千万两几半")
#: Last characters of nouns that can be the subject of a modal 得 (手续费得一次性付清, 保单得由本人签字).
_NOUN_FINAL_BEFORE_DEI = frozenset("费单卡证件款网表金额书照据")
#: What directly follows a place-noun 地 (di4: 户籍地的派出所, 开户地不同); an adverbial 地 is followed by a verb.
_AFTER_PLACE_DI = frozenset("的不是")
#: What follows a complement 得 (de5): degree words and adjectives (说得对, 调得太低, 办得很及时).
_COMPLEMENT_NEXT = frozenset("太很非常好对不更真特别正及清快慢多少早晚高低远近挺有")
#: Surnames read differently from the common word, before a title.
SURNAMES: dict[str, str] = {
    "单": "shan4", "解": "xie4", "曾": "zeng1", "仇": "qiu2", "朴": "piao2", "查": "zha1", "区": "ou1",
    "盖": "ge3", "缪": "miao4", "覃": "qin2", "翟": "zhai2", "乐": "yue4", "种": "chong2", "员": "yun4",
    "尉": "yu4", "繁": "po2", "隗": "wei3", "句": "gou1", "哈": "ha3", "那": "na1",
}
TITLES = ("先生", "女士", "小姐", "老师", "经理", "师傅", "阿姨", "总", "同学", "律师", "医生")
#: Characters before a surname that keep it a name (clause start counts too): 请问是单先生, 尊敬的曾先生.
_BEFORE_NAME = frozenset("是的问好位请叫找给向和与跟对由")
_PERSON_AFTER_WEI = ("您", "你", "我", "他", "她", "它", "大家", "客户", "用户", "人民", "了", "何", "什么", "此", "广大")
#: Purposes after a clause-initial 为 ("in order to", wei4): 为保障…, 为方便…
_PURPOSE_AFTER_WEI = ("保障", "保证", "确保", "保护", "方便", "避免", "防止", "提高", "维护", "满足", "进一步", "更好")
_PRONOUN_CHARS = frozenset("您你我他她们咱")
#: Words a modal 得 (dei3) is followed by; a complement 得 (de5) is followed by 很/对/好/及时 … instead.
_MODAL_NEXT = (
    "先", "本人", "在", "等", "去", "拍", "请", "上报", "出示", "提供", "重新", "马上", "赶", "交", "补", "带",
    "亲自", "携带", "填", "核", "留", "提前", "准备", "确认", "联系", "考虑",
    "由", "一次", "满足", "经过", "通过", "按", "符合", "缴", "付", "签", "附", "预约", "排队", "登记", "支付", "申请",
)
_PLACE_AFTER_DEDAO = ("现场", "柜台", "网点", "营业", "窗口", "派出所", "医院", "银行", "社区", "附近", "指定", "当地")


def _parse_domain_words(text: str, origin: str) -> dict[str, tuple[str, ...]]:
    """word → syllables from the domain TSV; a bad line raises ValueError naming the line."""
    out: dict[str, tuple[str, ...]] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip() or raw.startswith("#"):
            continue
        cols = raw.split("\t")
        word, syllables = cols[0], tuple(cols[1].split()) if len(cols) > 1 else ()
        if len(syllables) != len(word):
            raise ValueError(f"{origin} line {lineno}: {len(syllables)} syllables for the {len(word)} characters of {word!r}")
        for syl in syllables:
            try:
                parse_tone3(syl)
            except PinyinError as exc:
                raise ValueError(f"{origin} line {lineno}: {exc}") from None
        out[word] = syllables
    return out


@lru_cache(maxsize=1)
def domain_words() -> dict[str, tuple[str, ...]]:
    """The packaged call-center domain word list: word → TONE3 syllables (one per character)."""
    text = resources.files(__package__).joinpath(DOMAIN_WORDS_FILE).read_text(encoding="utf-8")
    return _parse_domain_words(text, DOMAIN_WORDS_FILE)


@lru_cache(maxsize=65536)
def domain_reading(word: str) -> tuple[tuple[str | None, ...], bool]:
    """Domain readings for ``word``: per character a syllable or None, and whether the whole word is an entry.

    A word that is not an entry itself takes the readings of the entries inside it (leftmost-longest), so
    jieba's 个人所得 gets 所得's suo3 de2.
    """
    table = domain_words()
    whole = table.get(word)
    if whole is not None:
        return whole, True
    out: list[str | None] = [None] * len(word)
    longest = _longest_entry()
    pos = 0
    while pos < len(word) - 1:
        for size in range(min(longest, len(word) - pos), 1, -1):
            found = table.get(word[pos:pos + size])
            if found is not None:
                out[pos:pos + size] = found
                pos += size
                break
        else:
            pos += 1
    return tuple(out), False


@lru_cache(maxsize=1)
def _longest_entry() -> int:
    return max((len(w) for w in domain_words()), default=0)


def _starts(text: str, pos: int, options: Sequence[str]) -> bool:
    return any(text.startswith(o, pos) for o in options)


def disambiguate(
    texts: Sequence[str], pinyin: list[list[str]], origins: list[list[str]], frozen: Sequence[bool], default: str
) -> None:
    """Apply the context rules in place over one clause.

    ``texts[i]`` is word i of the clause (consecutive, no pause between), ``pinyin[i]``/``origins[i]`` its
    per-character readings and their origins (words whose reading count differs from their length, and
    ``frozen`` ones, are left alone but still give context). A character whose origin is ``default`` (its
    word has no phrase-table entry, e.g. jieba's 期为 or 地为) is treated like a word of its own.
    """
    clause = "".join(texts)
    starts: list[int] = []
    pos = 0
    for t in texts:
        starts.append(pos)
        pos += len(t)
    for wi, word in enumerate(texts):
        if frozen[wi] or len(pinyin[wi]) != len(word):
            continue
        base = starts[wi]
        for k, c in enumerate(word):
            i = base + k
            alone = len(word) == 1 or origins[wi][k] == default
            reading = _rule(c, word, k, wi, texts, clause, i, alone)
            if reading is not None and reading != pinyin[wi][k]:
                pinyin[wi][k] = reading
                origins[wi][k] = ORIGIN_RULE


def _rule(c: str, word: str, k: int, wi: int, texts: Sequence[str], clause: str, i: int, alone: bool) -> str | None:
    """The reading a context rule gives character ``clause[i]`` (``word[k]``), or None.

    ``alone``: the character is a word of its own or its word has no phrase-table reading.
    """
    prev_c = clause[i - 1] if i > 0 else ""
    # The word before the character: the previous jieba word, or the start of its own word.
    prev_word = word[:k] if k > 0 else (texts[wi - 1] if wi > 0 else "")
    if c in SURNAMES and _starts(clause, i + 1, TITLES) and (not prev_c or prev_c in _BEFORE_NAME):
        return SURNAMES[c]
    if c == "得" and alone:
        if prev_word and (prev_word[-1] in _PRONOUN_CHARS or prev_word in ("就", "还", "都", "也", "必须", "总", "才")):
            return "dei3"
        if _starts(clause, i + 1, _MODAL_NEXT) and prev_word:
            return "dei3"
        if prev_word and i + 1 < len(clause) and clause[i + 1] in _COMPLEMENT_NEXT:
            return "de5"
        if len(prev_word) >= 2 and prev_word[-1] in _NOUN_FINAL_BEFORE_DEI and i + 1 < len(clause):
            return "dei3"
        return None
    if word == "得到" and k == 0 and prev_c in _PRONOUN_CHARS and _starts(clause, i + 2, _PLACE_AFTER_DEDAO):
        return "dei3"
    if c == "地" and alone:
        if (len(prev_word) >= 2 or _one_x_one_x(clause, i)) and i + 1 < len(clause):
            return "di4" if clause[i + 1] in _AFTER_PLACE_DI else "de5"
        return None
    if c == "数" and alone and clause[i + 1:i + 2] in _NUMERAL_CHARS and clause[i + 2:i + 3] in "遍次下":
        return "shu3"  # 数两遍 (not 数万元)
    if c == "调" and alone:
        if prev_word.endswith(_MOVED_BEFORE_DIAO):
            return "diao4"
        if clause[i + 1:i + 2] == "到" and any(ch in _NUMERAL_CHARS for ch in clause[i + 2:i + 6]):
            return "tiao2"  # 限额调到两万元, 温度调到二十六度, 调到每日五万元
    if c == "为" and alone:
        if _starts(clause, i + 1, _PERSON_AFTER_WEI) or (not prev_c and _starts(clause, i + 1, _PURPOSE_AFTER_WEI)):
            return "wei4"
        return "wei2"
    rules = NEIGHBOUR_RULES.get(c)
    if rules is not None and (alone or c not in _NEIGHBOUR_ALONE_ONLY):
        next_c = clause[i + 1] if i + 1 < len(clause) else ""
        for prevs, nexts, reading in rules:
            if (prev_c and prev_c in prevs) or (next_c and next_c in nexts):
                return reading
    return None


def _one_x_one_x(clause: str, i: int) -> bool:
    """Whether the four characters before ``clause[i]`` are 一X一X (一单一单地, 一步一步地)."""
    return i >= 4 and clause[i - 4] == clause[i - 2] == "一" and clause[i - 3] == clause[i - 1]
