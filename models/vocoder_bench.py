"""Vocoder CPU time per audio second: the window-recompute path vs the stateful streaming path, side by side.

    python -m models.vocoder_bench --voice baker-zh --chunks 24,48,96 --batch 1,8 --threads 2 --repeats 3

Each repeat vocodes the same real mels (tests/fixtures/baker) chunk by chunk through both paths, interleaved
(old, new, old, new …) so a shared machine's load drifts over both alike: first chunk `--first-frames` of
audio, then chunks of one size. Batch B runs B identical streams per call. Prints CPU seconds (process time,
all threads) per second of audio, their ratio, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from models.streaming_vocoder import StreamingVocoder
from models.vocoder_stream import StreamJoiner, VocoderStreamSpec, mel_window, vocode_windows

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "baker"


def window_path(vocoder: nn.Module, spec: VocoderStreamSpec, mel: torch.Tensor, first: int, size: int,
                batch: int) -> int:
    """Vocode mel [N, M] as B identical streams with the window path; returns audio samples per stream."""
    n, start, out = mel.shape[0], 0, 0
    joiners = [StreamJoiner(spec) for _ in range(batch)]
    while start < n:
        t = first if start == 0 else size
        last = start + t >= n
        win = mel_window(mel, start, t, spec, stream_ended=True)
        rows = vocode_windows(vocoder, win.frames[None].expand(batch, -1, -1), spec,
                              [win.left_pad_frames] * batch, [win.right_pad_frames] * batch)
        keep = min(t, n - start) * spec.hop_samples
        for b in range(batch):
            piece = joiners[b].join(rows[b], centre_samples=keep, final=last)
        out += piece.shape[0]
        start += t
    return out


def streaming_path(streamer: StreamingVocoder, mel: torch.Tensor, first: int, size: int, batch: int) -> int:
    """Vocode mel [N, M] as B identical streams through the streaming vocoder (the engine's calls)."""
    n, start, out = mel.shape[0], 0, 0
    rows = list(range(batch))
    streamer.reset(rows)
    while start < n:
        t = max(first + streamer.tail_frames, streamer.min_first_frames) if start == 0 else size
        t = min(t, n - start)
        last = start + t >= n
        width = t + (streamer.tail_frames if last else 0)
        chunk = mel.new_zeros(batch, width, mel.shape[1])
        chunk[:, :t] = mel[start: start + t]
        step = streamer.step(rows, chunk, [start == 0] * batch, [t if last else None] * batch)
        out += step.row(0).shape[0]
        start += t
    return out


def cpu_s(fn: Callable[[], int]) -> tuple[float, float, int]:
    """(process CPU seconds, wall seconds, result) of one call."""
    c0, w0 = time.process_time(), time.perf_counter()
    result = fn()
    return time.process_time() - c0, time.perf_counter() - w0, result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voice", default="baker-zh")
    parser.add_argument("--chunks", default="24,48,96")
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--first-frames", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from models.voices.bundle import load_voice

    voice = load_voice(args.voice, weights="fp32")
    vocoder = voice.vocoder.eval()
    spec = voice.stream_spec
    batches = [int(b) for b in args.batch.split(",")]
    streamer = StreamingVocoder(vocoder, max(batches))
    mels = [torch.from_numpy(np.load(FIXTURES / f"seg{i}_mel_after.npy"))[0].float() for i in (1, 2)]
    audio_s = sum(m.shape[0] for m in mels) * spec.hop_samples / spec.sample_rate_hz
    results = []
    with torch.inference_mode():
        window_path(vocoder, spec, mels[0], args.first_frames, 24, 1)  # build kernels before timing
        for batch in batches:
            for size in (int(c) for c in args.chunks.split(",")):
                times: dict[str, list[float]] = {"window": [], "streaming": []}
                for _ in range(args.repeats):
                    for name in times:
                        fn = (lambda m: window_path(vocoder, spec, m, args.first_frames, size, batch)) \
                            if name == "window" else \
                            (lambda m: streaming_path(streamer, m, args.first_frames, size, batch))
                        times[name].append(sum(cpu_s(lambda m=m: fn(m))[0] for m in mels))
                row = {"batch": batch, "chunk_frames": size,
                       **{f"{k}_cpu_s_per_audio_s": statistics.median(v) / (batch * audio_s) for k, v in times.items()}}
                row["ratio_window_over_streaming"] = (row["window_cpu_s_per_audio_s"]
                                                      / row["streaming_cpu_s_per_audio_s"])
                results.append(row)
                print(f"B={batch:<2} chunk {size:>3} fr | window {row['window_cpu_s_per_audio_s']:.4f} | streaming "
                      f"{row['streaming_cpu_s_per_audio_s']:.4f} CPU s / audio s | window/streaming "
                      f"{row['ratio_window_over_streaming']:.2f}×", flush=True)
    load = [round(x, 2) for x in os.getloadavg()]
    print(f"threads {args.threads}, audio {audio_s:.2f} s per repeat, {args.repeats} repeats (median), load avg {load}")
    if args.out:
        args.out.write_text(json.dumps({"results": results, "loadavg_end": load, "audio_s": audio_s}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
