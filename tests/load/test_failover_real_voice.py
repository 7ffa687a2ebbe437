"""Pod-kill drill with the real voice (load lane): two `voxpool serve` processes with baker-zh behind the client
library's round robin, calls of two turns each, `kill -9` of the process serving some of them 3 s into their first
turn. No turn is lost (every call ends with both turns done, every word of both spoken), and by the voice's own
word timings (Converse's words events, asked for by the application) at most one word is heard twice: the one
the kill cut, heard in part before the seam and whole after it. The drill itself: tests/reliability/
test_failover_drill.py; the gap bound: tests/load/test_failover_gap.py."""

from __future__ import annotations

import pytest

from clients.client import Audio, Failover, TurnDone, Words
from tests.reliability.test_failover_drill import Call, run_drill

pytestmark = pytest.mark.slow

TURNS = ("您好，这里是客户服务中心。您的业务正在办理中，请不要挂机。我们马上为您转接人工服务，感谢您的耐心等待。",
         "如需查询账户余额，请按一；如需人工服务，请按零。")
CALLS_ON_VICTIM = 2
SPEECH_FRAMES_BEFORE_KILL = 150  # 3 s of the first turn heard
MAX_REPEATED_WORDS = 1


def hanzi(text: str) -> set[int]:
    return {i for i, ch in enumerate(text) if "\u4e00" <= ch <= "\u9fff"}


def turn_words(events: list, turn_id: str) -> list:
    return [w for e in events if isinstance(e, Words) and e.turn_id == turn_id for w in e.words]


def check_turns_done(call: Call) -> None:
    """Both turns done, in order, the last event of the call; every word of each turn spoken at least once."""
    assert call.error is None, repr(call.error)
    done = [e for e in call.events if isinstance(e, TurnDone)]
    assert [d.turn_id for d in done] == ["t1", "t2"] and call.events[-1] is done[-1]
    for i, text in enumerate(TURNS):
        words = turn_words(call.events, f"t{i + 1}")
        assert all(text[w.start_char:w.end_char] == w.text for w in words)
        assert hanzi(text) <= {c for w in words for c in range(w.start_char, w.end_char)}, f"t{i + 1}: a word lost"


def repeated_words(call: Call) -> tuple[Failover, list, list]:
    """(the first turn's Failover, words heard whole before it, words heard twice), from the word timings: a word
    was heard whole when all its audio arrived before the seam, in part when only its start did."""
    at = next(i for i, e in enumerate(call.events) if isinstance(e, Failover) and e.turn_id == "t1")
    fo = call.events[at]
    before, after = call.events[:at], call.events[at:]
    speech = [e for e in before if isinstance(e, Audio) and not e.silence and e.turn_id == "t1"]
    heard_until_ms = speech[-1].pts_ms + speech[-1].duration_ms
    old = turn_words(before, "t1")
    new = turn_words(after, "t1")
    whole = [w for w in old if w.end_pts_ms <= heard_until_ms]
    partly = [w for w in old if w.start_pts_ms < heard_until_ms < w.end_pts_ms]
    twice = [w for w in new if any(h.start_char < w.end_char and w.start_char < h.end_char for h in whole + partly)]
    return fo, whole, twice


async def test_real_voice_kill_9_loses_no_turn_and_repeats_at_most_one_word(baker_voice_folder, tmp_path):
    on_victim, others, victim_pid, _ = await run_drill(baker_voice_folder, tmp_path, turns=TURNS,
                                                       calls_on_victim=CALLS_ON_VICTIM,
                                                       frames_before_stop=SPEECH_FRAMES_BEFORE_KILL)
    for call in on_victim + others:
        check_turns_done(call)
    rows = []
    for call in on_victim:
        fo, whole, twice = repeated_words(call)
        assert fo.heard_text + fo.resent_text == TURNS[0]
        assert fo.heard_text == TURNS[0][:max((w.end_char for w in whole), default=0)], "heard = the words heard"
        rows.append((fo.gap_ms, fo.attempts, len(fo.heard_text), len(fo.resent_text), [w.text for w in twice]))
        second = [e for e in call.events if isinstance(e, Failover) and e.turn_id == "t2"]
        assert all(r.heard_text == "" and r.resent_text == TURNS[1] for r in second)  # queued: sent again whole
    for gap_ms, attempts, heard, resent, twice in rows:
        print(f"real-voice failover: gap {gap_ms} ms, {attempts} attempt(s), {heard} chars heard + {resent} resent, "
              f"heard twice: {twice}")
    assert all(len(r[4]) <= MAX_REPEATED_WORDS for r in rows), rows
