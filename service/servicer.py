"""The Tts gRPC servicer: admission, then one CallSession per stream; Synthesize, ListVoices, Normalize."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from typing import Any, AsyncIterator, Callable

import grpc

from models.frontend.normalize import NormalizeOptions
from models.frontend.pipeline import FrontendError
from models.frontend.segmenter import has_speakable
from protos.voxpool.v1 import tts_pb2 as pb
from protos.voxpool.v1 import tts_pb2_grpc
from service.admission import Admission
from service.call import CallDeps, CallSession
from service.call.input import turn_options
from service.errors import InvalidArgument, ServiceError, status_for
from service.language import matches as language_matches
from service.security import before_refusal, current_tenant
from service.negotiation import spans_from_proto
from service.ssml import SsmlError, parse_ssml
from service.telemetry import traced_call
from service.telemetry.privacy import error_detail

log = logging.getLogger(__name__)
_ids = itertools.count(1)
_DEADLINE_SLACK_S = 0.5  # a cancel this close to the client's deadline is the deadline (the clocks differ slightly)


def _session_id() -> str:
    return f"{os.getpid():x}-{next(_ids)}"


def _set_status(context: grpc.aio.ServicerContext, exc: BaseException) -> None:
    """The call's final status from the one table, sent by grpc when the handler returns."""
    code, message = status_for(exc)
    if isinstance(exc, ServiceError) and exc.retry_after_ms is not None:
        context.set_trailing_metadata((("grpc-retry-pushback-ms", str(exc.retry_after_ms)),))
    context.set_code(code)
    context.set_details(message)


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException) -> None:
    code, message = status_for(exc)
    if isinstance(exc, ServiceError) and exc.retry_after_ms is not None:
        context.set_trailing_metadata((("grpc-retry-pushback-ms", str(exc.retry_after_ms)),))
    await context.abort(code, message)


class TtsServicer(tts_pb2_grpc.TtsServicer):
    """Thin edge: every call gets an admission slot before any work, and one status mapping on the way out."""

    def __init__(self, deps: CallDeps, admission: Admission):
        self.deps = deps
        self.admission = admission
        self.calls: set[CallSession] = set()
        self.on_call_error: Callable[[BaseException], None] = lambda exc: None  # the server's AllocationWatch

    async def _serve(self, context: grpc.aio.ServicerContext, session: CallSession,
                     events: AsyncIterator[pb.ClientEvent]) -> None:
        self.calls.add(session)
        try:
            await session.run(events)
        except asyncio.CancelledError:
            remaining_s = context.time_remaining()
            if remaining_s is not None and remaining_s < _DEADLINE_SLACK_S:  # ran into its deadline: what it waited on
                log.warning("call %s missed its deadline\n%s", session.session_id, session.cancelled_state or session.dump_state())
            else:
                log.info("call %s cancelled by the client", session.session_id)
            raise
        except Exception as exc:  # every failure ends with a status from the one table
            self.on_call_error(exc)
            code, _ = status_for(exc)
            if code == grpc.StatusCode.INTERNAL:
                log.exception("call %s failed", session.session_id)
            else:
                log.info("call %s ended: %s %s", session.session_id, code.name, error_detail(exc))
            # reliability: set the status and return instead of awaiting abort(): a client that stopped reading
            # holds the status behind its unread frames until it reads or goes away, and the handler (its slot,
            # its state) must not wait for that; grpc sends the status once the handler has returned
            _set_status(context, exc)
        finally:
            self.calls.discard(session)

    @traced_call("Converse")  # telemetry: server span, call metrics, end-of-call log
    async def Converse(self, request_iterator: AsyncIterator[pb.ClientEvent], context: grpc.aio.ServicerContext) -> None:
        try:
            slot = self.admission.acquire(current_tenant())
        except ServiceError as exc:
            # NOTE: let the client's writes land (<= 20 ms) before the trailers: Python aio clients that are
            # still writing when the call ends report INTERNAL instead of our status (grpc/grpc#36066).
            await before_refusal(request_iterator)
            await _abort(context, exc)
            return
        try:
            session = CallSession(self.deps, context, _session_id(), default_pacing="REALTIME")
            await self._serve(context, session, request_iterator.__aiter__())
        finally:
            slot.release()

    @traced_call("Synthesize")  # telemetry
    async def Synthesize(self, request: pb.SynthesizeRequest, context: grpc.aio.ServicerContext) -> None:
        try:
            slot = self.admission.acquire(current_tenant())
        except ServiceError as exc:
            await _abort(context, exc)
            return
        try:
            limit = self.deps.cfg.limits.max_synthesize_chars
            if not request.text.strip():
                await _abort(context, InvalidArgument("text is empty; send the text to speak"))
                return
            if len(request.text) > limit:
                await _abort(context, InvalidArgument(
                    f"text has {len(request.text)} characters; at most {limit} per Synthesize (use Converse for more)"))
                return
            ssml = request.HasField("options") and request.options.text_format == pb.TurnOptions.SSML
            if not ssml and not has_speakable(request.text):
                await _abort(context, InvalidArgument(
                    "text has nothing to say: only punctuation, symbols or emoji, which are not read aloud; send text "
                    "with Chinese characters, letters or digits"))
                return
            try:
                spans_from_proto(request.spans, len(request.text))
                turn_options(request.options if request.HasField("options") else None)
                if request.HasField("options") and request.options.text_format == pb.TurnOptions.SSML:
                    checked_ssml(request)
            except InvalidArgument as exc:
                await _abort(context, exc)
                return
            events = synthesize_events(request)

            async def feed() -> AsyncIterator[pb.ClientEvent]:
                for e in events:
                    yield e

            session = CallSession(self.deps, context, _session_id(), default_pacing="ASAP", max_delta_chars=limit,
                                  nothing_to_say_ends_call=True)
            await self._serve(context, session, feed())
        finally:
            slot.release()

    async def ListVoices(self, request: pb.ListVoicesRequest, context: grpc.aio.ServicerContext) -> pb.ListVoicesResponse:
        out = pb.ListVoicesResponse()
        for v in sorted(self.deps.voices.values(), key=lambda v: v.name):
            if request.language and not language_matches(request.language, v.language):
                continue
            out.voices.append(pb.Voice(name=v.name, language=v.language, sample_rate_hz=v.sample_rate_hz,
                                       license=v.license, description=v.description, is_default=v.is_default))
        return out

    async def Normalize(self, request: pb.NormalizeRequest, context: grpc.aio.ServicerContext) -> pb.NormalizeResponse:
        try:  # frontend work: it holds a call slot (and counts against the tenant's calls) like a call
            slot = self.admission.acquire(current_tenant())
        except ServiceError as exc:
            await _abort(context, exc)
            raise
        try:
            return await self._normalize(request, context)
        finally:
            slot.release()

    async def _normalize(self, request: pb.NormalizeRequest, context: grpc.aio.ServicerContext) -> pb.NormalizeResponse:
        limit = self.deps.cfg.limits.max_synthesize_chars
        if len(request.text) > limit:
            await _abort(context, InvalidArgument(f"text has {len(request.text)} characters; at most {limit}"))
        voice = request.voice or next((v.name for v in self.deps.voices.values() if v.is_default), "")
        if voice not in self.deps.voices:
            await _abort(context, InvalidArgument(
                f"unknown voice {request.voice!r}; available voices: {', '.join(sorted(self.deps.voices))}"))
        try:
            spans = spans_from_proto(request.spans, len(request.text))
        except InvalidArgument as exc:
            await _abort(context, exc)
            raise
        options = NormalizeOptions(one_as_yao=request.normalization.one_as_yao
                                   if request.normalization.HasField("one_as_yao") else self.deps.cfg.frontend.one_as_yao)
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(
                self.deps.executor,
                lambda: self.deps.frontend_for(options).to_ids(request.text, spans, dict(request.lexicon) or None),
            )
        except FrontendError as exc:
            await _abort(context, InvalidArgument(str(exc)))
            raise
        return pb.NormalizeResponse(normalized_text=result.normalized.text, pinyin=list(result.pinyin),
                                    ids=list(result.ids), voice=voice)


def checked_ssml(request: pb.SynthesizeRequest) -> None:
    """An SSML Synthesize request is parsed whole before any audio: InvalidArgument names the line, the column and
    what to change (the call then reads it again, incrementally, like a Converse turn)."""
    if request.spans:
        raise InvalidArgument("spans are not allowed with SSML text; use <say-as interpret-as=...>")
    try:
        parse_ssml(request.text)
    except SsmlError as exc:
        raise InvalidArgument(str(exc)) from None


def synthesize_events(request: pb.SynthesizeRequest) -> list[pb.ClientEvent]:
    """The Converse events a Synthesize request stands for: config, the text as one turn, flush, end."""
    config = pb.SessionConfig(voice=request.voice, audio=request.audio, pacing=request.pacing,
                              preroll_ms=request.preroll_ms, language=request.language,
                              normalization=request.normalization, word_timestamps=request.word_timestamps,
                              frames_per_event=request.frames_per_event)
    delta = pb.TextDelta(text=request.text, turn_id="synthesize", spans=request.spans)
    if request.HasField("options"):
        delta.turn_options.CopyFrom(request.options)
    config.lexicon.update(dict(request.lexicon))
    if request.HasField("seed"):
        config.seed = request.seed
    return [
        pb.ClientEvent(config=config),
        pb.ClientEvent(text=delta),
        pb.ClientEvent(flush=pb.Flush(turn_id="synthesize")),
        pb.ClientEvent(end=pb.End()),
    ]


def voice_entries(engine_voices: dict[str, Any], default: str) -> dict:
    """VoiceEntry per loaded voice (from models.voices.bundle.Voice objects)."""
    from service.negotiation import VoiceEntry

    out = {}
    for name, v in engine_voices.items():
        meta = getattr(v, "meta", {}) or {}
        spec, acoustic = getattr(v, "stream_spec", None), getattr(v, "acoustic", None)
        step = int(spec.hop_samples) * int(acoustic.config.reduction_factor) if spec and acoustic else 0
        out[name] = VoiceEntry(
            name=name, language=meta.get("language", "zh-CN"), sample_rate_hz=int(v.sample_rate_hz),
            license=meta.get("license", ""), description=meta.get("description", ""), is_default=name == default,
            step_samples=step,
        )
    return out
