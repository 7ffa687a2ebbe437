"""Polyphone benchmark: accuracy per character class on the call-center test set, for the frontend and candidates.

``python -m bench.polyphones [--candidate NAME ...] [--out result.json]``

Candidates: ``frontend`` (what ships), ``pypinyin-dict:large|cedict|zdic`` (the frontend with a larger
pypinyin phrase table loaded from the ``pypinyin-dict`` package), ``g2pm`` (the frontend with g2pM's
neural prediction for every polyphonic character the lexicon, domain list and rules leave alone). The
optional packages are imported only when asked for and are not dependencies of voxpool.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.polyphone_evalset import SANDHI_CLASS, SPLITS, Case, Score, load_cases, score
from models.frontend import g2p
from models.frontend.explain import Explanation
from models.frontend.normalize import normalize
from models.frontend.pipeline import MandarinFrontend
from models.frontend.polyphones import jieba_adjectives

DEFAULT_CASES = Path(__file__).resolve().parents[1] / "tests" / "frontend" / "polyphone_cases.tsv"


def _frontend() -> Callable[[str], Explanation]:
    return MandarinFrontend().explain


def _with_pypinyin_dict(which: str) -> Callable[[str], Explanation]:
    from pypinyin_dict.phrase_pinyin_data import cc_cedict, large_pinyin, zdic_cibs

    {"large": large_pinyin, "cedict": cc_cedict, "zdic": zdic_cibs}[which].load()
    g2p.word_readings.cache_clear()
    return MandarinFrontend().explain


def _with_g2pm() -> Callable[[str], Explanation]:
    from g2pM import G2pM
    from pypinyin.pinyin_dict import pinyin_dict

    model = G2pM()
    predicted: dict[int, str] = {}
    rules = g2p._polyphones

    def polyphones(words):  # the model first, then the frontend's own rules
        for w in words:
            if w.locked or w.digits or len(w.origins) != len(w.pinyin):
                continue
            for k, src in enumerate(w.sources):
                c = w.text[k]
                p = predicted.get(src[0], "")
                if "," in pinyin_dict.get(ord(c), "") and p[-1:].isdigit() and not w.pinyin[k].endswith("5"):
                    p = p.replace("u:", "v")
                    if p != w.pinyin[k]:
                        w.pinyin[k], w.origins[k] = p, "model"
        rules(words)

    g2p._polyphones = polyphones
    fe = MandarinFrontend()

    def explain(text: str) -> Explanation:
        normalized = normalize(text).text
        out = model(normalized, tone=True, char_split=False)
        predicted.clear()
        if len(out) == len(normalized):
            predicted.update(enumerate(out))
        return fe.explain(text)

    return explain


def _build(name: str) -> Callable[[str], Explanation]:
    if name == "frontend":
        return _frontend()
    if name.startswith("pypinyin-dict:"):
        return _with_pypinyin_dict(name.split(":", 1)[1])
    if name == "g2pm":
        return _with_g2pm()
    raise SystemExit(f"unknown candidate {name!r}")


def _row(name: str, split: str, sc: Score, ms: list[float]) -> dict:
    ms = sorted(ms)
    return {
        "candidate": name, "split": split, "checks": sc.n, "right": sc.n_right, "accuracy": sc.accuracy,
        "per_class": {k: [sc.right[k], sc.total[k]] for k in sorted(sc.total)},
        "explain_p50_ms": ms[len(ms) // 2], "explain_p99_ms": ms[min(len(ms) - 1, int(0.99 * len(ms)))],
    }


def run(name: str, cases: list[Case]) -> list[dict]:
    """Accuracy per split and class, and explain() time per sentence (first sight of each sentence)."""
    explain = _build(name)
    explain("预热。")
    jieba_adjectives()  # loaded by MandarinFrontend.warm_up in the service, not on a first sentence
    times: dict[str, list[float]] = {}
    cache: dict[str, Explanation] = {}

    def timed(text: str) -> Explanation:
        if text not in cache:
            t0 = time.perf_counter()
            cache[text] = explain(text)
            times.setdefault(text, []).append((time.perf_counter() - t0) * 1000.0)
        return cache[text]

    rows = []
    for split in SPLITS:
        chosen = [c for c in cases if c.split == split]
        if not chosen:
            continue
        sc = score(timed, chosen)
        rows.append(_row(name, split, sc, [times[c.sentence][0] for c in chosen]))
    return rows


def format_rows(rows: list[dict]) -> str:
    """Accuracy table, then the per-class breakdown of the held-out split."""
    lines = [f"{'candidate':24s} {'split':9s} {'right/checks':>13s} {'accuracy':>9s} {'p50 ms':>7s} {'p99 ms':>7s}"]
    for r in rows:
        lines.append(f"{r['candidate']:24s} {r['split']:9s} {r['right']:>6d}/{r['checks']:<6d} "
                     f"{100 * r['accuracy']:8.2f}% {r['explain_p50_ms']:7.2f} {r['explain_p99_ms']:7.2f}")
    for r in rows:
        classes = " ".join(f"{k}:{v[0]}/{v[1]}" for k, v in r["per_class"].items() if k == SANDHI_CLASS or v[0] != v[1])
        lines.append(f"{r['candidate']} {r['split']} classes with misses: {classes or '-'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=Path, default=DEFAULT_CASES)
    parser.add_argument("--candidate", default="frontend", help="frontend, pypinyin-dict:large|cedict|zdic or g2pm")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    rows = run(args.candidate, load_cases(args.cases))
    sys.stdout.write(format_rows(rows) + "\n")
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2, ensure_ascii=False), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
