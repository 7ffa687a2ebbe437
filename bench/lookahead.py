"""Is a shorter vocoder look-ahead for a turn's first chunk worth its error? (issue 13, item 1)

    python -m bench.lookahead --voice baker-zh --first-frames 16 --lookahead exact,16,12,8,4,0 \\
        --threads 1 --dnsmos --json bench-results/lookahead.json

The streaming vocoder is exact: the audio of mel frame k comes out once frame k + delay is fed (Baker MB-MelGAN:
20.17 frames, rounded up to 21). So a turn's first chunk of F frames of audio needs F + 21 frames fed to the
vocoder, and those need the postnet's context (10 frames) decoded past them: F + 21 + 10 decoded frames. A shorter
look-ahead L would vocode the first F + L frames as if the utterance ended there (the model's own end padding),
send the first F frames of that audio, and continue with the exact stream from frame F: L fewer frames to decode
before the first audio, at the price of an error in the first chunk and a seam where the exact audio takes over.

For each of the ten call-center sentences (bench.quality.QUALITY_SENTENCES, whole-utterance mel_after of the
voice, seed = sentence index) and each L it measures, against the exact whole-utterance audio:
* the first chunk's error: rel-L2 over its F frames, and over its last 2 frames (where the error sits);
* the seam: how far the approximate chunk's last sample is from the exact one, where the exact rest goes on (the
  click a caller could hear), over the exact first chunk's peak;
* with `--dnsmos`, DNSMOS OVRL of the joined sentence minus that of the exact audio (the quality extra);
and what L saves: decoder steps before the first audio (r frames per step) times the measured batch-1 decoder
step time of this voice and weight path (--weights, the engine's int8 by default). Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from bench.quality import QUALITY_SENTENCES, dnsmos, rel_l2, sentence_ids
from models.streaming_vocoder import StreamingVocoder

SEAM_FRAMES = 2  # the first chunk's tail over which the error is also reported on its own


def parse_lookaheads(text: str, exact_frames: int) -> list[int]:
    """"exact,16,8" → [21, 16, 8] for a 21-frame exact look-ahead; sorted high to low, each in [0, exact]."""
    out = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        value = exact_frames if word == "exact" else int(word)
        if not 0 <= value <= exact_frames:
            raise ValueError(f"look-ahead {value} frames is outside [0, {exact_frames}] (the exact path's delay)")
        out.append(value)
    if exact_frames not in out:
        out.append(exact_frames)  # the reference row: error 0 up to float rounding
    return sorted(set(out), reverse=True)


@torch.inference_mode()
def decoder_step_ms(acoustic: Any, ids: torch.Tensor, steps: int = 40) -> float:
    """Median wall time of one batch-1 decoder step (the engine's per-step work for a lone first chunk)."""
    enc = acoustic.encode(ids.unsqueeze(0), torch.tensor([ids.shape[0]]))
    state = acoustic.new_state(enc, torch.tensor([0]))
    acoustic.decode(state, 2)  # warm-up
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        acoustic.decode(state, 1)
        times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times)


@torch.inference_mode()
def first_chunk_errors(vocoder: torch.nn.Module, mel: torch.Tensor, exact: torch.Tensor, first_frames: int,
                       lookahead: int, hop: int) -> dict[str, Any]:
    """The errors of one sentence's first chunk when vocoded from its first `first_frames + lookahead` frames;
    `exact` is the whole-utterance audio of `mel`. Also returns the joined audio (approximate chunk + exact rest)."""
    n = min(mel.shape[0], first_frames + lookahead)
    chunk = min(first_frames, mel.shape[0]) * hop
    approx = vocoder(mel[:n].unsqueeze(0))[0].float()[:chunk]
    joined = torch.cat([approx, exact[chunk:]])
    ref = exact[:chunk]
    tail = SEAM_FRAMES * hop
    seam = float((approx[-1] - ref[-1]).abs())  # where the approximate chunk ends vs where the exact rest goes on
    return {"rel_l2": rel_l2(approx.numpy(), ref.numpy()), "tail_rel_l2": rel_l2(approx[-tail:].numpy(),
                                                                                  ref[-tail:].numpy()),
            "seam_jump": seam / max(float(ref.abs().max()), 1e-12), "joined": joined.numpy()}


def evaluate(voice: Any, lookaheads: Sequence[int], first_frames: int, sentences: Sequence[str],
             use_dnsmos: bool) -> dict[str, Any]:
    """Every (sentence, look-ahead) pair; a JSON-ready report with a summary row per look-ahead."""
    acoustic, vocoder = voice.acoustic.eval(), voice.vocoder.eval()
    hop, r = int(vocoder.hop_samples), int(acoustic.config.reduction_factor)
    streamer = StreamingVocoder(vocoder, slots=1)
    exact_frames, ctx = int(streamer.tail_frames), int(acoustic.postnet_context_frames)
    all_ids = sentence_ids(sentences)
    step_ms = decoder_step_ms(acoustic, all_ids[0])
    per: dict[int, list[dict[str, Any]]] = {la: [] for la in lookaheads}
    base_ovrl: list[float] = []
    for i, ids in enumerate(all_ids):
        with torch.inference_mode():
            mel, _ = acoustic.synthesize(ids, seed=i)
            mel = mel.float()
            exact = vocoder(mel.unsqueeze(0))[0].float()
        if use_dnsmos:
            base_ovrl.append(dnsmos(exact.numpy(), int(voice.sample_rate_hz))["ovrl"])
        for la in lookaheads:
            row = first_chunk_errors(vocoder, mel, exact, first_frames, la, hop)
            joined = row.pop("joined")
            if use_dnsmos:
                row["ovrl_delta"] = dnsmos(joined, int(voice.sample_rate_hz))["ovrl"] - base_ovrl[-1]
            per[la].append({"sentence": i, "frames": int(mel.shape[0]), **row})
    rows = []
    for la in lookaheads:
        decoded = first_frames + la + ctx
        steps = math.ceil(decoded / r)
        saved_steps = math.ceil((first_frames + exact_frames + ctx) / r) - steps
        items = per[la]
        row = {
            "lookahead_frames": la, "decoded_frames_before_first_audio": decoded, "decoder_steps": steps,
            "decoder_steps_saved": saved_steps, "ttfa_saved_ms_batch1": round(saved_steps * step_ms, 1),
            "rel_l2_mean": statistics.fmean(x["rel_l2"] for x in items),
            "rel_l2_max": max(x["rel_l2"] for x in items),
            "tail_rel_l2_max": max(x["tail_rel_l2"] for x in items),
            "seam_jump_max": max(x["seam_jump"] for x in items),
        }
        if use_dnsmos:
            row["ovrl_delta_mean"] = statistics.fmean(x["ovrl_delta"] for x in items)
            row["ovrl_delta_min"] = min(x["ovrl_delta"] for x in items)
        rows.append(row)
    return {"voice": voice.name, "weights": voice.weights, "first_frames": first_frames,
            "exact_lookahead_frames": exact_frames, "exact_lookahead_frames_fractional": streamer.lookahead_frames,
            "postnet_context_frames": ctx, "reduction_factor": r, "decoder_step_ms_batch1": round(step_ms, 3),
            "threads": torch.get_num_threads(), "sentences": list(sentences), "summary": rows, "per_sentence": per,
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def format_table(report: dict[str, Any]) -> str:
    dn = "ovrl_delta_mean" in report["summary"][0]
    head = ("| look-ahead frames | decoded before first audio | TTFA saved, batch 1 (ms) | first chunk rel-L2 mean / max "
            "| last 2 frames rel-L2 max | seam jump / chunk peak, max |" + (" ΔOVRL mean / min |" if dn else ""))
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for s in report["summary"]:
        line = (f"| {s['lookahead_frames']} | {s['decoded_frames_before_first_audio']} | "
                f"{s['ttfa_saved_ms_batch1']:.1f} ({s['decoder_steps_saved']} steps) | "
                f"{s['rel_l2_mean']:.2e} / {s['rel_l2_max']:.2e} | {s['tail_rel_l2_max']:.2e} | "
                f"{s['seam_jump_max']:.3f} |")
        if dn:
            line += f" {s['ovrl_delta_mean']:+.3f} / {s['ovrl_delta_min']:+.3f} |"
        lines.append(line)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lookahead", description=__doc__.splitlines()[0])
    parser.add_argument("--voice", default="baker-zh", help='an installed voice, or "tiny" (random, for tests)')
    parser.add_argument("--weights", default="int8", help="weight path of the acoustic model (fp32, int8, bf16)")
    parser.add_argument("--first-frames", type=int, default=16, help="the first chunk's audio, in mel frames")
    parser.add_argument("--lookahead", default="exact,16,12,8,4,0", help='frames; "exact" = the exact delay')
    parser.add_argument("--sentences", type=int, default=len(QUALITY_SENTENCES), help="the first N of the ten")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dnsmos", action="store_true", help="score joined vs exact audio (needs speechmos)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    if args.voice == "tiny":
        from models.voices.bundle import tiny_voice

        voice = tiny_voice()
    else:
        from models.voices.bundle import load_voice

        voice = load_voice(args.voice, weights=args.weights)
    if not 1 <= args.sentences <= len(QUALITY_SENTENCES):
        parser.error(f"--sentences must be 1..{len(QUALITY_SENTENCES)}")
    exact = int(StreamingVocoder(voice.vocoder, slots=1).tail_frames)
    try:
        lookaheads = parse_lookaheads(args.lookahead, exact)
    except ValueError as err:
        parser.error(str(err))
    report = evaluate(voice, lookaheads, args.first_frames, QUALITY_SENTENCES[: args.sentences], args.dnsmos)
    print(f"{report['voice']} ({report['weights']}), first chunk {args.first_frames} frames, exact look-ahead "
          f"{report['exact_lookahead_frames_fractional']:.2f} frames, decoder step {report['decoder_step_ms_batch1']:.2f} "
          f"ms (batch 1, {report['threads']} thread(s)), load avg {report['loadavg']}")
    print(format_table(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
