"""Model-level CPU benchmark of the weight paths: decoder step, postnet and MB-MelGAN RTF (+ optional DNSMOS check)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from bench.quality import QUALITY_SENTENCES, sentence_ids

log = logging.getLogger(__name__)

# issue "The real Mandarin voice", item 7: targets on the 2-core machine with the real voice
TARGET_STEP_MS = {1: 1.5, 16: 5.0}
TARGET_VOCODER_RTF_PER_STREAM_B8 = 0.03


def machine_info(threads: int) -> dict[str, Any]:
    """CPU model, logical CPUs, torch version, threads, load average (the machine may be shared)."""
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {"cpu": model, "logical_cpus": os.cpu_count(), "torch": torch.__version__, "threads": threads,
            "python": platform.python_version(), "loadavg_1_5_15": [round(x, 2) for x in load]}


def _stats(samples_ms: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    return {"median": statistics.median(ordered), "min": ordered[0], "p90": ordered[int(0.9 * (len(ordered) - 1))],
            "n": len(ordered)}


def _batch(ids: Sequence[torch.Tensor], batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The sentences cycled to `batch` rows, zero-padded: (ids [B, T], lengths [B])."""
    rows = [ids[i % len(ids)] for i in range(batch)]
    lengths = torch.tensor([len(r) for r in rows])
    out = torch.zeros(batch, int(lengths.max()), dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out, lengths


@torch.inference_mode()
def time_decoder(voices: dict[str, Any], ids: Sequence[torch.Tensor], batch: int, steps: int, steps_per_call: int,
                 repeats: int) -> dict[str, dict[str, Any]]:
    """Per weight path: ms per decoder step at `batch` (fresh state per repeat, paths interleaved, 1 warm-up)."""
    ids_b, lengths = _batch(ids, batch)
    encoded = {name: v.acoustic.encode(ids_b, lengths) for name, v in voices.items()}
    wall: dict[str, list[float]] = {name: [] for name in voices}
    cpu: dict[str, list[float]] = {name: [] for name in voices}
    short_rows = {name: 0 for name in voices}
    calls = max(1, steps // steps_per_call)
    for rep in range(repeats + 1):
        for name, voice in voices.items():
            model = voice.acoustic
            state = model.new_state(encoded[name], torch.arange(batch) + 7919 * rep)
            t0, c0 = time.perf_counter(), time.process_time()
            produced = 0
            for _ in range(calls):
                out = model.decode(state, steps_per_call)
                produced += int(out.n_steps.min())
            t1, c1 = time.perf_counter(), time.process_time()
            if rep == 0:
                continue
            n = calls * steps_per_call
            if produced < n:
                short_rows[name] += 1
            wall[name].append((t1 - t0) / n * 1e3)
            cpu[name].append((c1 - c0) / n * 1e3)
    result = {}
    for name in voices:
        w = _stats(wall[name])
        result[name] = {"step_ms": w, "per_stream_ms": w["median"] / batch, "cpu_ms_per_step": _stats(cpu[name]),
                        "input_len": int(lengths.max()), "repeats_with_a_stopped_row": short_rows[name]}
    return result


def _interleaved(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, dict[str, float]]:
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for rep in range(repeats + 1):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if rep:
                samples[name].append((time.perf_counter() - t0) * 1e3)
    return {name: _stats(s) for name, s in samples.items()}


@torch.inference_mode()
def reference_mels(voice: Any, ids: Sequence[torch.Tensor], n: int, frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Real fp32 mels of the first `n` sentences, cropped to `frames`: (mel_before, mel_after) [n, frames, M]."""
    befores, afters = [], []
    model = voice.acoustic
    for i in range(n):
        x = ids[i % len(ids)]
        enc = model.encode(x.unsqueeze(0), torch.tensor([len(x)]))
        state = model.new_state(enc, torch.tensor([i]))
        out = model.decode(state, model.config.max_decoder_steps)
        mel = out.frames[:, : int(out.n_steps[0]) * model.config.reduction_factor]
        if mel.shape[1] < frames:
            mel = mel.repeat(1, -(-frames // mel.shape[1]), 1)
        mel = mel[:, :frames].float()
        befores.append(mel[0])
        afters.append(model.postnet(mel)[0])
    return torch.stack(befores), torch.stack(afters)


@torch.inference_mode()
def time_postnet_vocoder(voices: dict[str, Any], mel_before: torch.Tensor, mel_after: torch.Tensor,
                         chunk_frames: int, repeats: int) -> dict[str, dict[str, Any]]:
    """Postnet ms per 100 frames (batch 1) and vocoder RTF: whole mels at batch 1 and 8, engine-style windows."""
    any_voice = next(iter(voices.values()))
    spec = any_voice.stream_spec
    rate, hop = int(spec.sample_rate_hz), int(spec.hop_samples)
    frames = mel_after.shape[1]
    window = spec.left_context_frames + chunk_frames + spec.right_context_frames
    post_in = mel_before[:1, :100]

    def cast(x: torch.Tensor, module: torch.nn.Module) -> torch.Tensor:
        return x.to(next(module.parameters()).dtype)

    postnet = {n: (lambda v=v: v.acoustic.postnet(cast(post_in, v.acoustic.postnet_convs))) for n, v in voices.items()}
    voc_b1 = {n: (lambda v=v: v.vocoder(cast(mel_after[:1], v.vocoder))) for n, v in voices.items()}
    voc_b8 = {n: (lambda v=v: v.vocoder(cast(mel_after[:8], v.vocoder))) for n, v in voices.items()}
    win8 = mel_after[:8, :window]
    voc_win8 = {n: (lambda v=v: v.vocoder(cast(win8, v.vocoder))) for n, v in voices.items()}
    t_post = _interleaved(postnet, repeats)
    t_b1 = _interleaved(voc_b1, repeats)
    t_b8 = _interleaved(voc_b8, repeats)
    t_w8 = _interleaved(voc_win8, repeats)
    audio_s = frames * hop / rate
    chunk_s = chunk_frames * hop / rate
    out = {}
    for name, voice in voices.items():
        out[name] = {
            "postnet_ms_per_100_frames": t_post[name],
            "vocoder_dtype": str(next(voice.vocoder.parameters()).dtype).replace("torch.", ""),
            "vocoder_frames": frames,
            "vocoder_rtf_b1": {k: t_b1[name][k] / 1e3 / audio_s for k in ("median", "min")},
            "vocoder_rtf_per_stream_b8": {k: t_b8[name][k] / 1e3 / (8 * audio_s) for k in ("median", "min")},
            "vocoder_window_frames": window,
            "vocoder_chunk_frames": chunk_frames,
            "vocoder_chunk_rtf_per_stream_b8": {k: t_w8[name][k] / 1e3 / (8 * chunk_s) for k in ("median", "min")},
        }
    return out


def format_tables(report: dict[str, Any]) -> str:
    """Plain-text tables of a bench report (decoder per batch, then postnet/vocoder per weight path)."""
    res, batches = report["results"], report["batches"]
    lines = [f"machine: {report['machine']['cpu']}, {report['machine']['logical_cpus']} logical CPUs, "
             f"threads {report['machine']['threads']}, torch {report['machine']['torch']}, "
             f"load avg at start {report['machine']['loadavg_1_5_15']}, at end {report['loadavg_end']}",
             "", "decoder step, ms (median / min over repeats; per stream = median / B)"]
    head = f"{'weights':<8}" + "".join(f" | B={b:<3} step       per-stream" for b in batches)
    lines += [head, "-" * len(head)]
    for w, r in res.items():
        row = f"{w:<8}"
        for b in batches:
            d = r["decoder"][str(b)]
            row += f" | {d['step_ms']['median']:7.2f} / {d['step_ms']['min']:6.2f} {d['per_stream_ms']:7.3f}"
        lines.append(row)
    lines += ["", f"{'weights':<8} | postnet ms/100 fr | voc dtype | MB-MelGAN RTF b1 | RTF/stream b8 | "
                  f"chunk RTF/stream b8 (window {next(iter(res.values()))['vocoder_window_frames']} fr for "
                  f"{next(iter(res.values()))['vocoder_chunk_frames']})"]
    for w, r in res.items():
        lines.append(
            f"{w:<8} | {r['postnet_ms_per_100_frames']['median']:7.2f} / {r['postnet_ms_per_100_frames']['min']:6.2f}"
            f"  | {r['vocoder_dtype']:<9} | {r['vocoder_rtf_b1']['median']:.4f} / {r['vocoder_rtf_b1']['min']:.4f}"
            f"  | {r['vocoder_rtf_per_stream_b8']['median']:.4f} / {r['vocoder_rtf_per_stream_b8']['min']:.4f}"
            f" | {r['vocoder_chunk_rtf_per_stream_b8']['median']:.4f} / "
            f"{r['vocoder_chunk_rtf_per_stream_b8']['min']:.4f}"
        )
    lines += ["", "targets (median / min):"]
    for w, r in res.items():
        checks = []
        for b, limit in TARGET_STEP_MS.items():
            d = r["decoder"].get(str(b))
            if d:
                checks.append(f"step B={b} ≤ {limit} ms: {d['step_ms']['median']:.2f} / {d['step_ms']['min']:.2f} "
                              f"{'ok' if d['step_ms']['median'] <= limit else 'MISSED'}")
        v = r["vocoder_rtf_per_stream_b8"]
        checks.append(f"MB-MelGAN RTF/stream b8 ≤ {TARGET_VOCODER_RTF_PER_STREAM_B8}: {v['median']:.4f} / "
                      f"{v['min']:.4f} {'ok' if v['median'] <= TARGET_VOCODER_RTF_PER_STREAM_B8 else 'MISSED'}")
        lines.append(f"  {w}: " + "; ".join(checks))
    return "\n".join(lines)


def _int_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: python -m bench.weight_paths --voice baker-zh --weights fp32,int8,bf16 --batches 1,4,16,64 --threads 2 --out F."""
    parser = argparse.ArgumentParser(prog="python -m bench.weight_paths", description=__doc__)
    parser.add_argument("--voice", default="baker-zh")
    parser.add_argument("--weights", default="fp32,int8,bf16")
    parser.add_argument("--batches", type=_int_list, default=[1, 4, 16, 64])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=24, help="decoder steps timed per repeat (fresh state each)")
    parser.add_argument("--steps-per-call", type=int, default=1,
                        help="steps per decode() call; the engine's default decode_steps_per_iteration is 1")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--chunk-frames", type=int, default=24, help="vocoder centre frames per engine-style window")
    parser.add_argument("--quality", action="store_true", help="also run the DNSMOS check (bench.quality)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    weights = [w.strip() for w in args.weights.split(",") if w.strip()]

    from bench.quality import evaluate, format_report, load_paths

    started = machine_info(args.threads)
    voices = load_paths(args.voice, weights)
    timed = {w: voices[w] for w in weights}
    ids = sentence_ids(QUALITY_SENTENCES)
    report: dict[str, Any] = {
        "voice": args.voice, "machine": started, "batches": args.batches, "steps": args.steps,
        "steps_per_call": args.steps_per_call, "repeats": args.repeats,
        "method": "paths interleaved in every repeat; wall-clock ms per decoder step over `steps` steps from a fresh "
                  "state; median, min and p90 over repeats; real sentences (bench.quality.QUALITY_SENTENCES) cycled "
                  "to the batch; process CPU ms alongside",
        "results": {w: {"decoder": {}} for w in weights},
    }
    for batch in args.batches:
        for w, r in time_decoder(timed, ids, batch, args.steps, args.steps_per_call, args.repeats).items():
            report["results"][w]["decoder"][str(batch)] = r
        log.info("batch %d done", batch)
    mel_before, mel_after = reference_mels(voices["fp32"], ids, 8, 100)
    for w, r in time_postnet_vocoder(timed, mel_before, mel_after, args.chunk_frames, args.repeats).items():
        report["results"][w].update(r)
    report["loadavg_end"] = machine_info(args.threads)["loadavg_1_5_15"]
    sys.stdout.write(format_tables(report) + "\n")
    if args.quality:
        quality = evaluate(voices)
        report["quality"] = quality
        sys.stdout.write("\nDNSMOS (fp32 vs each path, same seeds)\n" + format_report(quality) + "\n")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
