"""Polyphones from context: the call-center test set (whole, in CI) and the rules and domain word list behind it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from bench.polyphone_evalset import EvalSetError, format_misses, load_cases, parse_cases, score
from models.frontend import MandarinFrontend
from models.frontend.polyphones import ORIGIN_RULE, _parse_domain_words, domain_reading, domain_words, jieba_adjectives

CASES_TSV = Path(__file__).parent / "polyphone_cases.tsv"
CASES = load_cases(CASES_TSV)
#: Floors under the measured accuracy (docs/frontend.md, round 3): dev 100 %, held-out 99.34 %, held-out-2 99.56 %,
#: held-out-3 99.74 %; the held-out floors are the issue's target, 98 %.
DEV_FLOOR = 0.995
HELDOUT_FLOOR = 0.98


@pytest.fixture(scope="module")
def fe() -> MandarinFrontend:
    return MandarinFrontend()


def test_set_is_large_and_covers_the_domains_and_characters() -> None:
    assert len(CASES) >= 400
    assert len({c.sentence for c in CASES}) == len(CASES)
    assert len({c.case_id for c in CASES}) == len(CASES)
    domains = Counter(c.domain for c in CASES)
    for d in ("banking", "telecom", "courier", "insurance", "utilities", "government"):
        assert domains[d] >= 50, domains
    chars = Counter(ch.char for c in CASES for ch in c.checks)
    for c in "行长重还得地着了为传调处转发更单降数差空便应少中乐参藏结量种号一不":
        assert chars[c] >= 2, f"{c} is checked only {chars[c]} times"
    splits = Counter(c.split for c in CASES)
    assert splits["heldout"] >= 150 and splits["heldout2"] >= 150 and splits["heldout3"] >= 300 and splits["dev"] >= 250
    assert sum(1 for c in CASES for ch in c.checks if ch.klass == "sandhi") >= 100


@pytest.mark.parametrize(
    ("split", "floor"),
    [("dev", DEV_FLOOR), ("heldout", HELDOUT_FLOOR), ("heldout2", HELDOUT_FLOOR), ("heldout3", HELDOUT_FLOOR)],
)
def test_accuracy_on_the_set(fe: MandarinFrontend, split: str, floor: float) -> None:
    result = score(fe.explain, [c for c in CASES if c.split == split])
    assert result.n > 250
    assert result.accuracy >= floor, (
        f"{split}: {result.n_right}/{result.n} = {result.accuracy:.4f} < {floor}; misses:\n"
        + format_misses(result.misses)
    )


def test_scorer_counts_a_wrong_reading_as_a_miss() -> None:
    cases = parse_cases(["x1\tdev\tbanking\t银行行长\t行=xing2 长=zhang3\tauthored for voxpool"])
    result = score(MandarinFrontend().explain, cases)
    assert (result.n, result.n_right) == (2, 1)
    assert result.misses[0].check.char == "行" and result.misses[0].got_lexical == "hang2"


@pytest.mark.parametrize(
    "line",
    [
        "x\tdev\tbanking\t银行\t行=hang\tauthored",  # no tone
        "x\tdev\tbanking\t银行\t长=zhang3\tauthored",  # character not in the sentence
        "x\ttrain\tbanking\t银行\t行=hang2\tauthored",  # unknown split
        "x\tdev\tbanking\t银行\t行=hang2",  # five columns
    ],
)
def test_malformed_rows_are_refused_with_the_line_number(line: str) -> None:
    with pytest.raises(EvalSetError, match="line 2"):
        parse_cases(["# comment", line])


@pytest.mark.parametrize(  # ``char``: the first occurrence of this text is checked (卡在: the second 卡)
    ("text", "char", "expected"),
    [
        ("您得先开通手机银行。", "得", "dei3"),  # modal after a pronoun
        ("检修人员得先切断电源。", "得", "dei3"),  # modal before 先
        ("您说得对。", "得", "de5"),  # complement
        ("空调请不要调得太低。", "得", "de5"),  # complement before a degree word
        ("个人所得税由单位代扣。", "得", "de2"),  # domain word inside jieba's word
        ("请耐心地等待。", "地", "de5"),  # adverbial particle
        ("我们会尽快地为您处理。", "地", "de5"),  # jieba's 地为 has no phrase entry
        ("您的医保已转到新的参保地。", "地", "di4"),
        ("手续费为五元。", "为", "wei2"),  # copula before a number
        ("期限为一年。", "为", "wei2"),
        ("很高兴为您服务。", "为", "wei4"),
        ("为保障资金安全，请勿转账。", "为", "wei4"),  # clause-initial purpose
        ("请问是单先生吗？", "单", "shan4"),  # surname before a title
        ("您的账单已经寄出。", "单", "dan1"),
        ("解女士您好。", "解", "xie4"),
        ("通话时长按分钟计算。", "长", "chang2"),  # domain word 时长
        ("这个月的通话时间较长。", "长", "chang2"),  # after a degree word
        ("本月用电量增长了。", "长", "zhang3"),
        ("感谢您对我行的支持。", "行", "hang2"),  # domain word 我行
        ("利率将于下月上调。", "调", "tiao2"),  # domain word 上调 (pypinyin says diao4)
        ("户籍迁移需要调档函。", "调", "diao4"),
        ("分期手续费得一次性付清。", "得", "dei3"),  # modal after a noun
        ("这份保单得由投保人本人签字。", "得", "dei3"),
        ("这个月的流量用得比较多。", "得", "de5"),  # complement after a verb
        ("请到户籍地的派出所补办。", "地", "di4"),  # place noun before 的
        ("开户地不同，手续费也不同。", "地", "di4"),  # domain word
        ("快递员会一件一件地派送。", "地", "de5"),  # adverbial after 一X一X
        ("请您当面数一数钞票。", "数", "shu3"),  # the verb
        ("柜员会把现金数两遍。", "数", "shu3"),
        ("请输入您的交易次数。", "数", "shu4"),
        ("请把转账限额调到两万元。", "调", "tiao2"),  # adjusted to an amount
        ("您的档案调得比较慢。", "调", "diao4"),  # a fetched thing before 调
        ("请把手机音量调大一些。", "调", "tiao2"),
        ("存期越长，利率越高。", "长", "chang2"),
        ("请确认转入行的名称。", "行", "hang2"),
        # Round 3. Modal 得 at the start of a clause: a complement 得 needs its verb before it in the clause.
        ("密码忘了的话，得带身份证来。", "得", "dei3"),
        ("材料不全，得了奖也不能领。", "得", None),  # 得了 "got" is not the modal: left to the dictionary
        ("如需修改，得到柜台办理。", "得", "dei3"),  # clause-initial 得到 + a place: "must go to"
        # Modal 得 after a subject and before a verb, adverb, pronoun or numeral; the complement 得 is followed
        # by an adjective (jieba's a/ad tags), a degree word, 比/没/怎么样 or a one-character potential complement.
        ("报销得有发票原件。", "得", "dei3"),
        ("这台机器得定期保养。", "得", "dei3"),
        ("这件事还真得您本人来。", "得", "dei3"),
        ("请把地址写得详细一些。", "得", "de5"),  # adjective (详细: ad)
        ("工作人员解释得一清二楚。", "得", "de5"),  # an idiom describes the result (一清二楚: l)
        ("这次服务安排得周到吗？", "得", "de5"),  # a stative word jieba tags as a verb
        ("这些材料得仔细核对。", "得", "dei3"),  # an adjective before a verb modifies it: modal 得
        ("账单出得比平时晚。", "得", "de5"),  # comparative 比
        ("您说得没错。", "得", "de5"),
        ("问题解决得怎么样？", "得", "de5"),  # a question of degree asks for the complement
        ("这么多您拿得了吗？", "得", "de5"),  # V得了: potential complement
        ("这么多您拿得了吗？", "了", "liao3"),  # …and its 了 is liao3 "manage to", not the particle
        # 还 the verb "give back": the adverb 还 precedes a predicate, never ends a clause or takes 了/上/完/的.
        ("这笔钱什么时候还？", "还", "huan2"),
        ("欠款已经全部还完了。", "还", "huan2"),
        ("借的钱总是要还的。", "还", "huan2"),
        ("这笔钱您先还一部分。", "还", "huan2"),  # after 先 (the adverb 还 would come before 先)
        ("您还可以在网上办理。", "还", "hai2"),
        # 地 inside a jieba word is never the particle; after a repeated 一-phrase it is, even glued to the next word.
        ("请填写您的联系地址。", "地", "di4"),
        ("偏远地区的包裹会晚到。", "地", "di4"),
        ("请把号码一个字一个字地念给我。", "地", "de5"),
        ("检修人员会一户一户地上门排查。", "地", "de5"),
        # Clause-initial 为 is never the copula (the copula needs a subject before it).
        ("为这点小事打扰您了。", "为", "wei4"),
        # Verb readings after their typical company.
        ("请长按电源键。", "长", "chang2"),  # domain word 长按
        ("有效期还长着呢。", "长", "chang2"),  # X着呢 follows an adjective
        ("您的银行卡卡在机器里了。", "卡在", "qia3"),  # a noun 卡 then 卡: the second is the verb "get stuck"
        ("请先量一下体温。", "量", "liang2"),  # the verb "measure" before 一下 or what is measured
        ("这一栏空着就行。", "空", "kong4"),  # 空着 "leave blank"
        ("晚上睡不着可以打热线。", "着", "zhao2"),  # V不着: the potential complement
        ("您可以数一数单据。", "数单", "shu3"),  # the second 数 of V一V
        ("您数过现金了吗？", "数", "shu3"),  # 数 + experiential 过 is the verb
        ("请把空调调到制冷模式。", "调到", "tiao2"),  # 把 + a setting: adjust
        ("这个月的话费调了两次。", "调", "tiao2"),  # prices and rates are adjusted
        ("您的客户经理已经调到其他网点了。", "调", "diao4"),  # no 把, no price: the transfer reading stays
        ("可以更改为按月缴纳。", "更", "geng1"),  # domain word 更改为 (jieba cut 更|改为)
        ("您的献血记录可以查询。", "血", "xue4"),  # domain word 献血 (pypinyin: xie3)
    ],
)
def test_context_readings(fe: MandarinFrontend, text: str, char: str, expected: str | None) -> None:
    index = text.index(char)
    entry = next(c for c in fe.explain(text).chars if c.input_index == index)
    if expected is None:  # no rule may claim it
        assert entry.origin != ORIGIN_RULE, (text, entry)
    else:
        assert entry.lexical == expected, (text, entry)


def test_adjective_tags_come_from_jiebas_dictionary() -> None:
    adjectives = jieba_adjectives()
    assert {"详细", "清楚", "严重", "一清二楚", "乱七八糟"} <= adjectives
    assert not {"满足", "提供", "先", "您"} & adjectives  # verbs, adverbs and pronouns follow a modal 得


def test_domain_word_list_is_valid_and_used_inside_longer_words() -> None:
    table = domain_words()
    assert len(table) >= 50
    assert table["我行"] == ("wo3", "hang2")
    readings, whole = domain_reading("个人所得")
    assert not whole and readings[2:] == ("suo3", "de2")


@pytest.mark.parametrize(
    ("text", "match"),
    [("行\thang2 zhang3\n", "line 1: 2 syllables"), ("# c\n\n行长\thang2 zhangg3\n", "line 3")],
)
def test_domain_word_list_errors_name_the_line(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        _parse_domain_words(text, "domain_words.tsv")
