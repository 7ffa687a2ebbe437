"""TorchRunner: one voice's Tacotron2 + vocoder over preallocated slot tensors, one batched call per module."""

from __future__ import annotations

import copy
import logging
import threading
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import torch

from engine import slab
from engine.batching import bucket_up, pad_ids
from engine.config import EngineConfig
from engine.errors import InvalidRequest
from engine.modules import DecodeRows, VocodeJob
from engine.postnet import PostnetAsk, StreamedPostnet, WindowPostnet
from engine.scheduler import VoiceTiming
from engine.threads import claim_engine_thread, serial_torch
from models.mel_time_scale import MelTimeScaler, ScaleRow
from models.speech_edges import gate_tail
from models.tacotron2 import DecodeOutput, DecoderState, Tacotron2, Tacotron2InputError
from models.streaming_vocoder import StreamingVocoder
from models.time_scale_frames import input_frames_needed
from models.transfer import device_tensor

if TYPE_CHECKING:
    from models.voices.bundle import Voice

logger = logging.getLogger(__name__)
_ENCODER_LOCK = threading.Lock()  # uncontended in the pooled engine (one thread); serializes baseline workers



class TorchRunner:
    """Runs one voice for the engine thread (implements engine.modules.ModuleRunner).

    Per slot it keeps: a row of the batched DecoderState (allocated once for `max_slots` rows), the mel
    decoded so far (mel_before [slots, F, M], zero past the last decoded frame), the postnet output computed so
    far (mel_after, exact frames only), and a row of the streaming vocoder's layer context
    (models/streaming_vocoder.py), reset with the slot.

    Exactness: the scheduler only asks to vocode frames [s, e) once they are decided and the postnet context
    past them exists, so every mel_after frame is computed once with all the context the whole-utterance
    postnet would see, and every frame goes through the vocoder once: its audio comes out as soon as the
    vocoder's receptive field allows (`timing.vocoder_lookahead_frames` later), the rest with the last chunk.
    """

    def __init__(self, name: str, voice: "Voice", config: EngineConfig) -> None:
        serial_torch()  # set-up runs on the caller's thread, which must not own an OpenMP team (engine/threads.py)
        self.voice = name
        self.bundle = voice  # the loaded models (baselines build their own runners from it)
        self.config = config
        self.device = torch.device(config.device)
        acoustic: Tacotron2 = voice.acoustic
        vocoder = voice.vocoder
        if self.device.type == "cuda" and config.dtype != "float32":  # copies: the Voice's own models stay as loaded
            dt = getattr(torch, config.dtype)
            acoustic = copy.deepcopy(acoustic).to(dt)
            vocoder = copy.deepcopy(vocoder).to(dt)
        elif config.resolved_vocoder_dtype() != "float32":  # a copy: the voice's own vocoder (whole-utterance) stays
            vocoder = copy.deepcopy(vocoder).to(getattr(torch, config.resolved_vocoder_dtype()))
        with _ENCODER_LOCK:  # .to()/.eval() refresh nn.LSTM's flat weights: not while a baseline worker encodes
            self.acoustic = acoustic.to(self.device).eval()
            self.vocoder = vocoder.to(self.device).eval()
        self.spec = voice.stream_spec
        # the fast path (default): fused vocoder layers and a streamed postnet; else the reference layers
        self.streamer = StreamingVocoder(self.vocoder, config.max_slots, fused=config.vocoder_fast_path)
        self.scaler = MelTimeScaler(config.max_slots, self.acoustic.config.n_mels, self.device,
                                    next(self.vocoder.parameters()).dtype)  # speaking rate: mel tempo, per slot
        c = self.acoustic.config
        self.r = c.reduction_factor
        self.n_mels = c.n_mels
        self.ctx = self.acoustic.postnet_context_frames
        self.timing = VoiceTiming(
            sample_rate_hz=int(self.spec.sample_rate_hz),
            hop_samples=int(self.spec.hop_samples),
            reduction_factor=self.r,
            vocoder_lookahead_frames=self.streamer.tail_frames,
            postnet_lookahead_frames=self.ctx,
            vocoder_first_frames=self.streamer.min_first_frames,
        )
        self.n_symbols = c.n_symbols
        self.max_input_len = c.max_input_len
        self.trim_abs_sum = c.trim_abs_sum
        self.state_dtype = self.acoustic.embedding.weight.dtype
        self.vocoder_dtype = next(self.vocoder.parameters()).dtype
        logger.info("voice %s: vocoder in %s (engine.vocoder_dtype=%s)", name,
                    str(self.vocoder_dtype).replace("torch.", ""), config.vocoder_dtype)
        cap = config.max_slots
        steps_cap = c.max_decoder_steps + config.max_decode_steps_per_iteration
        self.max_frames = steps_cap * self.r + self.ctx + config.max_chunk_frames
        with torch.inference_mode():
            self.state = DecoderState.allocate(c, cap, c.max_input_len, device=self.device, dtype=self.state_dtype)
            self.mel = torch.zeros(cap, self.max_frames, self.n_mels, device=self.device, dtype=self.state_dtype)
            self.mel_after = torch.zeros(cap, self.max_frames, self.n_mels, device=self.device, dtype=self.state_dtype)
        postnet = StreamedPostnet if config.vocoder_fast_path else WindowPostnet
        self.postnet = postnet(self.acoustic, cap, config.window_bucket_frames, self.max_frames)
        self.decoded = np.zeros(cap, np.int64)  # mel frames decoded per slot
        self.lengths = np.zeros(cap, np.int64)  # input ids per slot
        self.row_finished = np.ones(cap, bool)  # host mirror of state.finished (free and drained rows: True)
        # vocoder call widths: full chunks, a starving stream's short ones, first calls
        self._widths = tuple(sorted({*config.chunk_sizes(), *config.short_chunk_sizes(), *self.first_widths()}))
        self.graphs = None
        if self.device.type == "cuda" and config.cuda_graphs:
            from engine.cuda_graphs import CudaGraphs

            self.graphs = CudaGraphs(self, config)
        logger.info(
            "voice %s: %d slots, r=%d, hop=%d at %d Hz, vocoder delay %d + postnet %d frames, state %s on %s",
            name, cap, self.r, self.timing.hop_samples, self.timing.sample_rate_hz,
            self.timing.vocoder_lookahead_frames, self.ctx, self.state_dtype, self.device,
        )

    # ------------------------------------------------------------------ encode

    def encode(self, slots: Sequence[int], ids: Sequence[Sequence[int]], seeds: Sequence[int]) -> None:
        """Encoder over the new requests (ids padded to the longest), initial decoder state into their slots."""
        with torch.inference_mode():
            ids_t, lengths_t = pad_ids(ids)
            try:
                with _ENCODER_LOCK:  # nn.LSTM is not safe to enter from two threads (the naive baseline does)
                    enc = self.acoustic.encode(ids_t, lengths_t)  # host tensors: checked there, then moved
            except Tacotron2InputError as exc:
                raise InvalidRequest(str(exc)) from exc
            fresh = self.acoustic.new_state(enc, device_tensor(seeds, self.device))
            rows = device_tensor(slots, self.device)
            self.state.index_copy_(rows, fresh)
            self.mel.index_fill_(0, rows, 0)
            self.mel_after.index_fill_(0, rows, 0)
        for slot, row in zip(slots, ids):
            self.decoded[slot] = 0
            self.lengths[slot] = len(row)
            self.row_finished[slot] = False
        self.streamer.reset(list(slots))
        self.postnet.reset(list(slots))
        self.scaler.reset(list(slots))

    # ------------------------------------------------------------------ decode

    def _span(self, slots: Sequence[int]) -> list[int]:
        """Slots to decode: the contiguous range covering `slots` when the rows in its gaps are finished (they
        produce nothing and keep their state) and few, so the batch is a zero-copy view of the slab; else slots."""
        lo, hi = slots[0], slots[-1] + 1
        gaps = (hi - lo) - len(slots)
        if gaps == 0 or list(slots) != sorted(slots) or gaps > max(2, len(slots) // 4):
            return list(slots)
        inside = set(slots)
        if all(self.row_finished[s] for s in range(lo, hi) if s not in inside):
            return list(range(lo, hi))
        return list(slots)

    def decode(self, slots: Sequence[int], steps: int, dropout: bool) -> DecodeRows:
        """One batched decoder call of `steps` steps over these slots; appends their mel frames."""
        with torch.inference_mode():
            if self.graphs is not None and self.graphs.can_decode(len(slots), steps, dropout):
                out = self.graphs.decode(slots, steps)
            else:
                span = self._span(slots)
                where = slab.rows_of(span, self.device)
                t = max(1, int(self.lengths[span].max()))
                sub = slab.gather(self.state, where, t)
                out = self.acoustic.decode(sub, steps, dropout=dropout)
                slab.scatter(self.state, where, sub, t)
                if len(span) != len(slots):  # keep the requested rows of the span
                    pick = device_tensor([s - span[0] for s in slots], self.device)
                    out = DecodeOutput(*(getattr(out, f).index_select(0, pick) for f in DecodeOutput.__dataclass_fields__))
            b = len(slots)
            n_frames = steps * self.r
            rows = device_tensor(slots, self.device)
            start = device_tensor(self.decoded[list(slots)].tolist(), self.device)
            cols = start.unsqueeze(1) + torch.arange(n_frames, device=self.device).unsqueeze(0)
            self.mel[rows.unsqueeze(1), cols] = out.frames.to(self.state_dtype)  # zero past each row's stop
            loud = out.frames.abs().sum(-1) >= self.trim_abs_sum  # [B, steps·r], as Tacotron2.trailing_trim_frames
            host = torch.cat(
                [out.peak, out.n_steps.unsqueeze(1), out.finished.long().unsqueeze(1), out.truncated.long().unsqueeze(1), loud.long()],
                dim=1,
            ).cpu().numpy()
        peaks = host[:, :steps]
        n_steps = host[:, steps]
        finished = host[:, steps + 1].astype(bool)
        truncated = host[:, steps + 2].astype(bool)
        loud_h = host[:, steps + 3:].astype(bool)
        self.decoded[list(slots)] += n_steps * self.r
        self.row_finished[list(slots)] = finished
        if truncated.any():
            logger.warning("voice %s: %d row(s) hit max_decoder_steps without a stop token", self.voice, int(truncated.sum()))
        return DecodeRows(peaks=peaks, loud=loud_h.reshape(b, n_frames), valid_steps=n_steps, finished=finished)

    # ------------------------------------------------------------------ postnet + vocoder

    def first_widths(self) -> tuple[int, ...]:
        """Frames a first vocoder call may take: the first chunk's audio plus the vocoder's delay (at least what
        its start padding needs), or a later chunk size plus that delay when the start was held back."""
        t = self.timing
        return tuple(max(n + t.vocoder_lookahead_frames, t.vocoder_first_frames)
                     for n in (self.config.first_chunk_frames, *self.config.chunk_sizes()))

    @staticmethod
    def _decoder_end(job: VocodeJob) -> int:
        """Decoder frames (mel_after) a job's vocoder frames read: the same frames at rate 1, the tempo change's
        inputs otherwise (all of the utterance for its last chunk)."""
        if job.speaking_rate == 1.0:
            return job.end_frame
        if job.last and job.utterance_frames is not None:
            return job.utterance_frames
        return input_frames_needed(job.end_frame, job.speaking_rate)

    def _postnet(self, jobs: Sequence[VocodeJob]) -> None:
        """Bring each job's mel_after up to the decoder frame its vocoder frames read (engine/postnet.py): a finished
        row's mel_before is final to the end of the buffer (zeros past its last frame), a decoding row's up to its
        decoded frames."""
        self.postnet.run(self.mel, self.mel_after, [
            PostnetAsk(job.slot, self._decoder_end(job),
                       self.max_frames if self.row_finished[job.slot] else int(self.decoded[job.slot]))
            for job in jobs
        ])

    def _call_width(self, job: VocodeJob) -> int:
        """Frames of the vocoder call a job rides in: a running stream's exact frame count; a last chunk its frames
        plus the flush tail, rounded up to a configured width (few shapes: oneDNN builds kernels per shape)."""
        n = job.end_frame - job.start_frame
        if not job.last:
            return n
        need = max(n, self.streamer.min_frames if job.first else 0) + self.streamer.tail_frames
        return next((w for w in self._widths if w >= need), bucket_up(need, self.config.window_bucket_frames))

    def _time_scaled(self, jobs: Sequence[VocodeJob], live: Sequence[int]) -> dict[int, torch.Tensor]:
        """The vocoder frames of the jobs not at rate 1 (by job index), one batched tempo-change call: each row is
        fed the mel_after frames its outputs need beyond what its slot was fed already."""
        rows: list[ScaleRow] = []
        index: list[int] = []
        for i in live:
            job = jobs[i]
            if job.speaking_rate == 1.0:
                continue
            if job.first:
                self.scaler.start(job.slot, job.speaking_rate)
            if self.scaler.made[job.slot] != job.start_frame or self.scaler.speaking_rate[job.slot] != job.speaking_rate:
                raise RuntimeError(f"slot {job.slot}: tempo change at frame {self.scaler.made[job.slot]} "
                                   f"(rate {self.scaler.speaking_rate[job.slot]:g}), job starts at {job.start_frame} "
                                   f"(rate {job.speaking_rate:g})")
            fed = self.scaler.fed[job.slot]
            frames = self.mel_after[job.slot, fed: max(fed, self._decoder_end(job))]
            rows.append(ScaleRow(job.slot, frames, job.end_frame - job.start_frame, final=job.last))
            index.append(i)
        return dict(zip(index, self.scaler.step(rows)))

    def vocode(self, jobs: Sequence[VocodeJob]) -> list[np.ndarray]:
        """Postnet, then each job's frames through its slot's streaming vocoder row: one call per frame count.

        Returns the audio each job completed: its frames' audio delayed by the vocoder's look-ahead, and on the
        last chunk everything up to the utterance's end, silenced after the last speech (the vocoder's edge burst:
        models/speech_edges.py)."""
        out: list[np.ndarray] = [np.zeros(0, np.float32)] * len(jobs)
        live = [i for i, j in enumerate(jobs) if j.end_frame > j.start_frame or (j.last and not j.first)]
        if not live:
            return out
        with torch.inference_mode():
            self._postnet([jobs[i] for i in live])
            scaled = self._time_scaled(jobs, live)
            groups: dict[int, list[int]] = {}
            for i in live:
                groups.setdefault(self._call_width(jobs[i]), []).append(i)
            pieces: dict[int, torch.Tensor] = {}
            for width, members in sorted(groups.items()):
                batch = torch.zeros(len(members), width, self.n_mels, device=self.device, dtype=self.vocoder_dtype)
                for row, i in enumerate(members):
                    job = jobs[i]
                    frames = scaled.get(i)
                    if frames is None:  # rate 1: the vocoder frames are the decoder frames
                        frames = self.mel_after[job.slot, job.start_frame: job.end_frame]
                    batch[row, : frames.shape[0]] = frames
                step = self.streamer.step(
                    [jobs[i].slot for i in members], batch, [jobs[i].first for i in members],
                    [jobs[i].end_frame - jobs[i].start_frame if jobs[i].last else None for i in members],
                )
                for row, i in enumerate(members):
                    pieces[i] = step.row(row)
            host = torch.cat([pieces[i] for i in live]).float().cpu().numpy()
        offset = 0
        for i in live:
            n = pieces[i].shape[0]
            out[i] = host[offset: offset + n]
            if jobs[i].last:
                out[i] = gate_tail(out[i], self.timing.sample_rate_hz)
            offset += n
        return out

    # ------------------------------------------------------------------ slots

    def release(self, slot: int) -> None:
        """Forget the slot: its decoder row is marked finished (a stray decode produces nothing) and its vocoder
        row is zeroed, so the slot's next request never hears this one's state."""
        with torch.inference_mode():
            self.state.finished[slot: slot + 1].fill_(True)  # fill_ on a view: no blocking host copy on CUDA
            self.state.lengths[slot: slot + 1].zero_()
            self.streamer.reset([slot])
            self.postnet.reset([slot])
            self.scaler.reset([slot])
        self.decoded[slot] = 0
        self.lengths[slot] = 0
        self.row_finished[slot] = True

    def enter_thread(self) -> None:
        """On the engine thread, first: this thread alone runs torch with `num_threads` intra-op threads; on CUDA the
        runner's device becomes the thread's current one (new tensors, streams and graph captures land there)."""
        claim_engine_thread(self.config.num_threads)
        if self.device.type == "cuda" and self.device.index is not None:  # plain "cuda" is the current device
            torch.cuda.set_device(self.device)

    def warmup(self) -> None:
        """Encode, decode and vocode one short dummy request in slot 0 (and capture CUDA graphs)."""
        ids = [min(i + 1, self.n_symbols - 1) for i in range(min(8, self.max_input_len))]
        self.encode([0], [ids], [0])
        frames_needed = self.first_widths()[0] + self.ctx
        steps = -(-frames_needed // self.r)
        for _ in range(steps):
            self.decode([0], 1, self.config.prenet_dropout)
        n = int(self.decoded[0])
        if n > 0:
            self.vocode([VocodeJob(0, 0, n, utterance_frames=n, first=True, last=True)])
        self.release(0)
        self._warm_shapes()
        if self.graphs is not None:
            self.graphs.capture()

    def _warm_shapes(self) -> None:
        """Run the postnet and the streaming vocoder once per call width at batch 1 (first, middle and last calls,
        and every width a last call of up to max_chunk_frames frames rounds up to),
        so the first call of a width does not pay for building its kernels (that would land on a call's TTFA).
        Larger batches build theirs on first use."""
        tail = self.streamer.tail_frames
        last_widths = {self._call_width(VocodeJob(0, 0, n, n, False, True))
                       for n in range(1, self.config.max_chunk_frames + 1)}
        bucket = self.config.window_bucket_frames  # a finished row's postnet call rounds up to this
        with torch.inference_mode():
            self.postnet.warm(sorted({*self._widths, *last_widths, *range(bucket, self.config.max_chunk_frames + 1, bucket)}))
            for width in sorted({*self._widths, *last_widths}):
                frames = torch.zeros(1, width, self.n_mels, device=self.device, dtype=self.vocoder_dtype)
                calls = [([False], [width - tail])] if width in last_widths else []  # widths a last call takes
                if width in self._widths:  # widths of running streams' calls
                    calls.insert(0, ([False], [None]))
                    if width >= self.streamer.min_first_frames:
                        calls.insert(0, ([True], [None]))
                for first, last in calls:  # first, middle, last call of a stream in slot 0
                    self.streamer.step([0], frames, first, last)
            self.streamer.reset([0])


def build_runners(config: EngineConfig, voices: Mapping[str, "Voice"] | None = None) -> dict[str, TorchRunner]:
    """One TorchRunner per voice; loads config.voices with load_voice when `voices` is None.

    The calling thread runs torch serially from here on; the engine thread takes `config.num_threads`.
    """
    serial_torch()
    if voices is None:
        from models.voices.bundle import load_voice

        voices = {name: load_voice(name, device=config.device, weights=config.weights) for name in config.voices}
    if not voices:
        raise ValueError("no voices to serve")
    return {name: TorchRunner(name, voice, config) for name, voice in voices.items()}
