"""`voxpool say`: speak one text through a running server (Synthesize, or Converse with streamed deltas) into a WAV."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field

import grpc

from clients.client import (
    Audio,
    ClientConfigError,
    ConversationClosed,
    ServerWarning,
    Started,
    TurnDone,
    TurnError,
    VoxpoolClient,
    VoxpoolError,
    WordTime,
    Words,
    turn_options,
)
from clients.deltas import split_deltas, synthesizable_index
from clients.wav import WavError, write_wav
from protos.voxpool.v1 import wire

STREAM_DELTA_CHARS = (2, 4)  # characters per delta with --stream, like LLM tokens
STREAM_DELTA_INTERVAL_S = 0.03
READY_TIMEOUT_S = 5.0


class SayFailed(Exception):
    """Ends `voxpool say` with exit status 2 and this message."""


@dataclass
class SayResult:
    """What one `say` produced: the frames' payloads in order (silence frames included) and the timings."""

    started: Started | None = None
    payload: bytearray = field(default_factory=bytearray)
    frames: int = 0
    silence_frames: int = 0
    audio_ms: int = 0  # every frame, silence included (the WAV's length)
    first_pts_ms: int | None = None  # media time of the first frame (the WAV's start)
    ttfa_ms: float | None = None  # client clock: text synthesizable → first non-silence frame
    server_ttfa_ms: list[int] = field(default_factory=list)
    errors: list[TurnError] = field(default_factory=list)
    warnings: list[ServerWarning] = field(default_factory=list)
    words: list[WordTime] = field(default_factory=list)  # --timestamps

    def note(self, ev: object) -> None:
        """Record an event other than audio and started."""
        if isinstance(ev, TurnDone):
            self.server_ttfa_ms.append(ev.ttfa_ms)
        elif isinstance(ev, TurnError):
            self.errors.append(ev)
        elif isinstance(ev, ServerWarning):
            self.warnings.append(ev)
        elif isinstance(ev, Words):
            self.words.extend(ev.words)

    def add(self, ev: Audio, ref_s: float | None) -> None:
        self.payload += ev.payload
        if self.first_pts_ms is None:
            self.first_pts_ms = ev.pts_ms
        self.frames += 1
        self.audio_ms += ev.duration_ms
        if ev.silence:
            self.silence_frames += 1
        elif self.ttfa_ms is None and ref_s is not None:
            self.ttfa_ms = (ev.received_s - ref_s) * 1e3


async def _synthesize(client: VoxpoolClient, args: argparse.Namespace) -> SayResult:
    res = SayResult()
    ref_s = time.perf_counter()
    async for ev in client.synthesize(args.text, voice=args.voice, encoding=args.encoding,
                                      sample_rate_hz=args.sample_rate, frame_ms=wire.fitting_frame_ms(args.sample_rate),
                                      pacing="ASAP", ssml=args.ssml,
                                      speaking_rate=args.speaking_rate, word_timestamps=args.timestamps):
        if isinstance(ev, Audio):
            res.add(ev, ref_s)
        elif isinstance(ev, Started):
            res.started = ev
        else:
            res.note(ev)
    return res


async def _converse(client: VoxpoolClient, args: argparse.Namespace) -> SayResult:
    res = SayResult()
    conv = await client.converse(voice=args.voice, encoding=args.encoding, sample_rate_hz=args.sample_rate,
                                 frame_ms=wire.fitting_frame_ms(args.sample_rate), pacing="REALTIME",
                                 speaking_rate=args.speaking_rate, word_timestamps=args.timestamps)
    options = turn_options("SSML") if args.ssml else None  # on the delta that opens the turn
    res.started = conv.started
    deltas = split_deltas(args.text, STREAM_DELTA_CHARS[0], STREAM_DELTA_CHARS[1], 0)
    mark_idx = synthesizable_index(deltas)
    ref: list[float] = []

    async def read() -> None:
        async for ev in conv:
            if isinstance(ev, Audio):
                res.add(ev, ref[0] if ref else None)
            else:
                res.note(ev)

    reader = asyncio.create_task(read())
    try:
        try:
            for k, delta in enumerate(deltas):
                if k:
                    await asyncio.sleep(STREAM_DELTA_INTERVAL_S)
                t = time.perf_counter()
                await conv.send_text(delta, options=options if k == 0 else None)
                if k == mark_idx and not ref:
                    ref.append(t)
            t = time.perf_counter()
            await conv.flush()
            if not ref:
                ref.append(t)
            await conv.end()
        except (VoxpoolError, ConversationClosed):
            pass  # the reader raises the stream's status
        await reader
    finally:
        if not reader.done():
            reader.cancel()
            conv.cancel()
    return res


async def _say(args: argparse.Namespace) -> SayResult:
    async with VoxpoolClient(args.server) as client:
        await client.wait_ready(READY_TIMEOUT_S, fail_fast=True)
        return await (_converse(client, args) if args.stream else _synthesize(client, args))


def _explain(exc: VoxpoolError, server: str) -> str:
    if exc.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return (f"{exc.details}. Is the server running? Start one with `make serve` (or `voxpool serve`), "
                f"or point --server at a running one.")
    if exc.code == grpc.StatusCode.INVALID_ARGUMENT:
        return f"the server rejected the request: {exc.details}"
    if exc.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        wait = f"; retry in {exc.retry_after_ms} ms" if exc.retry_after_ms is not None else ""
        return f"the server is full: {exc.details}{wait}"
    return f"the call failed with {exc.code.name}: {exc.details}"


def _print_words(res: SayResult) -> None:
    """--timestamps: one line per word, its media time from the turn's first frame."""
    first_pts = res.first_pts_ms or 0
    for w in res.words:
        print(f"{(w.start_pts_ms - first_pts) / 1e3:7.3f} {(w.end_pts_ms - first_pts) / 1e3:7.3f}  "
              f"[{w.start_char}:{w.end_char}] {w.text}")


def say_main(args: argparse.Namespace) -> int:
    """`voxpool say TEXT -o OUT.wav [--ssml] [--rate X] [--timestamps] [--encoding pcmu|pcma|l16]
    [--sample-rate HZ] [--voice V] [--stream] [--server H:P]`.

    Writes every frame (silence frames too) to the WAV; prints TTFA and the audio length, the server's warnings
    (stderr) and, with --timestamps, each word's time. Exit status 2 with a clear message when the server cannot
    be reached, rejects the request (malformed SSML: its line and column), or the turn fails.
    """
    try:
        res = asyncio.run(_say(args))
        for w in res.warnings:
            print(f"voxpool say: warning {w.code}: {w.message}", file=sys.stderr)
        if res.errors:
            e = res.errors[0]
            raise SayFailed(f"synthesis failed ({e.code}): {e.message}")
        if not res.frames:
            raise SayFailed("the server sent no audio")
        write_wav(args.output, bytes(res.payload), args.encoding.upper(), args.sample_rate)
    except VoxpoolError as exc:
        print(f"voxpool say: {_explain(exc, args.server)}", file=sys.stderr)
        return 2
    except (SayFailed, ClientConfigError, WavError, OSError) as exc:
        print(f"voxpool say: {exc}", file=sys.stderr)
        return 2
    ttfa = f"{res.ttfa_ms:.0f} ms" if res.ttfa_ms is not None else "n/a"
    server_ttfa = f" (server {res.server_ttfa_ms[0]} ms)" if res.server_ttfa_ms else ""
    mode = "Converse, streamed text, REALTIME" if args.stream else "Synthesize, ASAP"
    print(f"TTFA {ttfa}{server_ttfa}; audio {res.audio_ms / 1e3:.2f} s ({res.frames} frames, "
          f"{res.silence_frames} silence); {mode}")
    if args.timestamps:
        _print_words(res)
    print(f"wrote {args.output} ({args.encoding.upper()} {args.sample_rate} Hz)")
    return 0
