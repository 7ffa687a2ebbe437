"""What the CPU computes natively (Linux /proc/cpuinfo), read without importing torch."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

#: /proc/cpuinfo flags of native bfloat16 arithmetic: AVX-512 BF16 (dot products) and AMX BF16 (tile matmuls).
#: Without them oneDNN emulates bf16 through fp32 and a bf16 model runs slower than fp32.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The feature flags of the first CPU listed (empty when unknown, e.g. not Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
        except OSError:
            return frozenset()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


@lru_cache(maxsize=1)
def has_native_bf16() -> bool:
    """True when this CPU has native bf16 arithmetic (AVX-512 BF16 or AMX BF16)."""
    return any(flag in cpu_flags() for flag in BF16_FLAGS)
