"""Word-timestamp accuracy on the real voice: alignment-derived boundaries against syllables found in the audio.

The independent estimate uses only the waveform and the number of syllables: a sonority curve (low-band
energy and periodicity, 5 ms hop) is cut into exactly N syllables separated by optional silences (frames
35 dB under the loudest) by dynamic programming, boundaries preferring sonority dips and durations near the
utterance's mean. Its two weights were chosen on s01, s02, s05 and m02 (the --tuning-ids); the report gives
those and the other sentences apart. Each word's start
and end from service.timestamps.WordTimer (fed chunk by chunk as the engine streams them) is compared with
the estimate's boundary at the same syllable index.

    python -m bench.timestamps_accuracy [--voice baker-zh] [--texts bench/texts/callcenter_zh.tsv]
        [--json timestamps_accuracy.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
from pathlib import Path

import numpy as np

from service.timestamps import WordTimer, word_units

log = logging.getLogger(__name__)
HOP_S = 0.005
DEFAULT_TEXTS = str(Path(__file__).resolve().parents[1] / "bench" / "texts" / "callcenter_zh.tsv")


def read_texts(path: str) -> list[tuple[str, str]]:
    """(id, text) rows of a TSV with a '#' header line."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        rows.append((parts[0], parts[-1]))
    return rows


def sonority(audio: np.ndarray, rate_hz: int, silence_db: float = 35.0) -> tuple[np.ndarray, np.ndarray]:
    """Per 5 ms frame: sonority in [0, 1] (low-band energy × periodicity) and a silence flag. [T], [T] bool."""
    hop = int(rate_hz * HOP_S)
    win = 4 * hop
    n = max(1, (len(audio) - win) // hop + 1)
    idx = np.arange(win)[None, :] + hop * np.arange(n)[:, None]
    frames = audio[np.minimum(idx, len(audio) - 1)] * np.hanning(win)[None, :]
    spec = np.abs(np.fft.rfft(frames, 2 * win, axis=1)) ** 2
    freqs = np.fft.rfftfreq(2 * win, 1.0 / rate_hz)
    low_db = 10 * np.log10(spec[:, (freqs >= 80) & (freqs <= 1200)].sum(axis=1) + 1e-10)
    all_db = 10 * np.log10(spec.sum(axis=1) + 1e-10)
    silent = all_db < all_db.max() - silence_db
    # periodicity: normalized autocorrelation peak in the 70-400 Hz lag range (the pitch track's strength)
    ac = np.fft.irfft(spec, axis=1)[:, : win]
    lo, hi = int(rate_hz / 400), int(rate_hz / 70)
    periodicity = np.clip(ac[:, lo:hi].max(axis=1) / (ac[:, 0] + 1e-10), 0.0, 1.0)
    energy = np.clip((low_db - (low_db.max() - 50.0)) / 50.0, 0.0, 1.0)
    s = energy * (0.5 + 0.5 * periodicity)
    s = np.convolve(s, np.ones(3) / 3, mode="same")
    return s, silent


def syllable_onsets(audio: np.ndarray, rate_hz: int, n_syllables: int, silence_db: float = 35.0,
                    duration_weight: float = 6.0) -> list[tuple[float, float]]:
    """(start_s, end_s) of each of ``n_syllables`` syllables found in the audio (dynamic programming)."""
    s, silent = sonority(audio, rate_hz, silence_db)
    t_frames = len(s)
    speech = int((~silent).sum())
    mean_d = max(8.0, speech / max(1, n_syllables))
    d_min, d_max = max(4, int(0.3 * mean_d)), min(t_frames, int(3.0 * mean_d) + 1)
    inside = np.concatenate([[0.0], np.cumsum(np.where(silent, 2.0, 0.0))])  # silence inside a syllable
    gap = np.where(silent, 0.0, 3.0)  # speech inside a gap
    boundary = 4.0 * s  # a syllable should start at a sonority dip
    inf = np.inf
    gapped = np.concatenate([[0.0], np.cumsum(gap)])  # leading silence
    back: list[tuple[np.ndarray, np.ndarray]] = []
    for _ in range(n_syllables):
        ends = np.full(t_frames + 1, inf)
        arg_d = np.zeros(t_frames + 1, np.int64)
        for d in range(d_min, d_max + 1):
            starts = np.arange(0, t_frames + 1 - d)
            cost = (gapped[starts] + boundary[np.minimum(starts, t_frames - 1)]
                    + inside[starts + d] - inside[starts] + duration_weight * np.log(d / mean_d) ** 2)
            better = cost < ends[starts + d]
            ends[starts[better] + d] = cost[better]
            arg_d[starts[better] + d] = d
        # extend by gap frames: gapped[t] = min(ends[t], gapped[t-1] + gap[t-1]); from[t] = where the syllable ended
        new_gapped = ends.copy()
        came_from = np.arange(t_frames + 1)
        for t in range(1, t_frames + 1):
            alt = new_gapped[t - 1] + gap[t - 1]
            if alt < new_gapped[t]:
                new_gapped[t] = alt
                came_from[t] = came_from[t - 1]
        back.append((arg_d, came_from))
        gapped = new_gapped
    trailing = np.concatenate([[0.0], np.cumsum(gap)])
    t = int(np.argmin(gapped + (trailing[-1] - trailing)))  # trailing silence after the last syllable
    out: list[tuple[float, float]] = []
    for arg_d, came_from in reversed(back):
        end = int(came_from[t])
        d = int(arg_d[end])
        out.append(((end - d) * HOP_S, end * HOP_S))
        t = end - d
    return out[::-1]


async def synthesize_and_time(texts: list[tuple[str, str]], voice_name: str) -> list[dict]:
    """Each text through the frontend and the engine in process, timed chunk by chunk as the call path would."""
    from engine.async_engine import AsyncEngine
    from engine.config import EngineConfig
    from engine.request import AudioChunk, SynthesisRequest
    from models.frontend import MandarinFrontend
    from models.voices.bundle import load_voice

    voice = load_voice(voice_name, weights="int8")
    engine = AsyncEngine.from_config(EngineConfig(voices=(voice.name,), max_slots=2), voices={voice.name: voice})
    await engine.start()
    frontend = MandarinFrontend()
    hop = int(voice.stream_spec.hop_samples)
    r = int(voice.acoustic.config.reduction_factor)
    out = []
    try:
        for tid, text in texts:
            result = frontend.to_ids(text)
            units = word_units(text, result.phones, result.id_source, by="word")
            syllables = [sum(1 for k in range(u.first_id, u.last_id + 1) if result.phones[k][-1:].isdigit() and not result.phones[k].startswith("#"))
                         for u in units]
            timer = WordTimer(units, hop, r)
            words, audio, chunks, late = [], [], [], 0
            stream = engine.submit(SynthesisRequest(f"ts/{tid}", tuple(result.ids), voice=voice.name, seed=0))
            async for event in stream:
                if not isinstance(event, AudioChunk):
                    continue
                received = event.start_sample + len(event.samples)
                for w in timer.push(event.start_sample, len(event.samples), event.input_positions):
                    late += w.end_sample > received
                    words.append(w)
                audio.append(event.samples)
                chunks.append((event.start_sample, len(event.samples), np.asarray(event.input_positions)))
            samples = np.concatenate(audio)
            words += timer.finish(len(samples))
            out.append({"id": tid, "text": text, "audio": samples, "rate_hz": voice.sample_rate_hz,
                        "words": words, "syllables": syllables, "late": late, "chunks": chunks,
                        "units": units})
    finally:
        await engine.drain(timeout_s=10)
    return out


def compare(item: dict) -> list[float]:
    """Signed boundary errors (ms, alignment − audio estimate) at every word start and end of one utterance."""
    n = sum(item["syllables"])
    estimate = syllable_onsets(item["audio"], item["rate_hz"], n)
    errors = []
    k = 0
    rate = item["rate_hz"]
    for w, count in zip(item["words"], item["syllables"]):
        if count == 0:
            continue
        start_est, end_est = estimate[k][0], estimate[k + count - 1][1]
        errors.append((w.start_sample / rate - start_est) * 1000.0)
        errors.append((w.end_sample / rate - end_est) * 1000.0)
        k += count
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voice", default="baker-zh")
    parser.add_argument("--texts", default=DEFAULT_TEXTS)
    parser.add_argument("--json", default="timestamps_accuracy.json")
    parser.add_argument("--tuning-ids", default="s01,s02,s05,m02", help="sentences the estimator was tuned on")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    t0 = time.perf_counter()
    items = asyncio.run(synthesize_and_time(read_texts(args.texts), args.voice))
    rows, all_errors = [], []
    for item in items:
        errors = np.abs(compare(item))
        all_errors.extend(errors)
        rows.append({"id": item["id"], "words": len(item["words"]), "median_ms": float(np.median(errors)),
                     "p90_ms": float(np.percentile(errors, 90)), "late_words": item["late"],
                     "audio_s": len(item["audio"]) / item["rate_hz"]})
    signed = np.concatenate([compare(i) for i in items])
    tuned = set(args.tuning_ids.split(","))
    held_out = np.abs(np.concatenate([compare(i) for i in items if i["id"] not in tuned]))
    summary = {
        "held_out_boundaries": len(held_out), "held_out_median_ms": float(np.median(held_out)),
        "held_out_p90_ms": float(np.percentile(held_out, 90)),
        "boundaries": len(all_errors), "median_ms": float(np.median(all_errors)),
        "p90_ms": float(np.percentile(all_errors, 90)), "mean_signed_ms": float(np.mean(signed)),
        "late_words": int(sum(r["late_words"] for r in rows)), "utterances": len(rows),
        "seconds": time.perf_counter() - t0,
    }
    print(f"{'id':6} {'words':>5} {'audio s':>7} {'median ms':>9} {'p90 ms':>7}")
    for r in rows:
        print(f"{r['id']:6} {r['words']:5d} {r['audio_s']:7.2f} {r['median_ms']:9.1f} {r['p90_ms']:7.1f}")
    print(f"all    {summary['boundaries']:5d} boundaries: median {summary['median_ms']:.1f} ms, p90 "
          f"{summary['p90_ms']:.1f} ms, mean signed {summary['mean_signed_ms']:+.1f} ms, late words "
          f"{summary['late_words']}")
    print(f"held out ({len(rows) - len(tuned)} sentences, {summary['held_out_boundaries']} boundaries): median "
          f"{summary['held_out_median_ms']:.1f} ms, p90 {summary['held_out_p90_ms']:.1f} ms")
    Path(args.json).write_text(json.dumps({"summary": summary, "utterances": rows}, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
