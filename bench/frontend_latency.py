"""Frontend benchmark: text → ids latency per call-center sentence (p50/p90/p99), a table, JSON, and a p99 check.

``python -m bench.frontend_latency --max-p99-ms 5`` exits 1 when the warm per-sentence p99 is above 5 ms
(the timing check lives here, not in the default tests).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from models.frontend.g2p import word_readings
from models.frontend.normalize import normalize
from models.frontend.pipeline import MandarinFrontend
from models.frontend.prosody import WordSegmenter
from models.frontend.symbols import parse_tone3, split_syllable

#: Used when the shared call-center list is absent.
BUILTIN_SENTENCES: tuple[str, ...] = (
    "您好，欢迎致电客户服务中心，请问有什么可以帮您？",
    "您本月的话费账单已经生成，请在25号之前完成缴费。",
    "为了保障您的账户安全，请不要向任何人透露您的验证码。",
    "您预约的维修服务将于明天上午9点到11点之间上门。",
    "很抱歉，您查询的订单不存在，请核对后重新输入。",
    "您的信用卡本期账单金额为3250元，最后还款日为下月5日。",
    "如需办理挂失，请输入您的身份证号码，以井号键结束。",
    "本次通话可能会被录音，以便我们为您提供更好的服务。",
    "如有疑问请致电13501234567联系您的客户经理。",
    "当前年化利率为3.85%，比上月下降了0.1个百分点。",
)


POLYPHONE_CASES = Path(__file__).resolve().parents[1] / "tests" / "frontend" / "polyphone_cases.tsv"


def load_sentences(path: Path | None) -> list[str]:
    """Sentences from a TSV (id, class, text; # comments), the polyphone test set, or the built-in list."""
    if path is not None and path.suffix == ".tsv" and path.name == POLYPHONE_CASES.name and path.exists():
        from bench.polyphone_evalset import load_cases

        return [c.sentence for c in load_cases(path)]
    if path is not None and path.exists():
        rows = [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]
        found = [r[2].strip() for r in rows if len(r) >= 3 and not r[0].startswith("#") and r[2].strip()]
        if found:
            return found
    return list(BUILTIN_SENTENCES)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _clear_caches() -> None:
    word_readings.cache_clear()
    split_syllable.cache_clear()
    parse_tone3.cache_clear()


def run(sentences: list[str], rounds: int) -> dict:
    """Measure jieba's init, then cold (first sight of each sentence) and warm calls; times in ms.

    Each call is timed twice: wall clock (what a caller waits, including waiting for a core on a busy
    machine) and the CPU time of the calling thread (the work itself). The load average is read before and
    after, since on a shared machine the wall figures depend on it.
    """
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    init_s = WordSegmenter(cache_dir=None).initialize()
    import_and_init_s = time.perf_counter() - t0
    fe = MandarinFrontend()
    fe.warm_up()
    fe.to_ids("预热。")

    cpu: list[float] = []

    def timed(fn, text: str) -> float:
        c = time.thread_time()
        t = time.perf_counter()
        fn(text)
        wall = (time.perf_counter() - t) * 1000.0
        cpu.append((time.thread_time() - c) * 1000.0)
        return wall

    _clear_caches()
    cold = [timed(fe.to_ids, s) for s in sentences]
    cold_cpu = list(cpu)
    warm, norm, warm_cpu = [], [], []
    for _ in range(rounds):
        for s in sentences:
            warm.append(timed(fe.to_ids, s))
            warm_cpu.append(cpu[-1])
            norm.append(timed(normalize, s))
    chars = [len(s) for s in sentences]
    per30 = [ms * 30.0 / n for ms, n in zip(warm, chars * rounds)]
    cold30 = [ms * 30.0 / n for ms, n in zip(cold, chars)]

    def row(name: str, values: list[float]) -> dict:
        return {"name": name, "n": len(values), "p50_ms": _pct(values, 0.5), "p90_ms": _pct(values, 0.9),
                "p99_ms": _pct(values, 0.99), "max_ms": max(values), "mean_ms": statistics.fmean(values)}

    return {
        "sentences": len(sentences),
        "mean_chars": statistics.fmean(chars),
        "rounds": rounds,
        "jieba_init_s": init_s,
        "jieba_import_and_init_s": import_and_init_s,
        "rows": [
            row("text→ids, warm, per sentence, wall", warm),
            row("text→ids, warm, per sentence, CPU time", warm_cpu),
            row("text→ids, cold caches, per sentence, wall", cold),
            row("text→ids, cold caches, per sentence, CPU", cold_cpu),
            row("text→ids, warm, per 30 chars", per30),
            row("text→ids, cold caches, per 30 chars", cold30),
            row("normalize only, per sentence", norm),
        ],
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(), "cpu": platform.processor(),
                    "cores": os.cpu_count(), "load_average_1m": os.getloadavg()[0],
                    "load_average_before": list(load_before), "load_average_after": list(os.getloadavg())},
    }


def _loads(values: list[float]) -> str:
    return "/".join(f"{v:.2f}" for v in values)


def format_table(result: dict) -> str:
    """Human-readable table of a run() result."""
    lines = [
        f"{result['sentences']} sentences, {result['mean_chars']:.1f} chars on average, {result['rounds']} rounds; "
        f"jieba init {result['jieba_init_s'] * 1000:.0f} ms; {result['machine']['cores']} cores, "
        f"load average (1/5/15 min) {_loads(result['machine']['load_average_before'])} before, "
        f"{_loads(result['machine']['load_average_after'])} after",
        f"{'measure':40s} {'n':>6s} {'p50 ms':>8s} {'p90 ms':>8s} {'p99 ms':>8s} {'max ms':>8s} {'mean ms':>8s}",
    ]
    for r in result["rows"]:
        lines.append(f"{r['name']:40s} {r['n']:6d} {r['p50_ms']:8.3f} {r['p90_ms']:8.3f} {r['p99_ms']:8.3f} "
                     f"{r['max_ms']:8.3f} {r['mean_ms']:8.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--texts", type=Path, default=POLYPHONE_CASES,
                        help="TSV of id, class, text, or the polyphone test set (default)")
    parser.add_argument("--max-p99-ms", type=float, default=None,
                        help="exit 1 when the warm per-sentence p99 (wall, and CPU time) exceeds this (target: 5)")
    parser.add_argument("--rounds", type=int, default=20, help="warm passes over the sentences")
    parser.add_argument("--out", type=Path, default=None, help="write the result as JSON here")
    args = parser.parse_args(argv)
    result = run(load_sentences(args.texts), max(1, args.rounds))
    sys.stdout.write(format_table(result) + "\n")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")
    if args.max_p99_ms is not None:
        failed = False
        for r in result["rows"][:2]:
            ok = r["p99_ms"] <= args.max_p99_ms
            failed |= not ok
            sys.stdout.write(f"{r['name']}: p99 {r['p99_ms']:.3f} ms, limit {args.max_p99_ms:.3f} ms: "
                             f"{'ok' if ok else 'FAILED'}\n")
        if failed:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
