"""Speaking-rate quality benchmark: DNSMOS and durations of the real voice at several rates, by tempo method.

    python -m bench.speaking_rate_quality --voice baker-zh --weights int8 --rates 0.8,1.0,1.25 --json bench-results/rate.json

Each call-center sentence (bench.quality.QUALITY_SENTENCES, seed + index) is decoded once; the same mel is then
made faster or slower by each method and scored with real DNSMOS (speechmos):

* `mel-linear` (what the engine does, models/mel_time_scale.py): output frame j interpolates input position j·rate;
* `mel-nearest`: output frame j is input frame round(j·rate) (frames repeated or dropped, no interpolation);
* `audio-pv`: the rate-1 audio time-stretched by librosa's phase vocoder (librosa.effects.time_stretch), a
  maintained library's pitch-preserving time-scale modification of the waveform.

Per (method, rate): mean SIG/BAK/OVRL, OVRL minus the rate-1 audio's, and the worst duration error against the
target (duration at 1.0 / rate). A rate passes when OVRL is at most OVRL_DROP_MAX below rate 1's and every
duration is within DURATION_TOLERANCE_PCT of its target. The exit status is 1 when `mel-linear` fails.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from bench.quality import QUALITY_SENTENCES, dnsmos, sentence_ids
from models.mel_time_scale import check_rate, time_scale
from models.time_scale_frames import output_frames

OVRL_DROP_MAX = 0.15  # a rate's mean DNSMOS OVRL may be at most this far below rate 1.0's (issue 17)
DURATION_TOLERANCE_PCT = 5.0  # |duration · rate / duration at 1.0 − 1| per sentence, in %
ENGINE_METHOD = "mel-linear"


def _nearest(mel: torch.Tensor, rate: float) -> torch.Tensor:
    """mel [N, M] → frames round(j·rate) for the outputs time_scale makes (same length)."""
    n_out = output_frames(mel.shape[0], rate)
    idx = torch.clamp(torch.round(torch.arange(n_out, dtype=torch.float64) * rate).long(), max=mel.shape[0] - 1)
    return mel[idx]


def _vocode(voice: Any, mel: torch.Tensor) -> np.ndarray:
    dtype = next(voice.vocoder.parameters()).dtype
    with torch.inference_mode():
        return voice.vocoder(mel.unsqueeze(0).to(dtype))[0].float().cpu().numpy()


def _phase_vocoder(audio: np.ndarray, rate: float) -> np.ndarray:
    import librosa  # in the quality extra with speechmos

    return librosa.effects.time_stretch(audio, rate=rate).astype(np.float32)


def methods(voice: Any) -> dict[str, Callable[[torch.Tensor, np.ndarray, float], np.ndarray]]:
    """name → f(mel [N, M], rate-1 audio, rate) → audio at the voice's sample rate."""
    return {
        "mel-linear": lambda mel, audio, rate: _vocode(voice, time_scale(mel, rate)),
        "mel-nearest": lambda mel, audio, rate: _vocode(voice, _nearest(mel, rate)),
        "audio-pv": lambda mel, audio, rate: _phase_vocoder(audio, rate),
    }


def evaluate(voice: Any, rates: Sequence[float], method_names: Sequence[str], seed: int = 0,
             sentences: Sequence[str] = QUALITY_SENTENCES) -> dict[str, Any]:
    """Score every (method, rate) on `sentences`; returns a JSON-ready report (summary + per sentence)."""
    rates = sorted({check_rate(r) for r in (*rates, 1.0)})
    table = methods(voice)
    unknown = [m for m in method_names if m not in table]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {sorted(table)}")
    sr = int(voice.sample_rate_hz)
    per: dict[str, list[dict[str, float]]] = {}
    natural: list[dict[str, float]] = []
    for i, ids in enumerate(sentence_ids(sentences)):
        with torch.inference_mode():
            mel, _ = voice.acoustic.synthesize(ids, seed=seed + i)
        mel = mel.float()
        audio_1 = _vocode(voice, mel)
        natural.append({"audio_s": len(audio_1) / sr, **dnsmos(audio_1, sr)})
        for name in method_names:
            for rate in rates:
                t0 = time.perf_counter()
                audio = audio_1 if rate == 1.0 else table[name](mel, audio_1, rate)
                took = time.perf_counter() - t0
                scores = natural[-1] if rate == 1.0 else dnsmos(audio, sr)
                dur_err = 100.0 * abs(len(audio) * rate / len(audio_1) - 1.0)
                per.setdefault(f"{name}@{rate:g}", []).append(
                    {"index": i, "audio_s": len(audio) / sr, "duration_error_pct": dur_err, "seconds": took,
                     **{k: scores[k] for k in ("sig", "bak", "ovrl", "p808")}})
                logging.getLogger(__name__).info("sentence %d %s@%g: OVRL %.3f, %.2f s", i, name, rate,
                                                 scores["ovrl"], len(audio) / sr)
    ref_ovrl = float(np.mean([s["ovrl"] for s in natural]))
    summary = {}
    for key, rows in per.items():
        name, rate = key.split("@")
        ovrl = float(np.mean([r["ovrl"] for r in rows]))
        worst = float(max(r["duration_error_pct"] for r in rows))
        summary[key] = {
            "method": name, "rate": float(rate), "sig": float(np.mean([r["sig"] for r in rows])),
            "bak": float(np.mean([r["bak"] for r in rows])), "ovrl": ovrl, "ovrl_minus_rate1": ovrl - ref_ovrl,
            "audio_s": float(sum(r["audio_s"] for r in rows)), "duration_error_max_pct": worst,
            "seconds": float(sum(r["seconds"] for r in rows)),
            "passes": bool(ovrl >= ref_ovrl - OVRL_DROP_MAX and worst <= DURATION_TOLERANCE_PCT),
        }
    return {"sentences": list(sentences), "seed": seed, "rates": rates, "methods": list(method_names),
            "ovrl_drop_max": OVRL_DROP_MAX, "duration_tolerance_pct": DURATION_TOLERANCE_PCT,
            "rate1_ovrl": ref_ovrl, "summary": summary, "per_sentence": per}


def format_report(report: dict[str, Any]) -> str:
    """The summary as a plain-text table."""
    head = (f"{'method':<12} {'rate':>5} {'SIG':>6} {'BAK':>6} {'OVRL':>6} {'ΔOVRL':>7} {'audio s':>8} "
            f"{'|Δdur| max %':>12} {'s':>6}  pass")
    lines = [head, "-" * len(head)]
    for s in report["summary"].values():
        lines.append(f"{s['method']:<12} {s['rate']:5.2f} {s['sig']:6.3f} {s['bak']:6.3f} {s['ovrl']:6.3f} "
                     f"{s['ovrl_minus_rate1']:+7.3f} {s['audio_s']:8.2f} {s['duration_error_max_pct']:12.2f} "
                     f"{s['seconds']:6.2f}  {'yes' if s['passes'] else 'NO'}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.speaking_rate_quality", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--voice", default="baker-zh")
    parser.add_argument("--weights", default="int8", help="weight path (the engine's default: int8)")
    parser.add_argument("--rates", default="0.8,1.0,1.25")
    parser.add_argument("--methods", default="mel-linear,mel-nearest,audio-pv")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the JSON report here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    from models.voices.bundle import load_voice
    from models.voices.registry import VoiceNotFound

    try:
        voice = load_voice(args.voice, device="cpu", weights=args.weights)
    except VoiceNotFound as exc:
        raise SystemExit(str(exc)) from exc  # names the install command
    report = evaluate(voice, [float(r) for r in args.rates.split(",") if r.strip()],
                      [m.strip() for m in args.methods.split(",") if m.strip()], seed=args.seed)
    report.update(voice=args.voice, weights=args.weights)
    sys.stdout.write(format_report(report) + "\n")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    engine_rows = [s for s in report["summary"].values() if s["method"] == ENGINE_METHOD]
    return 0 if all(s["passes"] for s in engine_rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
