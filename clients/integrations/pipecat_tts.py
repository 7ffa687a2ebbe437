"""Pipecat TTS service backed by voxpool: one Converse stream per conversation, one voxpool turn per audio context."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    ErrorFrame,
    Frame,
    StartFrame,
    TTSAudioRawFrame,
    TTSStoppedFrame,
)
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TextAggregationMode, TTSService
from pipecat.utils.types import NOT_GIVEN, NotGiven

from clients.client import (
    Audio,
    Cleared,
    ServerWarning,
    TurnDone,
    TurnError,
    VoxpoolClient,
    VoxpoolError,
    session_config,
    turn_options,
)
from clients.integrations.session import SessionEvent, StreamBroken, TurnWords, VoxpoolSession
from protos.voxpool.v1 import wire

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HeardText:
    """What a Clear answered for an interrupted audio context: the text played and the text never spoken."""

    context_id: str
    text_spoken: str
    text_remaining: str
    dropped_audio_ms: int


@dataclass
class VoxpoolTTSSettings(TTSSettings):
    """Runtime settings (``TTSUpdateSettingsFrame(delta=VoxpoolTTSService.Settings(...))``), each from the next turn.

    Parameters:
        speaking_rate: 0.5-2.0, 1.0 = the voice's natural rate; ``None``: the natural rate.
        volume_db: output gain in dB, -40 to +12; ``None``: the voice's natural level.
    """

    speaking_rate: float | None | NotGiven = field(default_factory=lambda: NOT_GIVEN)
    volume_db: float | None | NotGiven = field(default_factory=lambda: NOT_GIVEN)


class VoxpoolTTSService(TTSService):
    """Pipecat TTS service speaking through a voxpool server over gRPC.

    Text is pushed to voxpool as it arrives (token mode by default: voxpool segments the text itself), each Pipecat
    audio context is one voxpool turn (turn id = context id), the end of an LLM response flushes the turn, and an
    interruption sends Clear for the playing turn. Word timings (voxpool WordTimestamps, or marks until the server
    sends those) go to Pipecat so that only spoken words reach the assistant context. Audio is L16 at the
    pipeline's output rate (any rate in protos.voxpool.v1.wire.SAMPLE_RATES_HZ, 8 to 48 kHz), released ASAP:
    Pipecat's output transport paces playback.

    Settings (``settings=VoxpoolTTSService.Settings(...)``, or a ``TTSUpdateSettingsFrame`` at run time): ``voice``,
    ``speaking_rate``, ``volume_db``; a change applies from the next turn (a new voice moves the call to a stream
    with it between turns). Server warnings (an SSML element ignored, a reading adjusted) go to Pipecat's log.

    Events: ``on_turn_cleared(service, HeardText)`` after an interruption, with the text voxpool played.
    """

    Settings = VoxpoolTTSSettings
    _settings: VoxpoolTTSSettings

    def __init__(self, *, target: str = "localhost:50051", voice: str = "", client: VoxpoolClient | None = None,
                 sample_rate: int | None = None, pacing: str = "ASAP", lexicon: dict[str, str] | None = None,
                 text_aggregation_mode: TextAggregationMode = TextAggregationMode.TOKEN,
                 stop_frame_timeout_s: float = 10.0, settings: VoxpoolTTSSettings | None = None, **kwargs):
        store = VoxpoolTTSSettings(model=None, voice=voice or None, language=None, speaking_rate=None, volume_db=None)
        if settings is not None:
            store.apply_update(settings)
        # voxpool ends every turn with TurnDone (or Cleared / an error), so the base class's "context went quiet"
        # timeout only guards a stalled server: longer than Pipecat's default so a slow first chunk is not cut off.
        super().__init__(
            text_aggregation_mode=text_aggregation_mode,
            stop_frame_timeout_s=stop_frame_timeout_s,
            settings=store,
            push_text_frames=False,
            push_start_frame=True,
            push_stop_frames=False,
            sample_rate=sample_rate,
            **kwargs,
        )
        self._target = target
        self._own_client = client is None
        self._client = client
        self._pacing = pacing
        self._lexicon = dict(lexicon or {})
        self._session: VoxpoolSession | None = None
        self.heard: dict[str, HeardText] = {}
        self._register_event_handler("on_turn_cleared")

    def can_generate_metrics(self) -> bool:
        return True

    @property
    def supports_processing_metrics(self) -> bool:
        return False  # audio arrives on the stream's reader, not inside run_tts

    @property
    def session(self) -> VoxpoolSession | None:
        return self._session

    async def start(self, frame: StartFrame):
        await super().start(frame)
        if self.sample_rate not in wire.SAMPLE_RATES_HZ:
            # misconfiguration: this service cannot do its job (the worker's ProcessorUnusablePolicy decides)
            await self.push_error(
                error_msg=f"voxpool sends {wire.sample_rates_text()} Hz audio; the pipeline asks for "
                          f"{self.sample_rate} Hz: set audio_out_sample_rate (or the service's sample_rate) to one "
                          "of those",
                force_treat_as_permanent=True)
            return
        if self._client is None:
            # VoxpoolSession reopens a broken stream itself (StreamBroken → ErrorFrame): no library failover
            self._client = VoxpoolClient(self._target, service_config="", failover=False)
        self._session = VoxpoolSession(self._client, self._session_config(), self._on_session_event)
        try:
            await self._session.open()
            await self._call_event_handler("on_connected")
        except VoxpoolError as err:  # the first turn retries; say why now
            await self.push_error(error_msg=f"voxpool: cannot open a stream to {self._client.target}: {err}",
                                  exception=err)
            await self._call_event_handler("on_connection_error", str(err))

    def _session_config(self):
        return session_config(self._settings.voice or "", "L16", self.sample_rate,
                              wire.fitting_frame_ms(self.sample_rate), self._pacing, lexicon=self._lexicon)

    def _turn_options(self):
        """The current rate and volume, sent with each turn's first text (None when both are the voice's own)."""
        speaking_rate, volume = self._settings.speaking_rate, self._settings.volume_db
        if speaking_rate is None and volume is None:
            return None
        return turn_options("PLAIN", speaking_rate=speaking_rate, volume_db=volume)

    async def _update_settings(self, delta: TTSSettings) -> dict[str, Any]:
        """Rate and volume go with the next turn's first text; a new voice needs a stream with it, opened now and
        used from the next turn (the turn playing finishes in the old voice)."""
        changed = await super()._update_settings(delta)
        if "voice" in changed and self._session is not None:
            try:
                await self._session.reconfigure(self._session_config())
            except VoxpoolError as err:  # the session keeps the new config: the next turn opens a stream with it
                await self.push_error(error_msg=f"voxpool: cannot open a stream with voice "
                                                f"{self._settings.voice!r} yet: {err}", exception=err)
        return changed

    async def stop(self, frame: EndFrame):
        await super().stop(frame)
        await self._close()

    async def cancel(self, frame: CancelFrame):
        await super().cancel(frame)
        await self._close()

    async def _close(self) -> None:
        if self._session is not None:
            await self._session.close()
            await self._call_event_handler("on_disconnected")
        if self._own_client and self._client is not None:
            await self._client.close()
            self._client = None

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Send the text to the context's voxpool turn; audio arrives through the stream's reader."""
        if self._session is None:
            yield ErrorFrame(error="voxpool TTS used before the pipeline started (no StartFrame reached it)")
            return
        try:
            await self._session.send_text(context_id, text, self._turn_options())
            await self.start_tts_usage_metrics(text)
        except VoxpoolError as err:
            yield ErrorFrame(error=f"voxpool: turn {context_id} failed, the next turn reconnects: {err}")
            yield TTSStoppedFrame(context_id=context_id)
            await self.remove_audio_context(context_id)
            return
        yield None

    async def flush_audio(self, context_id: str | None = None):
        """End of an LLM response: the turn's text is complete."""
        turn_id = context_id or self.get_active_audio_context_id()
        if not turn_id or self._session is None:
            return
        try:
            await self._session.flush(turn_id)
        except VoxpoolError as err:
            await self.push_error(error_msg=f"voxpool: flush of turn {turn_id} failed: {err}", exception=err)

    async def on_audio_context_interrupted(self, context_id: str):
        """Barge-in: Clear the turn; voxpool answers with the text that was played (see `heard`)."""
        await self.stop_all_metrics()
        if self._session is not None and self._session.has_turn(context_id):
            try:
                await self._session.clear(context_id)
            except VoxpoolError as err:
                log.warning("voxpool: clear of turn %s failed: %s", context_id, err)
        await super().on_audio_context_interrupted(context_id)

    async def _on_session_event(self, ev: SessionEvent) -> None:
        if isinstance(ev, Audio):
            if not ev.silence and self.audio_context_available(ev.turn_id):
                await self.append_to_audio_context(
                    ev.turn_id, TTSAudioRawFrame(ev.payload, self.sample_rate, 1, context_id=ev.turn_id))
        elif isinstance(ev, TurnWords):
            await self.add_word_timestamps([(w.text, w.start_s) for w in ev.words], ev.turn_id,
                                           includes_inter_frame_spaces=True)
        elif isinstance(ev, TurnDone):
            await self._end_context(ev.turn_id)
        elif isinstance(ev, Cleared):
            heard = HeardText(ev.turn_id, ev.text_spoken, ev.text_remaining, ev.dropped_audio_ms)
            self.heard[ev.turn_id] = heard
            await self._call_event_handler("on_turn_cleared", heard)
        elif isinstance(ev, ServerWarning):  # the turn goes on: a log line, as Pipecat's own services do
            logger.warning(f"{self}: voxpool turn {ev.turn_id}: {ev.code}: {ev.message}")
        elif isinstance(ev, TurnError):
            await self.push_error(error_msg=f"voxpool turn {ev.turn_id}: {ev.code}: {ev.message}")
            await self._end_context(ev.turn_id)
        elif isinstance(ev, StreamBroken):
            await self.push_error(error_msg=f"voxpool stream broke ({ev.error}); the next turn reconnects",
                                  exception=ev.error)
            await self._call_event_handler("on_disconnected")
            for turn_id in ev.turn_ids:
                await self._end_context(turn_id)

    async def _end_context(self, context_id: str) -> None:
        if self.audio_context_available(context_id):
            await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
            await self.remove_audio_context(context_id)
