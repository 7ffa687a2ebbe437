"""Polyphones chosen from context: the call-center domain word list (data) and context rules over a clause's words.

Order inside the frontend: lexicon (locked, never changed) → domain word list (word-level readings of the
words jieba cuts, see ``domain_words.tsv``) → pypinyin's phrase table for everything else → the context
rules below, which look at the neighbouring characters and jieba's word boundaries:

* 得 as a word of its own (or in a jieba word with no phrase entry) is the modal "must" (dei3) after a pronoun
  (您得先…), at the start of a clause (…的话，得提供…), or after a subject and before a verb, adverb,
  preposition, pronoun or numeral (报销得有发票, 双方得一起到场); it is the complement marker de5 before an
  adjective or idiom ending the predicate (jieba's a/ad/an/z/i/l tags: 写得详细一些, but 得仔细核对 is the
  modal), a degree word, 比/没/怎么样 or a one-character potential complement
  (说得对, 出得比平时晚, 听得懂, 拿得了吗 — whose 了 is liao3). 得到 + a place after a pronoun or at the start of
  a clause is dei3 + dao4 (您得到现场, 得到柜台办理).
* 地 as a word of its own after a two-character word or a repeated 一-phrase is the adverbial particle de5
  (耐心地等待, 一个字一个字地), even where jieba glues it to the next character (一户一户地上门); before 的/不/是,
  at the end of a clause or inside a word it is di4 (户籍地的, 联系地址, 偏远地区).
* 为 as a word of its own is wei4 before a person or 了/何/什么/此 (为您, 为了) and at the start of a clause
  (为保障…, 为这点小事…: the copula needs a subject before it), wei2 otherwise (期限为一年, 以此为准).
* 还 the verb "give back" (huan2) at the end of a clause or before 了/上/完/的/吗 (什么时候还？ 还了吗, 要还的) or
  after 先/按时 (the adverb 还 "still" always comes before these and before a predicate).
* A polyphonic surname before a title (单先生, 解女士, 曾先生) takes its surname reading.
* Verb readings from their company: 长 before 着呢 chang2; 卡 after a noun 卡 qia3 (银行卡卡在…); 量 before 一下 or
  what is measured liang2; 空着 kong4; V不着/V得着 zhao2; 数 in 数一数, 数过, 数两遍 shu3; 调 tiao2 with 把 or after a
  price or rate (把空调调到…, 话费调了), diao4 after a moved thing (档案调…).
* Neighbour rules: 还 before 款/钱/清… or after 归/偿/退… is huan2; 重 before 置/新/复… chong2; 长 after a
  degree word (较长, 太长) chang2; 调 before 得/高/低/整 tiao2.
"""

from __future__ import annotations

import logging
import re
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
    "数": (("面", "一清完错遍了过", "shu3"),),  # 当面数 数一数 数清 数过 (the verb; not 数量 次数)
}
#: Characters whose neighbour rule applies only when read alone (数 inside 次数, 分数 keeps its word reading).
_NEIGHBOUR_ALONE_ONLY = frozenset("数")
#: Things that are fetched or moved (调 diao4: 档案调得慢, 调取): the word before 调 names one of them.
_MOVED_BEFORE_DIAO = ("档案", "记录", "资料", "材料", "监控", "录像", "流水", "凭证", "人事", "工作", "干部", "人员", "岗位")
_NUMERAL_CHARS = frozenset("零一二三四五六七八九十百千万两几半")
#: What directly follows a place-noun 地 (di4: 户籍地的派出所, 开户地不同); an adverbial 地 is followed by a verb.
_AFTER_PLACE_DI = frozenset("的不是")
#: What follows a complement 得 (de5): degree words and adjectives (说得对, 调得太低, 办得很及时).
_COMPLEMENT_NEXT = frozenset("太很非常好对不更真特别正及清快慢多少早晚高低远近挺")
#: Words a complement 得 is followed by that are neither adjectives nor in the set above (用得有点多, 出得比平时晚,
#: 说得这么清楚, 卖得差不多了, 长得像, 说得没错, 解决得怎么样 — a question of degree asks for the complement):
#: a modal 得 is followed by a verb instead (报销得有发票).
_COMPLEMENT_NEXT_WORDS = ("有些", "有点", "这么", "那么", "多么", "差不多", "像", "跟", "比", "没", "怎么样", "怎样", "如何")
#: Stative words that jieba's dictionary tags as verbs but that, after V得, are the complement (安排得周到,
#: 玩得开心, 来得准时, 讲得明白): a modal 得 takes an action verb instead (得扣除, 得经过, 得有).
_STATIVE_AFTER_DE = frozenset(("开心", "满意", "周到", "到位", "飞快", "准时", "舒服", "明白", "放心", "值"))
#: What may follow an adjective that is the complement of V得: the end of the clause, a comparative amount or a
#: particle (写得详细一些, 来得准时吗, 讲得明白了).
_AFTER_COMPLEMENT = ("一些", "一点", "些", "点", "了", "的", "极了", "多", "吗", "呢", "吧", "啊")
#: One-character potential complements after V得 (听得懂, 看得见, 办得完, 拿得动): de5, not the modal.
_POTENTIAL_COMPLEMENTS = frozenset("懂见完起动下上出开过住着透够成清")
#: What directly follows 还 the verb "give back" (还了, 还上, 还完, 要还的, 还吗): the adverb 还 "still, also"
#: always precedes a predicate, never a particle or a bare complement, and never ends a clause.
_AFTER_VERB_HUAN = ("了", "上", "完", "清", "的", "吗", "呢", "吧", "回来", "回去")
#: Manner and order adverbials that come after the adverb 还 (还先…, 还按时…), so a 还 after them is the verb.
_BEFORE_VERB_HUAN = ("先", "按时", "按期")
#: What the verb 量 "measure" (liang2) takes: 量一下, 量体温, 量血压 (the noun 量 liang4 is 流量, 用量).
_MEASURED_AFTER_LIANG = ("一下", "体温", "血压", "身高", "体重", "尺寸")
#: Prices and rates are adjusted (调 tiao2): 话费调了两次, 电价调过 (a moved thing takes diao4, see above).
_ADJUSTED_BEFORE_TIAO = ("费", "价", "率", "息", "温", "度", "额")
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
_PRONOUN_CHARS = frozenset("您你我他她们咱")
#: Words a modal 得 (dei3) is followed by; a complement 得 (de5) is followed by 很/对/好/及时 … instead.
_MODAL_NEXT = (
    "先", "本人", "在", "等", "去", "拍", "请", "上报", "出示", "提供", "重新", "马上", "赶", "交", "补", "带",
    "亲自", "携带", "填", "核", "留", "提前", "准备", "确认", "联系", "考虑",
    "由", "一次", "满足", "经过", "通过", "按", "符合", "缴", "付", "签", "附", "预约", "排队", "登记", "支付", "申请",
)
#: A line of jieba's dict.txt ("word freq tag") whose tag is an adjective's or an idiom's.
_ADJECTIVE_LINE = re.compile(r"^(\S+) \d+ (?:a|ad|an|z|i|l)$", re.MULTILINE)
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
    if c not in _RULE_CHARS:
        return None
    prev_c = clause[i - 1] if i > 0 else ""
    # The word before the character: the previous jieba word, or the start of its own word.
    prev_word = word[:k] if k > 0 else (texts[wi - 1] if wi > 0 else "")
    # The word after it: the rest of its own word, or the next jieba word ("" at the end of the clause).
    next_word = word[k + 1:] if k + 1 < len(word) else (texts[wi + 1] if wi + 1 < len(texts) else "")
    if c in SURNAMES and _starts(clause, i + 1, TITLES) and (not prev_c or prev_c in _BEFORE_NAME):
        return SURNAMES[c]
    if c == "得" and alone:
        return _de(prev_word, next_word, clause, i)
    if word == "得到" and k == 0 and (not prev_c or prev_c in _PRONOUN_CHARS) and _starts(clause, i + 2, _PLACE_AFTER_DEDAO):
        return "dei3"  # 您得到现场; clause-initial 得到柜台办理 ("must go to the counter")
    if c == "地":
        if k == 0 and i + 1 < len(clause) and _reduplicated_yi_before(clause, i):
            return "de5"  # 一户一户地上门, 一个字一个字地念 (jieba's 地上, 地念)
        if alone and 0 < k < len(word) - 1:
            return "di4"  # inside a word (联系地址, 偏远地区) 地 is never the particle
        if alone and (len(prev_word) >= 2 or _reduplicated_yi_before(clause, i)) and i + 1 < len(clause):
            return "di4" if clause[i + 1] in _AFTER_PLACE_DI else "de5"
        return None
    if c == "了" and alone and prev_c == "得" and _potential_liao(clause, i):
        return "liao3"  # 拿得了吗: the potential complement "manage to" (liao3), not the particle
    if c == "还" and alone and (not next_word or next_word in _AFTER_VERB_HUAN or prev_word in _BEFORE_VERB_HUAN):
        return "huan2"  # 得按时还。 还了吗 要还的 先还一部分: the verb "give back"
    if c == "长" and clause.startswith("着呢", i + 1):
        return "chang2"  # X着呢 follows an adjective: 还长着呢 "still a long time"
    if c == "卡" and alone and prev_c == "卡":
        return "qia3"  # 银行卡卡在取款机里: a noun 卡 followed by 卡, the second is the verb "get stuck"
    if c == "量" and alone and _starts(clause, i + 1, _MEASURED_AFTER_LIANG):
        return "liang2"
    if c == "空" and alone and clause[i + 1:i + 2] == "着" and clause[i + 2:i + 3] != "手":
        return "kong4"  # 空着 "leave blank" (the verb kong4; not 空着手 "empty-handed")
    if c == "着" and alone and i >= 2 and prev_c in "不得" and clause[i + 1:i + 2] != "急":
        return "zhao2"  # 睡不着, 用得着: the potential complement zhao2
    if c == "数" and alone and i >= 2 and clause[i - 2:i] == "数一":
        return "shu3"  # the second 数 of 数一数 (V一V)
    if c == "数" and alone and clause[i + 1:i + 2] in _NUMERAL_CHARS and clause[i + 2:i + 3] in "遍次下":
        return "shu3"  # 数两遍 (not 数万元)
    if c == "调" and alone:
        if prev_word.endswith(_MOVED_BEFORE_DIAO):
            return "diao4"
        if clause[i + 1:i + 2] == "到" and any(ch in _NUMERAL_CHARS for ch in clause[i + 2:i + 6]):
            return "tiao2"  # 限额调到两万元, 温度调到二十六度, 调到每日五万元
        if "把" in clause[:i] or prev_word.endswith(_ADJUSTED_BEFORE_TIAO):
            return "tiao2"  # 把空调调到制冷模式, 把位置调一下 (a setting is disposed of); 话费调了两次
    if c == "为" and alone:
        if _starts(clause, i + 1, _PERSON_AFTER_WEI) or (not prev_c and i + 1 < len(clause)):
            return "wei4"  # 为您, 为了; clause-initial 为 (为保障…, 为这点小事…): the copula needs a subject first
        return "wei2"
    rules = NEIGHBOUR_RULES.get(c)
    if rules is not None and (alone or c not in _NEIGHBOUR_ALONE_ONLY):
        next_c = clause[i + 1] if i + 1 < len(clause) else ""
        for prevs, nexts, reading in rules:
            if (prev_c and prev_c in prevs) or (next_c and next_c in nexts):
                return reading
    return None


#: Every character some rule below reads (the others are skipped at once: the rules run on every character).
_RULE_CHARS = frozenset(SURNAMES) | frozenset(NEIGHBOUR_RULES) | frozenset("得地了还长卡量空着数调为")


def _de(prev_word: str, next_word: str, clause: str, i: int) -> str | None:
    """得 read as a word of its own: modal dei3 ("must"), complement marker de5, or None (keep de2/the default).

    A complement 得 follows the verb or adjective it complements and is followed by a degree word, an
    adjective, 比/不 or a one-character potential complement (说得对, 写得详细, 出得比平时晚, 听得懂); the modal
    is followed by a verb, adverb, preposition, pronoun or numeral (您得先…, 报销得有发票, 双方得一起到场).
    """
    if not next_word:
        return None
    if prev_word and (prev_word[-1] in _PRONOUN_CHARS or prev_word in ("就", "还", "都", "也", "必须", "总", "才")):
        return "dei3"
    if _starts(clause, i + 1, _MODAL_NEXT) and prev_word:
        return "dei3"
    if next_word[0] == "到":
        # 得到 "obtain", cut apart by jieba; clause-initial 得到柜台办理 is "must go to the counter"
        return "dei3" if not prev_word and _starts(clause, i + 2, _PLACE_AFTER_DEDAO) else None
    if not prev_word:
        # Clause-initial: a complement needs the verb before it in its clause (…的话，得提供…; 卡片过期了，得换…).
        return None if next_word[0] == "了" else "dei3"
    if next_word[0] == "了":
        return "de5" if _potential_liao(clause, i + 1) else None  # 拿得了吗 (de5 liao3); 得了一等奖 (de2)
    if (
        next_word[0] in _COMPLEMENT_NEXT or next_word.startswith(_COMPLEMENT_NEXT_WORDS)
        or next_word in _POTENTIAL_COMPLEMENTS
        or clause[i + 1:i + 2] == clause[i + 2:i + 3]  # 写得清清楚楚, 装得满满的
    ):
        return "de5"
    if next_word in jieba_adjectives() or next_word in _STATIVE_AFTER_DE:
        # An adjective that ends the predicate is the complement (写得详细一些, 解释得一清二楚); one followed by
        # a verb modifies that verb, after a modal 得 (材料得仔细核对, 得直接去柜台).
        after = clause[i + 1 + len(next_word):]
        return "de5" if not after or after.startswith(_AFTER_COMPLEMENT) else "dei3"
    return "dei3"


def _potential_liao(clause: str, i: int) -> bool:
    """Whether 了 at ``clause[i]`` after 得 ends the potential phrase V得了 (拿得了吗, 办得了): clause end or 吗/吧/呢.

    Not after a pronoun or a modal adverb, where 得了 is "got" or "that will do" (您得了…, 就得了).
    """
    before = clause[i - 2:i - 1]
    return i >= 2 and clause[i + 1:i + 2] in ("", "吗", "吧", "呢") and before not in _PRONOUN_CHARS and before not in "就还都也才"


@lru_cache(maxsize=1)
def jieba_adjectives() -> frozenset[str]:
    """Words jieba's dictionary tags as adjectives (a, ad, an, z) or idioms (i, l): what a complement 得 is followed
    by (写得详细, 说得一清二楚, 弄得乱七八糟).

    Read once from the dictionary file jieba ships (its part-of-speech column); empty when jieba is absent.
    """
    try:
        text = resources.files("jieba").joinpath("dict.txt").read_text(encoding="utf-8")
    except (ModuleNotFoundError, OSError):
        log.warning("jieba's dict.txt not found: the complement-得 rule sees no adjective tags")
        return frozenset()
    return frozenset(_ADJECTIVE_LINE.findall(text))


def _reduplicated_yi_before(clause: str, i: int) -> bool:
    """Whether ``clause[:i]`` ends with a repeated 一-phrase: 一X一X (一单一单地) or 一XY一XY (一个字一个字地)."""
    for n in (2, 3):
        seg = clause[i - n:i]
        if i >= 2 * n and seg[0] == "一" and clause[i - 2 * n:i - n] == seg:
            return True
    return False
