"""The CUDA path on a real GPU, in one short run: is it right, and what do CUDA graphs buy?

    python -m bench.gpu_check --voice baker-zh --out bench-results/gpu-check.json

1. Streaming vocoder on the GPU: joined chunk audio against whole-utterance vocoding of the same mel (fused
   and reference layers, engine-like and odd chunk sizes), fp32 with TF32 off.
2. Decoder CUDA graphs (real capture, `engine.cuda_graphs.CudaCapture`) against eager decoding: two runners,
   the same scripted sequence of batched decode calls over real utterances (batches that need padding rows,
   rows that stop at different steps); frames decoded per row and the largest mel difference. The proof runs
   the acoustic model in float64: a bookkeeping error (wrong row, padding that leaks) shows at full size, while
   rounding stays far below the bound. In float32 the same calls are reported, not judged: the graph's padded
   batch and input length sum in another order, and the autoregressive decoder amplifies that rounding over
   hundreds of steps (measured on the CPU with the Baker voice: 5 of 6 utterances the same length, one 2 frames
   longer; in float64 all 6 equal within 3e-7).
3. One decoder call's time, graphs against eager, per batch size (CUDA events, median of repeats).

Prints a table per part and writes JSON; exits 1 when a check fails. On a GPU the graphs are really captured;
`--device cpu` runs the same script with `EagerCapture` standing in (a dry run of its logic: the CPU suite runs
it so, with a tiny voice, in tests/bench/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from engine.config import EngineConfig
from engine.runner import TorchRunner

TEXTS = (
    "您好，欢迎致电客服中心，请问有什么可以帮您？",
    "您的订单已经发货，预计明天下午送达。",
    "请输入您的会员卡号，以井号键结束。",
    "好的。",
    "为了保障您的账户安全，本次通话可能会被录音，如需人工服务请按零。",
    "您本月的话费余额为三十八元五角，套餐内剩余流量二点五吉字节。",
)
VOCODER_SIZES = ([37, 24], [24, 48, 96], [21, 1, 2, 3, 96], [7, 13], [16, 24, 48, 96])
VOCODER_BOUND = 1e-4  # max |streamed − whole| (audio peaks ≈ 0.5); CPU fp32 measures ≤ 1e-5
MEL_BOUND = 1e-4  # max |graphs − eager| over mel frames, float64 (Baker voice: CPU 3e-7, H200 1.1e-5)


def strict_fp32() -> None:
    """No TF32 in matmuls or convolutions: the checks compare fp32 against fp32."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_facts(device: torch.device) -> dict[str, Any]:
    if device.type != "cuda":
        return {"torch": torch.__version__, "device": "cpu (dry run: EagerCapture)", "python": sys.version.split()[0]}
    props = torch.cuda.get_device_properties(device)
    return {
        "torch": torch.__version__, "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "device": props.name, "capability": f"{props.major}.{props.minor}", "sm_count": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1), "python": sys.version.split()[0],
    }


def utterance_ids(texts: Sequence[str]) -> list[list[int]]:
    from models.frontend import MandarinFrontend

    frontend = MandarinFrontend()
    return [frontend.to_ids(t).ids for t in texts]


def check_vocoder(voice: Any, ids: Sequence[Sequence[int]], device: torch.device) -> list[dict[str, Any]]:
    """Streamed vs whole-utterance vocoding of real mels on the GPU."""
    from models.streaming_vocoder import StreamingVocoder, vocode_streamed

    acoustic, vocoder = voice.acoustic.to(device).eval(), voice.vocoder.to(device).eval()
    rows = []
    with torch.inference_mode():
        mels = [acoustic.synthesize(torch.tensor(x, device=device), seed=i)[0] for i, x in enumerate(ids[:3])]
        for fused in (True, False):
            streamer = StreamingVocoder(vocoder, 1, fused=fused)
            for n, mel in enumerate(mels):
                whole = vocoder(mel[None].to(next(vocoder.parameters()).dtype))[0]
                for sizes in VOCODER_SIZES:
                    out = vocode_streamed(streamer, mel, sizes)
                    same_len = out.shape == whole.shape
                    diff = float((out - whole).abs().max()) if same_len else float("inf")
                    rows.append({"fused": fused, "utterance": n, "frames": int(mel.shape[0]), "sizes": list(sizes),
                                 "max_abs_diff": diff, "peak": float(whole.abs().max()),
                                 "ok": same_len and diff <= VOCODER_BOUND})
    return rows


def _runner_pair(name: str, voice: Any, config: EngineConfig) -> tuple[TorchRunner, TorchRunner, float]:
    """(graphed runner with its graphs captured, eager runner, capture seconds)."""
    from engine.cuda_graphs import CudaGraphs, EagerCapture

    graphed = TorchRunner(name, voice, config)
    eager = TorchRunner(name, voice, dataclasses.replace(config, cuda_graphs=False))
    if graphed.device.type != "cuda":  # the dry run
        graphed.graphs = CudaGraphs(graphed, config, capture=EagerCapture())
    if graphed.graphs is None:
        raise RuntimeError("the CUDA runner built no graphs (cuda_graphs off?)")
    sync(graphed.device)
    t0 = time.perf_counter()
    graphed.graphs.capture()
    sync(graphed.device)
    return graphed, eager, time.perf_counter() - t0


def check_graphs(name: str, voice: Any, ids: Sequence[Sequence[int]], device: torch.device,
                 steps: int, dtype: torch.dtype = torch.float64) -> dict[str, Any]:
    """The same decode calls through captured graphs and eagerly: frames per row and the largest mel difference
    (the acoustic model in `dtype`; `ok` judges float64 only)."""
    if dtype != voice.acoustic.embedding.weight.dtype:
        voice = dataclasses.replace(voice, acoustic=copy.deepcopy(voice.acoustic).to(dtype))
    config = EngineConfig(device=str(device), weights="fp32", voices=(name,), max_slots=8, cuda_graph_max_batch=4,
                          decode_steps_per_iteration=1, max_decode_steps_per_iteration=steps)
    graphed, eager, capture_s = _runner_pair(name, voice, config)
    captured = sorted(graphed.graphs._decode)
    slots = list(range(len(ids)))
    for runner in (graphed, eager):
        runner.encode(slots, [list(x) for x in ids], [11 * s + 1 for s in slots])
    calls, mismatched_calls, graph_calls = 0, 0, 0
    rng = np.random.default_rng(0)
    while calls < 2000:
        live = [s for s in slots if not eager.row_finished[s]]
        if not live:
            break
        # a subset of 1–4 live rows (odd sizes need padding rows in the bucket), in a shuffled order
        pick = sorted(rng.choice(live, size=min(len(live), int(rng.integers(1, 5))), replace=False).tolist())
        n_steps = int(rng.integers(1, steps + 1))  # 1 … steps decoder steps: the step graph replayed that often
        if graphed.graphs.can_decode(len(pick), n_steps, config.prenet_dropout) \
                and graphed.graphs._bucket(pick) in graphed.graphs._decode:  # a graph, not the eager fallback
            graph_calls += 1
        a = graphed.decode(pick, n_steps, config.prenet_dropout)
        b = eager.decode(pick, n_steps, config.prenet_dropout)
        calls += 1
        if not ((a.valid_steps == b.valid_steps).all() and (a.finished == b.finished).all()):
            mismatched_calls += 1
    per_row = []
    for s in slots:
        n_g, n_e = int(graphed.decoded[s]), int(eager.decoded[s])
        n = min(n_g, n_e)
        diff = float((graphed.mel[s, :n] - eager.mel[s, :n]).abs().max()) if n else 0.0
        per_row.append({"slot": s, "ids": len(ids[s]), "frames_graphs": n_g, "frames_eager": n_e, "max_abs_diff": diff})
    buckets = len(graphed.graphs.batch_buckets) * len(graphed.graphs.length_buckets)
    ok = dtype != torch.float64 or (len(captured) == buckets and graph_calls == calls and mismatched_calls == 0
          and all(r["frames_graphs"] == r["frames_eager"] > 0 and r["max_abs_diff"] <= MEL_BOUND for r in per_row))
    return {"dtype": str(dtype).removeprefix("torch."), "max_steps_per_call": steps, "graphs_captured": len(captured),
            "capture_s": round(capture_s, 2),
            "calls": calls, "graph_calls": graph_calls, "mismatched_calls": mismatched_calls, "rows": per_row, "ok": ok}


def _median_ms(fn: Callable[[], Any], repeats: int, device: torch.device) -> float:
    """Median wall time of fn in ms, the device synchronized around each call (fn's own host copy syncs too)."""
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def time_decode(name: str, voice: Any, ids: Sequence[Sequence[int]], device: torch.device, steps: int,
                batches: Sequence[int], repeats: int) -> list[dict[str, Any]]:
    """One decode call of `steps` steps at each batch size: captured graph vs eager (ms, median)."""
    top = max(batches)
    config = EngineConfig(device=str(device), weights="fp32", voices=(name,), max_slots=top, cuda_graph_max_batch=top,
                          decode_steps_per_iteration=1, max_decode_steps_per_iteration=max(steps, 1))
    graphed, eager, capture_s = _runner_pair(name, voice, config)
    rows = []
    longest_first = sorted(ids, key=len, reverse=True)[:3]  # rows that outlast the timed calls (an all-finished
    for b in batches:                                        # batch would end eager decoding early)
        slots = list(range(b))
        utterances = [list(longest_first[s % len(longest_first)]) for s in slots]
        result = {"batch": b, "steps": steps}
        for label, runner in (("graphs", graphed), ("eager", eager)):
            runner.encode(slots, utterances, slots)
            runner.decode(slots, steps, config.prenet_dropout)  # warm this shape
            ms = _median_ms(lambda: runner.decode(slots, steps, config.prenet_dropout), repeats, device)
            result[f"{label}_ms"] = round(ms, 3)
            result[f"{label}_rows_finished"] = int(runner.row_finished[slots].sum())  # 0: every call did full work
            for s in slots:
                runner.release(s)
        result["speedup"] = round(result["eager_ms"] / result["graphs_ms"], 2)
        result["graphs_ms_per_step_row"] = round(result["graphs_ms"] / (steps * b), 4)
        rows.append(result)
    return [{"capture_s": round(capture_s, 2), "graphs": len(graphed.graphs._decode)}, *rows]


def _table(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> str:
    lines = [" | ".join(keys)]
    for r in rows:
        lines.append(" | ".join(f"{r.get(k):.3g}" if isinstance(r.get(k), float) else str(r.get(k)) for k in keys))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.splitlines()[0])
    p.add_argument("--voice", default="baker-zh", help="installed voice name or folder")
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=8, help="graphs check: 1 to this many decoder steps a call")
    p.add_argument("--timing-steps", type=int, default=4, help="decoder steps of the timed call")
    p.add_argument("--batches", default="1,4,16,64", help="batch sizes timed")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--out", type=Path, default=Path("bench-results/gpu-check.json"))
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here (--device cpu runs a dry run of this script's logic)", file=sys.stderr)
        return 2
    from models.voices.bundle import load_voice

    strict_fp32()
    report: dict[str, Any] = {"command": " ".join(["python -m bench.gpu_check", *(argv or sys.argv[1:])]),
                              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "facts": device_facts(device)}
    print(json.dumps(report["facts"]), flush=True)
    voice = load_voice(args.voice, device=str(device), weights="fp32")
    ids = utterance_ids(TEXTS)
    failed = False
    parts: list[tuple[str, Callable[[], Any]]] = [
        ("vocoder", lambda: check_vocoder(voice, ids, device)),
        ("graphs", lambda: check_graphs(args.voice, voice, ids, device, args.steps, torch.float64)),
        ("graphs_fp32", lambda: check_graphs(args.voice, voice, ids, device, args.steps, torch.float32)),
        ("decode_timing", lambda: time_decode(args.voice, voice, ids, device, args.timing_steps,
                                              [int(b) for b in args.batches.split(",")], args.repeats)),
    ]
    for part, run in parts:
        t0 = time.perf_counter()
        try:
            report[part] = run()
        except Exception:  # noqa: BLE001 -- one part's failure must not hide the others' results
            report[part] = {"error": traceback.format_exc()}
            print(f"\n== {part}: FAILED\n{report[part]['error']}", flush=True)
            failed = True
            continue
        print(f"\n== {part} ({time.perf_counter() - t0:.1f} s)", flush=True)
        result = report[part]
        if part == "vocoder":
            print(_table(result, ["fused", "utterance", "frames", "sizes", "max_abs_diff", "peak", "ok"]))
            failed |= not all(r["ok"] for r in result)
        elif part.startswith("graphs"):
            print({k: v for k, v in result.items() if k != "rows"})
            print(_table(result["rows"], ["slot", "ids", "frames_graphs", "frames_eager", "max_abs_diff"]))
            failed |= not result["ok"]
        else:
            print(result[0])
            print(_table(result[1:], ["batch", "steps", "graphs_ms", "eager_ms", "speedup", "graphs_ms_per_step_row"]))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False), encoding="utf-8")
    print(f"\nwrote {args.out}; {'FAILED' if failed else 'all checks passed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
