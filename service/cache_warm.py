"""Cache warm-up: prompt-file lines synthesized through the Synthesize path into the audio cache, one report per line."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable

from google.protobuf import json_format

from engine.cached_engine import warming
from protos.voxpool.v1 import tts_pb2 as pb
from service.call import CallDeps, CallSession
from service.errors import InvalidArgument, ServiceError
from service.servicer import synthesize_events
from service.negotiation import spans_from_proto
from service.telemetry.privacy import message_detail

log = logging.getLogger(__name__)

WARMED, FAILED, TIMED_OUT = "warmed", "failed", "timed_out"


class PromptLineError(ValueError):
    """A prompt-file line that cannot be used; the message says what to change."""


@dataclass(frozen=True)
class LineResult:
    """What one prompt line came to: WARMED, FAILED or TIMED_OUT, with the reason and the audio length."""

    line_number: int
    outcome: str
    message: str = ""
    audio_ms: int = 0


def parse_prompt_line(line: str, max_chars: int) -> pb.SynthesizeRequest | None:
    """A SynthesizeRequest from one line: JSON (protobuf JSON names) or plain text; None for blank and '#' lines."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None
    if text.startswith("{"):
        request = pb.SynthesizeRequest()
        try:
            json_format.Parse(text, request)
        except json_format.ParseError as exc:
            raise PromptLineError(f"not a SynthesizeRequest in JSON: {exc}") from None
        except json.JSONDecodeError as exc:
            raise PromptLineError(f"not valid JSON: {exc}") from None
    else:
        request = pb.SynthesizeRequest(text=text)
    if not request.text.strip():
        raise PromptLineError("the prompt has no text; set \"text\"")
    if len(request.text) > max_chars:
        raise PromptLineError(f"text has {len(request.text)} characters; at most {max_chars} (limits.max_synthesize_chars)")
    try:
        spans_from_proto(request.spans, len(request.text))
    except InvalidArgument as exc:
        raise PromptLineError(str(exc)) from None
    request.pacing.mode = pb.Pacing.ASAP  # warm-up is never paced
    return request


def read_prompt_file(path: str | Path) -> list[tuple[int, str]]:
    """(1-based line number, line) for every line of a UTF-8 file; OSError / UnicodeDecodeError propagate."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return list(enumerate(lines, start=1))


class _Sink:
    """Stands in for the gRPC context of a warm-up session: keeps the events the session writes."""

    def __init__(self) -> None:
        self.events: list[pb.ServerEvent] = []

    async def write(self, event: pb.ServerEvent) -> None:
        self.events.append(event)


class CacheWarmer:
    """Warms the audio cache with prompt lines, `concurrency` at a time, each as one Synthesize call would run.

    Going through CallSession gives the warm-up the same segmentation, frontend, voice and per-segment seeds
    as a real call with that text, so its segments have the keys real calls look up.
    """

    def __init__(self, deps: CallDeps, concurrency: int = 4) -> None:
        self.deps = deps
        self.concurrency = max(1, concurrency)
        self._ids = 0

    async def warm_lines(self, lines: Iterable[tuple[int, str]], timeout_s: float,
                         admit: Callable[[], Awaitable[Any]] | None = None) -> list[LineResult]:
        """Warm every usable line; results in input order (blank and comment lines have none).

        `admit`: awaited before each line is synthesized, it returns a held call slot (service.admission.CallSlot),
        released when the line ends; a ServiceError from it fails the line. None: no admission (the warm-up at
        start, before calls are admitted)."""
        results: dict[int, LineResult] = {}
        jobs: list[tuple[int, pb.SynthesizeRequest]] = []
        order: list[int] = []
        for number, line in lines:
            try:
                request = parse_prompt_line(line, self.deps.cfg.limits.max_synthesize_chars)
            except PromptLineError as exc:
                results[number] = LineResult(number, FAILED, str(exc))
                order.append(number)
                continue
            if request is not None:
                jobs.append((number, request))
                order.append(number)
        gate = asyncio.Semaphore(self.concurrency)

        async def one(number: int, request: pb.SynthesizeRequest) -> None:
            async with gate:
                try:
                    slot = await admit() if admit is not None else None
                except ServiceError as exc:
                    results[number] = LineResult(number, FAILED, exc.message)
                    return
                try:
                    results[number] = await self._warm_one(number, request)
                finally:
                    if slot is not None:
                        slot.release()

        tasks = [asyncio.get_running_loop().create_task(one(n, r), name=f"warm-line-{n}") for n, r in jobs]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for number, _ in jobs:
            if number not in results:
                results[number] = LineResult(number, TIMED_OUT, f"not finished within the warm-up bound of {timeout_s:g} s")
        out = [results[n] for n in order]
        for r in out:
            if r.outcome != WARMED:
                log.warning("cache warm-up: line %d %s: %s", r.line_number, r.outcome, message_detail(r.message))
        return out

    async def _warm_one(self, number: int, request: pb.SynthesizeRequest) -> LineResult:
        self._ids += 1
        sink = _Sink()
        session = CallSession(self.deps, sink, f"warm-{self._ids}", default_pacing="ASAP",
                              max_delta_chars=self.deps.cfg.limits.max_synthesize_chars)

        async def feed() -> AsyncIterator[pb.ClientEvent]:
            for event in synthesize_events(request):
                yield event

        try:
            with warming():
                await session.run(feed())
        except ServiceError as exc:
            return LineResult(number, FAILED, str(exc))
        errors = [e.error.message for e in sink.events if e.WhichOneof("event") == "error"]
        if errors:
            return LineResult(number, FAILED, "; ".join(errors))
        done = [e.turn_done for e in sink.events if e.WhichOneof("event") == "turn_done"]
        audio_ms = sum(d.audio_ms for d in done)
        if not audio_ms:
            warnings = [e.warning.message for e in sink.events if e.WhichOneof("event") == "warning"]
            return LineResult(number, FAILED, "; ".join(warnings) or "the text produced no audio")
        return LineResult(number, WARMED, audio_ms=audio_ms)

    async def warm_file(self, path: str | Path, timeout_s: float) -> list[LineResult]:
        """Warm from a prompt file (start-up); a file that cannot be read is one FAILED result (line 0)."""
        started = time.monotonic()
        try:
            lines = read_prompt_file(path)
        except (OSError, UnicodeDecodeError) as exc:
            log.error("cache warm-up: cannot read %s: %s", path, exc)
            return [LineResult(0, FAILED, f"cannot read {path}: {exc}")]
        results = await self.warm_lines(lines, timeout_s)
        warmed = sum(r.outcome == WARMED for r in results)
        log.info("cache warm-up from %s: %d of %d prompt(s) warmed in %.1f s", path, warmed, len(results),
                 time.monotonic() - started)
        return results
