"""Quality check of the weight paths: DNSMOS (speechmos) and mel distances to fp32 on fixed call-center sentences."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

log = logging.getLogger(__name__)

# Ten sentences from the call-center set (bench/texts/callcenter_zh.tsv): 3 short,
# 5 medium, 2 long; about 45 s of speech in all. Fixed here so every run scores the same audio.
QUALITY_SENTENCES: tuple[str, ...] = (
    "您好，欢迎致电。",
    "正在为您转接人工服务。",
    "您好，请问有什么可以帮您？",
    "您好，欢迎致电客户服务中心，查询账单请按一，办理业务请按二。",
    "您本月的话费账单已经生成，请在二十五号之前完成缴费。",
    "为了保障您的账户安全，请不要向任何人透露您的验证码。",
    "您的快递已经到达小区门口的快递柜，请凭取件码及时领取。",
    "您的信用卡本期账单金额为三千二百五十元，最后还款日为下月五日。",
    "尊敬的客户您好，您的账户于今天下午发生了一笔大额消费，"
    "如果不是您本人操作，请立即按一转接人工客服，我们将为您冻结账户并进行核实。",
    "温馨提示，近期出现冒充客服人员以退款为由实施诈骗的情况，"
    "我们的工作人员不会要求您提供银行卡密码或者短信验证码，请您提高警惕。",
)
DNSMOS_RATE_HZ = 16000
OVRL_TOLERANCE = 0.1  # a fast path passes when its mean DNSMOS OVRL is at most this much below fp32's


class QualityDependencyError(RuntimeError):
    """speechmos (with librosa and onnxruntime) is not installed."""


@dataclass
class SentenceScore:
    """One sentence through one weight path: lengths, DNSMOS and distances to the fp32 rendering."""

    index: int
    frames: int
    audio_s: float
    sig: float
    bak: float
    ovrl: float
    p808: float
    frames_delta: int  # frames − fp32 frames (same seed)
    teacher_forced_rel_l2: float  # decoder frames fed fp32's previous frame vs fp32's frames (0 for fp32)


def sentence_ids(sentences: Sequence[str] = QUALITY_SENTENCES) -> list[torch.Tensor]:
    """Baker symbol ids [T] for each sentence (models.frontend.MandarinFrontend)."""
    from models.frontend import MandarinFrontend

    frontend = MandarinFrontend()
    return [torch.tensor(frontend.to_ids(text).ids, dtype=torch.long) for text in sentences]


@torch.inference_mode()
def render(voice: Any, ids: torch.Tensor, seed: int) -> tuple[torch.Tensor, np.ndarray]:
    """Whole-utterance synthesis: (mel_after [T, n_mels] float32, audio [T·hop] float32 at the voice's rate)."""
    mel, _ = voice.acoustic.synthesize(ids, seed=seed)
    vocoder_dtype = next(voice.vocoder.parameters()).dtype
    audio = voice.vocoder(mel.unsqueeze(0).to(vocoder_dtype))[0]
    return mel.float(), audio.float().cpu().numpy()


@torch.inference_mode()
def teacher_forced_frames(acoustic: Any, ids: torch.Tensor, seed: int, reference: torch.Tensor | None = None
                          ) -> torch.Tensor:
    """Decoder frames [S, r·n_mels] of one utterance with prenet dropout seeded by `seed`.

    Without `reference` the decoder runs freely until its stop rule. With `reference` [S, r·n_mels] it runs
    exactly S steps, each fed the reference's previous frame instead of its own: the per-step error of a weight
    path without the drift of free running.
    """
    c = acoustic.config
    enc = acoustic.encode(ids.unsqueeze(0), torch.tensor([ids.shape[0]]))
    state = acoustic.new_state(enc, torch.tensor([seed]))
    if reference is None:
        out = acoustic.decode(state, c.max_decoder_steps)
        n = int(out.n_steps[0])
        return out.frames[0, : n * c.reduction_factor].reshape(n, -1).float()
    frames = []
    for s in range(reference.shape[0]):
        if s > 0:
            state.last_frame = reference[s - 1: s, -c.n_mels:].to(state.last_frame.dtype)
            state.finished.zero_()  # keep going to the reference's length even if the stop rule fired early
        frames.append(acoustic.decode(state, 1).frames[0].reshape(-1).float())
    return torch.stack(frames)


def rel_l2(a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray) -> float:
    """‖a − b‖ / ‖b‖ in float64."""
    a64, b64 = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a64 - b64) / max(np.linalg.norm(b64), 1e-30))


def dnsmos(audio: np.ndarray, sample_rate_hz: int) -> dict[str, float]:
    """DNSMOS P.835 (SIG, BAK, OVRL) and P.808 of one clip: resampled to 16 kHz (soxr), clipped to [−1, 1].

    Clips shorter than 9 s are tiled to 9 s by speechmos itself, as DNSMOS expects.
    """
    try:
        from speechmos import dnsmos as speechmos_dnsmos
    except ImportError as exc:
        raise QualityDependencyError(
            "DNSMOS needs speechmos, librosa and onnxruntime: pip install speechmos librosa onnxruntime "
            "(or the project's `quality` extra)"
        ) from exc
    import soxr

    x = np.asarray(audio, dtype=np.float32)
    if sample_rate_hz != DNSMOS_RATE_HZ:
        x = soxr.resample(x, sample_rate_hz, DNSMOS_RATE_HZ, quality="HQ").astype(np.float32)
    scores = speechmos_dnsmos.run(np.clip(x, -1.0, 1.0), DNSMOS_RATE_HZ)
    return {"sig": float(scores["sig_mos"]), "bak": float(scores["bak_mos"]), "ovrl": float(scores["ovrl_mos"]),
            "p808": float(scores["p808_mos"])}


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def evaluate(voices: dict[str, Any], seed: int = 0, sentences: Sequence[str] = QUALITY_SENTENCES,
             reseed_offset: int = 1000) -> dict[str, Any]:
    """Score every weight path in `voices` (must include "fp32") on `sentences`; returns a JSON-ready report.

    Sentence i uses seed `seed + i` on every path, so dropout masks are identical and only the weights differ.
    The entry "fp32-reseeded" is fp32 with seeds + `reseed_offset`: the spread one gets from dropout alone,
    the yardstick for every other difference. Summary per path: mean SIG/BAK/OVRL/P808, the OVRL difference to
    fp32, |frames − fp32 frames| (mean, max, as % of fp32), teacher-forced mel rel-L2 (mean, max), pass/fail.
    """
    if "fp32" not in voices:
        raise ValueError("evaluate needs the fp32 voice as the reference")
    all_ids = sentence_ids(sentences)
    fp32 = voices["fp32"]
    rate = int(fp32.sample_rate_hz)
    runs: list[tuple[str, Any, int]] = [("fp32", fp32, 0), ("fp32-reseeded", fp32, reseed_offset)]
    runs += [(name, v, 0) for name, v in voices.items() if name != "fp32"]
    per_path: dict[str, list[SentenceScore]] = {name: [] for name, _, _ in runs}
    seconds: dict[str, float] = {name: 0.0 for name, _, _ in runs}
    for i, ids in enumerate(all_ids):
        ref_frames = teacher_forced_frames(fp32.acoustic, ids, seed + i)
        ref_len = None
        for name, voice, offset in runs:
            t0 = time.perf_counter()
            mel, audio = render(voice, ids, seed + i + offset)
            seconds[name] += time.perf_counter() - t0
            ref_len = mel.shape[0] if name == "fp32" else ref_len
            tf = 0.0
            if offset == 0 and name != "fp32":
                tf = rel_l2(teacher_forced_frames(voice.acoustic, ids, seed + i, ref_frames), ref_frames)
            scores = dnsmos(audio, rate)
            per_path[name].append(SentenceScore(
                index=i, frames=int(mel.shape[0]), audio_s=len(audio) / rate, frames_delta=int(mel.shape[0] - ref_len),
                teacher_forced_rel_l2=tf, **scores,
            ))
            log.info("sentence %d %s: %d frames, OVRL %.3f, tf rel-L2 %.4f", i, name, mel.shape[0], scores["ovrl"], tf)
    ref_ovrl = _mean([s.ovrl for s in per_path["fp32"]])
    summary = {}
    for name, rows in per_path.items():
        ovrl = _mean([s.ovrl for s in rows])
        deltas = [abs(s.frames_delta) for s in rows]
        rel_len = [abs(s.frames_delta) / max(1, r.frames) for s, r in zip(rows, per_path["fp32"])]
        summary[name] = {
            "sig": _mean([s.sig for s in rows]), "bak": _mean([s.bak for s in rows]), "ovrl": ovrl,
            "p808": _mean([s.p808 for s in rows]), "ovrl_minus_fp32": ovrl - ref_ovrl,
            "frames_delta_abs_mean": _mean(deltas), "frames_delta_abs_max": int(max(deltas)),
            "frames_delta_max_pct": 100.0 * max(rel_len),
            "teacher_forced_rel_l2_mean": _mean([s.teacher_forced_rel_l2 for s in rows]),
            "teacher_forced_rel_l2_max": float(max(s.teacher_forced_rel_l2 for s in rows)),
            "audio_s": float(sum(s.audio_s for s in rows)), "synthesis_s": seconds[name],
            "passes_ovrl": bool(ovrl >= ref_ovrl - OVRL_TOLERANCE),
        }
    return {
        "sentences": list(sentences), "seed": seed, "reseed_offset": reseed_offset, "dnsmos_rate_hz": DNSMOS_RATE_HZ,
        "ovrl_tolerance": OVRL_TOLERANCE, "summary": summary,
        "per_sentence": {name: [asdict(s) for s in rows] for name, rows in per_path.items()},
    }


def format_report(report: dict[str, Any]) -> str:
    """The summary as a plain-text table."""
    head = (f"{'path':<14} {'SIG':>6} {'BAK':>6} {'OVRL':>6} {'P808':>6} {'ΔOVRL':>7} {'|Δframes| mean/max':>19} "
            f"{'tf rel-L2 mean/max':>19}  pass")
    lines = [head, "-" * len(head)]
    for name, s in report["summary"].items():
        lines.append(
            f"{name:<14} {s['sig']:6.3f} {s['bak']:6.3f} {s['ovrl']:6.3f} {s['p808']:6.3f} "
            f"{s['ovrl_minus_fp32']:+7.3f} "
            f"{s['frames_delta_abs_mean']:9.1f} / {s['frames_delta_abs_max']:<4d}    "
            f"{s['teacher_forced_rel_l2_mean']:8.4f} / {s['teacher_forced_rel_l2_max']:.4f}  "
            f"{'yes' if s['passes_ovrl'] else 'NO'}"
        )
    return "\n".join(lines)


def load_paths(voice: str, weights: Sequence[str], device: str = "cpu") -> dict[str, Any]:
    """fp32 plus each requested weight path of an installed voice (models.voices.bundle.load_voice)."""
    from models.voices.bundle import load_voice
    from models.voices.registry import VoiceNotFound

    out = {}
    for w in ["fp32", *[w for w in weights if w != "fp32"]]:
        try:
            out[w] = load_voice(voice, device=device, weights=w)
        except VoiceNotFound as exc:
            raise SystemExit(str(exc)) from exc  # names the install command: voxpool voices install NAME
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: python -m bench.quality --voice baker-zh --weights int8,bf16 --out bench-results/quality.json."""
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__)
    parser.add_argument("--voice", default="baker-zh")
    parser.add_argument("--weights", default="int8,bf16", help="fast paths to compare with fp32 (comma-separated)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    voices = load_paths(args.voice, [w.strip() for w in args.weights.split(",") if w.strip()])
    report = evaluate(voices, seed=args.seed)
    report["voice"] = args.voice
    sys.stdout.write(format_report(report) + "\n")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    failed = [n for n, s in report["summary"].items() if not s["passes_ovrl"]]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
