"""Pronunciation lexicon files at scale: validation with line numbers, atomic reload, matching before the rules."""

from __future__ import annotations

import random
import re
import threading
from pathlib import Path

import pytest

from models.frontend import FrontendLexiconError, FrontendOptions, LexiconFileError, LexiconStore, MandarinFrontend
from models.frontend.lexicon_file import MAX_LISTED_ERRORS, load_lexicon_file, parse_lexicon

_CHARS = "朝阳海淀东西南北中华金银河山湖江城新安平福兴隆盛昌泰和丰瑞祥"
_READINGS = dict(zip(_CHARS, (
    "chao2 yang2 hai3 dian4 dong1 xi1 nan2 bei3 zhong1 hua2 jin1 yin2 he2 shan1 hu2 jiang1 cheng2 xin1 an1 "
    "ping2 fu2 xing1 long2 sheng4 chang1 tai4 he2 feng1 rui4 xiang2"
).split(), strict=True))


def _generated(n: int, seed: int = 7) -> dict[str, str]:
    """``n`` distinct branch names (2-4 characters + 支行) with their readings."""
    rng = random.Random(seed)
    out: dict[str, str] = {}
    while len(out) < n:
        stem = "".join(rng.choice(_CHARS) for _ in range(rng.randint(2, 4)))
        out[stem + "支行"] = " ".join(_READINGS[c] for c in stem) + " zhi1 hang2"
    return out


def _write(path: Path, entries: dict[str, str], extra: str = "") -> Path:
    body = "# generated branch lexicon\n" + "".join(f"{g}\t{r}\n" for g, r in entries.items()) + extra
    path.write_text(body, encoding="utf-8")
    return path


def test_5000_entries_load_and_are_applied_before_the_rules(tmp_path: Path) -> None:
    entries = _generated(5000)
    path = _write(tmp_path / "branches.tsv", entries)
    lexicon = load_lexicon_file(path)
    assert len(lexicon) == 5000
    fe = MandarinFrontend(FrontendOptions(lexicon_file=str(path)))
    rng = random.Random(3)
    for grapheme in rng.sample(sorted(entries), 20):
        ex = fe.explain(f"请到{grapheme}办理。")
        got = [c.syllable for c in ex.chars[2:2 + len(grapheme)]]
        assert got == entries[grapheme].split(), grapheme
        assert {c.origin for c in ex.chars[2:2 + len(grapheme)]} == {"lexicon"}


def test_longest_entry_wins_and_per_call_entries_override_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "lex.tsv", {"朝阳": "zhao1 yang2", "朝阳支行": "chao2 yang2 zhi1 hang2"})
    fe = MandarinFrontend(FrontendOptions(lexicon_file=str(path), lexicon={"朝阳": "chao2 yang2"}))
    assert fe.to_ids("朝阳支行").pinyin == ["chao2", "yang2", "zhi1", "hang2"]
    assert fe.to_ids("朝阳").pinyin[:2] == ["chao2", "yang2"]  # inline entry overrides the file's
    assert fe.to_ids("朝阳", lexicon={"朝阳": "zhao1 yang2"}).pinyin[:2] == ["zhao1", "yang2"]


def test_bad_lines_refuse_the_whole_file_and_name_every_line(tmp_path: Path) -> None:
    good = _generated(3000)
    extra = "行长\thang2\n\nok\tou1 kei4\n招商银行\tzhao1 shang1 yin2 hang2 x\n行长\thang2 chang2\n行长\thang2 zhang3\n单\tshan4\textra\n"
    path = _write(tmp_path / "bad.tsv", good, extra)
    with pytest.raises(LexiconFileError) as info:
        load_lexicon_file(path)
    base = 3000 + 1  # the comment line
    lines = [n for n, _ in info.value.problems]
    assert lines == [base + 1, base + 3, base + 4, base + 6, base + 7]
    message = str(info.value)
    assert f"line {base + 1}:" in message and "one syllable per character" in message
    assert "nothing was loaded" in message
    assert "already on line" in str(info.value.problems[3][1])


def test_the_error_message_lists_at_most_a_few_lines_then_counts(tmp_path: Path) -> None:
    with pytest.raises(LexiconFileError) as info:
        parse_lexicon("".join(f"坏{i}\tbad\n" for i in range(50)))
    assert len(info.value.problems) == 50
    assert len(re.findall(r"line \d+:", str(info.value))) == MAX_LISTED_ERRORS
    assert f"and {50 - MAX_LISTED_ERRORS} more bad lines" in str(info.value)


@pytest.mark.parametrize(
    ("content", "match"),
    [(b"\xff\xfe\x00bad", "not UTF-8"), (None, "cannot read")],
)
def test_unreadable_files_are_refused(tmp_path: Path, content: bytes | None, match: str) -> None:
    path = tmp_path / "lex.tsv"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(LexiconFileError, match=match):
        load_lexicon_file(path)


def test_reload_swaps_atomically_and_keeps_the_previous_lexicon_on_a_bad_file(tmp_path: Path) -> None:
    first = _write(tmp_path / "v1.tsv", {"朝阳": "zhao1 yang2"})
    second = _write(tmp_path / "v2.tsv", {"朝阳": "chao2 yang2"})
    bad = _write(tmp_path / "v3.tsv", {}, "朝阳\tchao2\n")
    fe = MandarinFrontend(FrontendOptions(lexicon_file=str(first)))
    assert fe.to_ids("朝阳").pinyin[0] == "zhao1"
    with pytest.raises(FrontendLexiconError, match="line 2"):
        fe.reload_lexicon(str(bad))
    assert fe.to_ids("朝阳").pinyin[0] == "zhao1"
    assert fe.lexicon_store.source == str(first)
    assert fe.reload_lexicon(str(second)) == 1
    assert fe.to_ids("朝阳").pinyin[0] == "chao2"


def test_a_shared_store_serves_readers_during_reloads(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.tsv", {"朝阳": "zhao1 yang2", "海淀": "hai3 dian4"})
    b = _write(tmp_path / "b.tsv", {"朝阳": "chao2 yang2", "海淀": "hai2 dian4"})
    store = LexiconStore()
    store.reload(a)
    fe = MandarinFrontend(lexicon_store=store)
    seen: set[tuple[str, str]] = set()
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(200):
                ex = fe.explain("朝阳海淀")
                seen.add((ex.chars[0].lexical, ex.chars[2].lexical))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(50):
        store.reload(b if i % 2 else a)
    reader.join()
    assert not errors
    assert seen <= {("zhao1", "hai3"), ("chao2", "hai2")}  # never half of one file and half of the other


def test_a_bad_file_at_start_is_a_frontend_error(tmp_path: Path) -> None:
    bad = _write(tmp_path / "bad.tsv", {}, "朝阳\tchao2 yang9\n")
    with pytest.raises(FrontendLexiconError, match="line 2"):
        MandarinFrontend(FrontendOptions(lexicon_file=str(bad)))
