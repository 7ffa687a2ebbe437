"""Thread rule of engine/threads.py: only the engine thread runs parallel torch work; set-up threads run serially."""

from __future__ import annotations

import threading

import torch

from engine import EngineConfig
from engine.core import EngineCore
from engine.runner import build_runners
from engine.threads import available_cores, claim_engine_thread, serial_torch
from tests.engine.fakes import FakeRunner
from tests.engine.tiny_voice import make_tiny_voice


def _in_thread(fn):
    out = {}

    def run():
        out["value"] = fn()

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out["value"]


def test_available_cores_is_positive() -> None:
    assert available_cores() >= 1


def test_claim_and_serial_are_per_thread() -> None:
    def claimed():
        n = claim_engine_thread(2)
        return n, torch.get_num_threads()

    assert _in_thread(claimed) == (2, 2)
    assert _in_thread(lambda: (claim_engine_thread(0), torch.get_num_threads()))[0] == available_cores()

    def serial():
        torch.set_num_threads(2)
        serial_torch()
        return torch.get_num_threads()

    assert _in_thread(serial) == 1


def test_enter_thread_runs_on_the_engine_thread_before_warmup() -> None:
    runner = FakeRunner()
    core = EngineCore(EngineConfig(voices=("fake",), max_slots=2), {"fake": runner}, name="engine-under-test")
    core.start()
    try:
        assert runner.thread_name == "engine-under-test"
        assert runner.warmed
        assert set(core.warmup_s) == {"fake"} and core.warmup_s["fake"] >= 0.0  # reported per voice
    finally:
        core.stop()


def test_torch_runner_claims_its_thread_count_and_leaves_the_caller_serial() -> None:
    cfg = EngineConfig(voices=("tiny",), max_slots=2, num_threads=2)

    def build_and_run():
        torch.set_num_threads(2)
        runners = build_runners(cfg, {"tiny": make_tiny_voice()})
        caller = torch.get_num_threads()  # build_runners made the set-up thread serial
        seen = {}
        runner = runners["tiny"]
        original = runner.warmup

        def warmup():
            seen["engine"] = torch.get_num_threads()
            original()

        runner.warmup = warmup
        core = EngineCore(cfg, runners, name="engine-threads")
        core.start()
        core.stop()
        return caller, seen["engine"]

    assert _in_thread(build_and_run) == (1, 2)


def test_engine_thread_is_named_for_the_os() -> None:
    import sys
    import threading

    from engine.threads import claim_engine_thread

    names: list[str] = []

    def engine_thread() -> None:
        claim_engine_thread(1)
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", encoding="utf-8") as f:
            names.append(f.read().strip())

    if not sys.platform.startswith("linux"):
        return
    t = threading.Thread(target=engine_thread)
    t.start()
    t.join()
    assert names == ["voxpool-engine"]
