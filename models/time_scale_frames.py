"""Frame arithmetic of the mel tempo change (no torch): which input frames each output frame reads, and back.

Speaking rate ρ (0.5–2.0; 2.0 = twice as fast): output frame j reads input position p_j = j·ρ (float64, the
same product everywhere, so every caller agrees to the bit), interpolating input frames ⌊p_j⌋ and ⌊p_j⌋ + 1.
An utterance of N input frames gives the outputs with p_j < N: ⌈N / ρ⌉ of them. Input frame i (and so a
decoder step of r frames starting at input frame k·r) starts at the first output j with p_j ≥ i.
"""

from __future__ import annotations

import math

RATE_RANGE = (0.5, 2.0)  # speaking rates the engine applies; 1.0 = the voice's natural rate


def source_position(out_frame: int, speaking_rate: float) -> float:
    """Input position output frame `out_frame` reads: out_frame·rate (float64)."""
    return out_frame * float(speaking_rate)


def output_frames(n_in: float, speaking_rate: float) -> int:
    """Outputs j ≥ 0 with j·rate < n_in: the output length of an n_in-frame utterance, and the first output frame
    at or past input position n_in (so input frame i starts at output frame output_frames(i, rate))."""
    if n_in <= 0:
        return 0
    m = math.ceil(n_in / speaking_rate)
    while m > 0 and source_position(m - 1, speaking_rate) >= n_in:  # the float quotient may be one off: the product decides
        m -= 1
    while source_position(m, speaking_rate) < n_in:
        m += 1
    return m


def ready_output_frames(n_in: int, speaking_rate: float) -> int:
    """Outputs computable from the first n_in input frames while the utterance goes on: the j with
    ⌈j·rate⌉ ≤ n_in − 1 (frame ⌊p_j⌋ + 1 is read only when p_j is not whole)."""
    if n_in <= 0:
        return 0
    top = n_in - 1  # whole: ⌈x⌉ ≤ top ⇔ x ≤ top
    m = math.floor(top / speaking_rate) + 1
    while m > 0 and source_position(m - 1, speaking_rate) > top:
        m -= 1
    while source_position(m, speaking_rate) <= top:
        m += 1
    return m


def input_frames_needed(n_out: int, speaking_rate: float) -> int:
    """Input frames that outputs [0, n_out) read while the utterance goes on: ⌈(n_out − 1)·rate⌉ + 1 (0 for none).
    The inverse of ready_output_frames: ready_output_frames(input_frames_needed(n, ρ), ρ) ≥ n."""
    if n_out <= 0:
        return 0
    return math.ceil(source_position(n_out - 1, speaking_rate)) + 1


def inputs_started_before(out_frame: int, speaking_rate: float) -> int:
    """Input frames i whose first output frame (output_frames(i, rate)) lies before `out_frame`: ⌊(out_frame−1)·ρ⌋ + 1."""
    if out_frame <= 0:
        return 0
    return math.floor(source_position(out_frame - 1, speaking_rate)) + 1


def steps_started_before(sample: int, hop_samples: int, frames_per_step: int, speaking_rate: float) -> int:
    """Decoder steps (of `frames_per_step` input frames each) whose audio starts before `sample` of the output."""
    out_frame = -(-int(sample) // hop_samples)  # outputs starting before `sample`
    return -(-inputs_started_before(out_frame, speaking_rate) // frames_per_step)


def step_start_sample(step: int, hop_samples: int, frames_per_step: int, speaking_rate: float) -> int:
    """The output sample where decoder step `step` (input frame step·frames_per_step) starts."""
    return hop_samples * output_frames(step * frames_per_step, speaking_rate)
