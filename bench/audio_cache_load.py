"""IVR-mix benchmark of the segment audio cache over gRPC: cache-on vs cache-off servers, TTFA and sustainable paced calls."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import sys
from pathlib import Path
from typing import Any, Sequence

from bench.grpc_load import Settings, run_closed_loop
from bench.metrics import describe, meets_goodput, summarize
from bench.workload import TextItem
from clients.client import VoxpoolClient, session_config

log = logging.getLogger(__name__)

_SERVICES = ("话费查询", "账单查询", "宽带报修", "套餐变更", "积分兑换", "挂失补卡", "密码重置", "人工服务", "投诉建议",
             "业务办理")
_PROMPT_FORMS = ("{s}请按{k}号键。", "您已进入{s}，请稍候。", "{s}暂时繁忙，请您稍后再拨。", "欢迎使用{s}自助服务。",
                 "{s}已受理，感谢您的耐心等待。")
_VARIABLE_FORMS = ("您本月的账单金额为{a}元{b}角。", "您的剩余通话时长为{a}分钟。", "您的订单尾号为{a}{b}的包裹已发出。",
                   "您当前的积分余额为{a}分。", "您预约的时间是{b}点{a}分。")
PROMPT_COPIES = 300  # each prompt appears this often in the pick list
VARIABLE_TEXTS = 10_000  # distinct variable sentences: 50 × 300 / (15 000 + 10 000) = 60 % prompts


def ivr_prompts() -> list[str]:
    """The 50 fixed prompts (a warm-up cuts them into the same segments, with the same seeds, as a call does)."""
    return [form.format(s=s, k=(i % 9) + 1) for i, s in enumerate(_SERVICES) for form in _PROMPT_FORMS]


def ivr_items() -> list[TextItem]:
    """The pick list: 60 % of uniform draws land on one of the 50 prompts, 40 % on a (nearly) unique sentence."""
    items = [TextItem(f"p{i}", "prompt", text) for i, text in enumerate(ivr_prompts()) for _ in range(PROMPT_COPIES)]
    for i in range(VARIABLE_TEXTS):
        form = _VARIABLE_FORMS[i % len(_VARIABLE_FORMS)]
        items.append(TextItem(f"v{i}", "variable", form.format(a=100 + (i * 7919) % 9000, b=1 + i % 9)))
    return items


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.audio_cache_load", description=__doc__)
    p.add_argument("--targets", default="", help="on=HOST:PORT,off=HOST:PORT (the cache-on and cache-off servers)")
    p.add_argument("--write-prompts", metavar="FILE", help="write the 50 prompts (a cache.warm_file) and exit")
    p.add_argument("--concurrency", default="1,2,4,8", help="paced calls at once, probed in this order (default 1,2,4,8)")
    p.add_argument("--duration-s", type=float, default=20.0, help="seconds per probe (default 20)")
    p.add_argument("--ttfa-target-ms", type=float, default=300.0, help="p90 TTFA bound of a sustainable level")
    p.add_argument("--on-time-target", type=float, default=0.99,
                   help="fraction of turns fully on time a sustainable level needs (default 0.99)")
    p.add_argument("--encoding", default="PCMU")
    p.add_argument("--sample-rate-hz", type=int, default=8000)
    p.add_argument("--seed", type=int, default=7, help="seeds the text draws (not the voice)")
    p.add_argument("--out", help="write every summary as JSON here")
    return p


def _by_class(records: list[dict[str, Any]], cls: str, key: str) -> dict[str, float]:
    values = [r[key] for r in records if r.get("class") == cls and r.get("status") == "OK" and key in r]
    return describe(values)


def _server_ttfa(records: list[dict[str, Any]], cls: str) -> dict[str, float]:
    return describe(r["server"]["ttfa_ms"] for r in records
                    if r.get("class") == cls and r.get("status") == "OK" and r.get("server"))


async def _probe(target: str, concurrency: int, st: Settings, items: list[TextItem], duration_s: float
                 ) -> dict[str, Any]:
    async with VoxpoolClient(target) as client:
        records, wall_s = await run_closed_loop(client, items, concurrency, duration_s, st)
    summary = summarize(records, wall_s=wall_s, prebuffers_ms=st.prebuffers_ms)
    summary["ttfa_prompt_ms"] = _by_class(records, "prompt", "ttfa_ms")
    summary["ttfa_variable_ms"] = _by_class(records, "variable", "ttfa_ms")
    summary["server_ttfa_prompt_ms"] = _server_ttfa(records, "prompt")
    summary["server_ttfa_variable_ms"] = _server_ttfa(records, "variable")
    return summary


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Alternate the targets at each concurrency level (every level runs on both); sustainable = the largest
    level that passed with every smaller level passing too."""
    targets = dict(part.split("=", 1) for part in args.targets.split(",") if part.strip())
    if set(targets) != {"on", "off"}:
        raise SystemExit("--targets must name on=HOST:PORT,off=HOST:PORT")
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    config = session_config("", args.encoding, args.sample_rate_hz, 20, "REALTIME")
    st = Settings(config=config, stream_text=False, delta_chars=(1, 1), delta_interval_s=0.0, turn_timeout_s=120.0,
                  burst_gap_s=None, prebuffers_ms=(0, 100), tolerance_s=0.0, keep_frames=False, seed=args.seed)
    items = ivr_items()
    results: dict[str, Any] = {"levels": {}, "sustainable_calls": {"on": 0, "off": 0}}
    alive = {"on": True, "off": True}
    for n in levels:
        for name in ("on", "off"):
            summary = await _probe(targets[name], n, st, items, args.duration_s)
            ok = meets_goodput(summary, args.ttfa_target_ms, args.on_time_target)
            results["levels"].setdefault(str(n), {})[name] = {**summary, "sustainable": ok}
            if ok and alive[name]:
                results["sustainable_calls"][name] = n
            else:
                alive[name] = False
            _print_row(name, n, summary, ok)
    return results


def _fmt(d: dict[str, float]) -> str:
    p50, p90 = d.get("p50", math.nan), d.get("p90", math.nan)
    return f"{p50:7.0f} / {p90:7.0f}"


def _print_row(name: str, n: int, s: dict[str, Any], ok: bool) -> None:
    print(f"cache {name:3} calls {n:3}  turns {s['turns']:4}  TTFA p50/p90 ms all {_fmt(s['ttfa_ms'])}  "
          f"prompt {_fmt(s['ttfa_prompt_ms'])}  variable {_fmt(s['ttfa_variable_ms'])}  "
          f"server prompt {_fmt(s['server_ttfa_prompt_ms'])}  on time {100 * s['all_on_time_fraction']:5.1f} %  "
          f"{'sustainable' if ok else 'NOT sustainable'}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; 0 on a completed run."""
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.write_prompts:
        Path(args.write_prompts).write_text("\n".join(ivr_prompts()) + "\n", encoding="utf-8")
        return 0
    results = asyncio.run(run(args))
    print(f"sustainable paced calls: cache on {results['sustainable_calls']['on']}, "
          f"off {results['sustainable_calls']['off']}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1, default=float), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
