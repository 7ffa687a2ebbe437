"""A deterministic fake ModuleRunner for engine-loop tests (no torch): mel and audio are functions of (seed, frame)."""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

import numpy as np

from engine.modules import DecodeRows, VocodeJob
from engine.scheduler import VoiceTiming

HOP = 4  # samples per frame: small, so audio is easy to compare


def frame_value(seed: int, frame: int) -> float:
    """The 'mel' of frame f of a request with this seed (a distinct float per (seed, frame))."""
    return float(seed * 10_000 + frame + 1)


def expected_audio(seed: int, n_frames: int) -> np.ndarray:
    """What the fake vocoder produces for a whole utterance: each frame's value repeated HOP times."""
    return np.repeat(np.array([frame_value(seed, f) for f in range(n_frames)], np.float32), HOP)


class FakeRunner:
    """Each request decodes `frames_per_id · len(ids)` frames; `quiet_tail` trailing frames are quiet (trimmed).

    `fail` maps a module name to a predicate on the call's slots: when it returns True the call raises.
    `delay_s` maps a module name to a sleep per call (to make iterations take time).
    """

    def __init__(
        self,
        voice: str = "fake",
        frames_per_id: int = 8,
        quiet_tail: int = 2,
        vocoder_lookahead_frames: int = 4,
        postnet_lookahead_frames: int = 2,
        sample_rate_hz: int = 1000,
        reduction_factor: int = 2,
        max_input_len: int = 64,
    ) -> None:
        self.voice = voice
        self.timing = VoiceTiming(
            sample_rate_hz, HOP, reduction_factor, vocoder_lookahead_frames, postnet_lookahead_frames
        )
        self.n_symbols = 100
        self.max_input_len = max_input_len
        self.frames_per_id = frames_per_id
        self.quiet_tail = quiet_tail
        self.fail: dict[str, Callable[[Sequence[int]], bool]] = {}
        self.delay_s: dict[str, float] = {}
        self.calls: list[tuple[str, tuple[int, ...]]] = []
        self.slots: dict[int, dict] = {}
        self.released: list[int] = []
        self.lock = threading.Lock()
        self.warmed = False
        self.thread_name: str | None = None  # the thread enter_thread() ran on

    def _call(self, module: str, slots: Sequence[int]) -> None:
        with self.lock:
            self.calls.append((module, tuple(slots)))
        if module in self.delay_s:
            time.sleep(self.delay_s[module])
        pred = self.fail.get(module)
        if pred is not None and pred(slots):
            raise RuntimeError(f"injected {module} failure")

    def enter_thread(self) -> None:
        self.thread_name = threading.current_thread().name

    def warmup(self) -> None:
        self.warmed = True

    def encode(self, slots: Sequence[int], ids: Sequence[Sequence[int]], seeds: Sequence[int]) -> None:
        self._call("encode", slots)
        for slot, row, seed in zip(slots, ids, seeds):
            if slot in self.slots:
                raise RuntimeError(f"slot {slot} not released")
            total = self.frames_per_id * len(row)
            self.slots[slot] = {"seed": seed, "n_ids": len(row), "total": total, "decoded": 0}

    def decode(self, slots: Sequence[int], steps: int, dropout: bool) -> DecodeRows:
        self._call("decode", slots)
        r = self.timing.reduction_factor
        b = len(slots)
        peaks = np.zeros((b, steps), np.int64)
        loud = np.zeros((b, steps * r), bool)
        valid = np.zeros(b, np.int64)
        finished = np.zeros(b, bool)
        for i, slot in enumerate(slots):
            st = self.slots[slot]
            for s in range(steps):
                frame0 = st["decoded"]
                if frame0 >= st["total"] + self.quiet_tail:
                    break
                step_index = frame0 // r
                peaks[i, s] = min(st["n_ids"] - 1, step_index * r // self.frames_per_id)
                for k in range(r):
                    loud[i, s * r + k] = frame0 + k < st["total"]
                st["decoded"] += r
                valid[i] += 1
            finished[i] = st["decoded"] >= st["total"] + self.quiet_tail
        return DecodeRows(peaks, loud, valid, finished)

    def vocode(self, jobs: Sequence[VocodeJob]) -> list[np.ndarray]:
        self._call("vocode", [j.slot for j in jobs])
        out = []
        lag = self.timing.vocoder_lookahead_frames
        for job in jobs:
            st = self.slots[job.slot]
            if job.end_frame > st["decoded"]:
                raise RuntimeError(f"vocode past decoded mel: {job} vs {st['decoded']}")
            if job.start_frame != st.get("fed", 0):
                raise RuntimeError(f"vocode out of order: {job} after {st.get('fed', 0)} frames")
            st["fed"] = job.end_frame
            # like the streaming vocoder: audio `lag` frames behind the frames fed, the rest with the last chunk
            lo, hi = st.get("out", 0), job.end_frame if job.last else max(st.get("out", 0), job.end_frame - lag)
            st["out"] = hi
            out.append(np.repeat(np.array([frame_value(st["seed"], f) for f in range(lo, hi)], np.float32), HOP))
        return out

    def release(self, slot: int) -> None:
        with self.lock:
            self.released.append(slot)
        self.slots.pop(slot, None)
