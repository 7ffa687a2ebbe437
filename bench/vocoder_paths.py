"""Postnet + vocoder CPU time per audio second, side by side: the window-recompute path, the streaming path with the
reference layers (window postnet), and the fast path (streamed postnet, fused 1×1 convs, polyphase PQMF).

    python -m bench.vocoder_paths --voice baker-zh --chunks 24,48,96 --batch 1,4,8,16 --threads 1 --repeats 3

Each repeat runs the same real mels (tests/fixtures/baker: mel_before for the postnet, then its mel_after through the
vocoder) chunk by chunk through every path, interleaved (one path after the other) so a shared machine's load
drifts over all alike: first chunk `--first-frames` of audio, then chunks of one size, as the engine calls them
(postnet context 10 frames, vocoder delay 21). Batch B runs B identical streams per call. Prints CPU seconds
(process time, all threads) per second of audio, the ratios to the fast path, and the load average; `--whole`
adds the floor: whole-utterance postnet + vocoder at batch 1. `--bf16` adds the fast path with both models in
bfloat16 (speed only: its quality is not measured here).
"""

from __future__ import annotations

import argparse
import copy
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

from bench.vocoder_windows import StreamJoiner, mel_window, vocode_windows
from models.streaming_postnet import StreamingPostnet
from models.streaming_vocoder import StreamingVocoder, VocoderStreamSpec
from models.tacotron2 import Tacotron2

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "baker"
BUCKET_FRAMES = 8  # the engine's window_bucket_frames: window postnet calls round up to it


def window_postnet(acoustic: Tacotron2, mel_before: torch.Tensor, start: int, end: int, batch: int) -> torch.Tensor:
    """mel_after frames [start, end) as the window postnet computes them: ctx frames each side, bucketed width."""
    ctx = acoustic.postnet_context_frames
    lo, hi = max(0, start - ctx), min(end + ctx, mel_before.shape[0])
    width = -(-(end + ctx - lo) // BUCKET_FRAMES) * BUCKET_FRAMES
    x = mel_before.new_zeros(batch, width, mel_before.shape[1])
    x[:, : hi - lo] = mel_before[lo:hi]
    return acoustic.postnet(x)[:, start - lo: end - lo]


def window_path(acoustic: Tacotron2, vocoder: nn.Module, spec: VocoderStreamSpec, mel_before: torch.Tensor,
                first: int, size: int, batch: int) -> int:
    """B identical streams through the window postnet and the window-recompute vocoder; audio samples per stream."""
    mel = acoustic.postnet(mel_before[None])[0]  # the window vocoder reads mel_after of its context frames too
    n, start, out = mel.shape[0], 0, 0
    joiners = [StreamJoiner(spec) for _ in range(batch)]
    while start < n:
        t = first if start == 0 else size
        last = start + t >= n
        window_postnet(acoustic, mel_before, start, min(n, start + t), batch)
        win = mel_window(mel, start, t, spec, stream_ended=True)
        rows = vocode_windows(vocoder, win.frames[None].expand(batch, -1, -1), spec,
                              [win.left_pad_frames] * batch, [win.right_pad_frames] * batch)
        keep = min(t, n - start) * spec.hop_samples
        for b in range(batch):
            piece = joiners[b].join(rows[b], centre_samples=keep, final=last)
        out += piece.shape[0]
        start += t
    return out


def streaming_path(postnet: Callable[[torch.Tensor, int, int, int, bool], torch.Tensor], streamer: StreamingVocoder,
                   mel_before: torch.Tensor, first: int, size: int, batch: int) -> int:
    """B identical streams, postnet (a callable giving mel_after [B, e − s, M] of frames [s, e)) then the streaming
    vocoder, in the engine's calls; returns audio samples per stream."""
    n, start, out = mel_before.shape[0], 0, 0
    rows = list(range(batch))
    streamer.reset(rows)
    while start < n:
        t = max(first + streamer.tail_frames, streamer.min_first_frames) if start == 0 else size
        t = min(t, n - start)
        last = start + t >= n
        width = t + (streamer.tail_frames if last else 0)
        chunk = mel_before.new_zeros(batch, width, mel_before.shape[1])
        chunk[:, :t] = postnet(mel_before, start, start + t, batch, last)
        step = streamer.step(rows, chunk, [start == 0] * batch, [t if last else None] * batch)
        out += step.row(0).shape[0]
        start += t
    return out


class StreamedPostnetFeed:
    """The engine's streamed postnet for B identical streams: feeds mel_before up to end + ctx (zeros past the
    utterance), returns mel_after [B, end − start, M]."""

    def __init__(self, acoustic: Tacotron2, batch: int) -> None:
        self.streamer, self.batch = StreamingPostnet(acoustic, batch), batch
        self.fed, self.ready = 0, []

    def __call__(self, mel_before: torch.Tensor, start: int, end: int, batch: int, last: bool) -> torch.Tensor:
        ctx, rows = self.streamer.delay_frames, list(range(batch))
        if start == 0:
            self.streamer.reset(rows)
            self.fed, self.ready = 0, []
        stop = end + ctx
        if last:  # a finished row takes the zeros past its end rounded up to the bucket, as the engine
            stop = self.fed + -(-(stop - self.fed) // BUCKET_FRAMES) * BUCKET_FRAMES
        x = mel_before.new_zeros(batch, stop - self.fed, mel_before.shape[1])
        piece = mel_before[self.fed: stop]
        x[:, : piece.shape[0]] = piece
        after = self.streamer.step(rows, x, [self.fed == 0] * batch)
        self.ready.append(after[:, max(0, ctx - self.fed):])
        self.fed = stop
        have = torch.cat(self.ready, 1)
        self.ready = [have]
        return have[:, start:end]


def cpu_s(fn: Callable[[], int]) -> tuple[float, float, int]:
    """(process CPU seconds, wall seconds, result) of one call."""
    c0, w0 = time.process_time(), time.perf_counter()
    result = fn()
    return time.process_time() - c0, time.perf_counter() - w0, result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voice", default="baker-zh")
    parser.add_argument("--chunks", default="24,48,96")
    parser.add_argument("--batch", default="1,4,8,16")
    parser.add_argument("--first-frames", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window", action="store_true", help="add the window-recompute path")
    parser.add_argument("--bf16", action="store_true", help="add the fast path in bfloat16 (speed only)")
    parser.add_argument("--whole", action="store_true", help="add the whole-utterance floor (batch 1)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from models.voices.bundle import load_voice

    voice = load_voice(args.voice, weights="fp32")
    vocoder, acoustic = voice.vocoder.eval(), voice.acoustic.eval()
    spec = voice.stream_spec
    batches = [int(b) for b in args.batch.split(",")]
    slots = max(batches)
    reference = StreamingVocoder(vocoder, slots, fused=False)
    fast = StreamingVocoder(vocoder, slots, fused=True)
    window_feed = lambda m, s, e, b, last: window_postnet(acoustic, m, s, e, b)  # noqa: E731
    paths: dict[str, Callable[[torch.Tensor, int, int], int]] = {
        "streaming_ref": lambda m, size, b: streaming_path(window_feed, reference, m, args.first_frames, size, b),
        "fast": lambda m, size, b: streaming_path(StreamedPostnetFeed(acoustic, b), fast, m, args.first_frames,
                                                  size, b),
    }
    if args.window:
        paths["window"] = lambda m, size, b: window_path(acoustic, vocoder, spec, m, args.first_frames, size, b)
    mels = [torch.from_numpy(np.load(FIXTURES / f"seg{i}_mel_before.npy"))[0].float() for i in (1, 2)]
    if args.bf16:
        acoustic16, vocoder16 = copy.deepcopy(acoustic).bfloat16(), copy.deepcopy(vocoder).bfloat16()
        fast16 = StreamingVocoder(vocoder16, slots, fused=True)
        paths["fast_bf16"] = lambda m, size, b: streaming_path(StreamedPostnetFeed(acoustic16, b), fast16,
                                                               m.bfloat16(), args.first_frames, size, b)
    audio_s = sum(m.shape[0] for m in mels) * spec.hop_samples / spec.sample_rate_hz
    results = []
    with torch.inference_mode():
        for fn in paths.values():  # build kernels before timing
            fn(mels[0], 24, 1)
        if args.whole:
            whole = []
            for _ in range(args.repeats):
                whole.append(sum(cpu_s(lambda m=m: vocoder(acoustic.postnet(m[None])).shape[1])[0] for m in mels))
            floor = statistics.median(whole) / audio_s
            results.append({"whole_utterance_cpu_s_per_audio_s": floor})
            print(f"whole utterance (postnet + vocoder, B=1): {floor:.4f} CPU s / audio s", flush=True)
        for batch in batches:
            for size in (int(c) for c in args.chunks.split(",")):
                times: dict[str, list[float]] = {name: [] for name in paths}
                for _ in range(args.repeats):
                    for name, fn in paths.items():
                        times[name].append(sum(cpu_s(lambda m=m: fn(m, size, batch))[0] for m in mels))
                row = {"batch": batch, "chunk_frames": size,
                       **{f"{k}_cpu_s_per_audio_s": statistics.median(v) / (batch * audio_s) for k, v in times.items()}}
                for name in paths:
                    if name != "fast":
                        row[f"ratio_{name}_over_fast"] = row[f"{name}_cpu_s_per_audio_s"] / row["fast_cpu_s_per_audio_s"]
                results.append(row)
                cells = " | ".join(f"{k} {row[f'{k}_cpu_s_per_audio_s']:.4f}" for k in paths)
                ratios = " ".join(f"{k}/fast {row[f'ratio_{k}_over_fast']:.2f}×" for k in paths if k != "fast")
                print(f"B={batch:<2} chunk {size:>3} fr | {cells} CPU s / audio s | {ratios}", flush=True)
    load = [round(x, 2) for x in os.getloadavg()]
    print(f"threads {args.threads}, audio {audio_s:.2f} s per repeat, {args.repeats} repeats (median), load avg {load}")
    if args.out:
        args.out.write_text(json.dumps({"results": results, "loadavg_end": load, "audio_s": audio_s}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
