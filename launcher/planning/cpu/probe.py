"""The CPU probe's result and the oneDNN ISA advice drawn from it (pure).

The probe (``launcher/workloads/cpu_probe.py``, cached by :mod:`launcher.execution.checks.cpu`)
times MindSpore's convolution kernels under oneDNN's default and under each ISA cap; its JSON is
parsed by :func:`parse_probe` into a :class:`CpuProbe`, and :func:`isa_advice` says whether a cap
(``ONEDNN_MAX_CPU_ISA``) is at least :data:`MIN_GAIN` times faster than the default.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.errors import MsLaunchError

MIN_GAIN = 1.5
PROBE_SCHEMA = 1


class ProbeError(MsLaunchError):
    """A CPU probe result that cannot be read."""


@dataclass(frozen=True)
class KernelTiming:
    """One kernel under one ISA setting: the oneDNN implementation and its time."""

    impl: str
    ms: float
    gflops: float

    @property
    def is_reference(self) -> bool:
        """oneDNN's reference (unoptimised) kernel ran."""
        return bool(re.search(r"(^|[:+])ref(:|$)", self.impl))


@dataclass(frozen=True)
class ProbeVariant:
    """The kernels under one ``ONEDNN_MAX_CPU_ISA`` value (None: oneDNN's default)."""

    isa: Optional[str]
    kernels: Mapping[str, KernelTiming]
    error: Optional[str] = None


@dataclass(frozen=True)
class CpuProbe:
    """A parsed probe result (see ``launcher/workloads/cpu_probe.py`` for the JSON)."""

    key: str
    host: str
    cpu_model: str
    mindspore: str
    onednn: str
    onednn_isa: str
    numpy_gflops: Optional[float]
    seconds: float
    variants: Tuple[ProbeVariant, ...]

    @property
    def default(self) -> Optional[ProbeVariant]:
        for v in self.variants:
            if v.isa is None and v.error is None:
                return v
        return None


def _num(d: Mapping[str, Any], name: str, where: str, source: str) -> float:
    value = d.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ProbeError(f"must be a number >= 0, got {value!r}", path=source, field=f"{where}.{name}")
    return float(value)


def parse_probe(text: str, source: str = "<probe>") -> CpuProbe:
    """Parse the probe's JSON output.

    Raises:
        ProbeError: not JSON, another schema version, or a missing/ill-typed field (named).
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ProbeError(f"not a CPU probe result ({exc})", path=source) from None
    if not isinstance(data, dict):
        raise ProbeError("not a CPU probe result (a JSON object expected)", path=source)
    if data.get("version") != PROBE_SCHEMA:
        raise ProbeError(f"probe schema {data.get('version')!r}, expected {PROBE_SCHEMA}", path=source, field="version")
    key = data.get("key")
    if not isinstance(key, str) or not key:
        raise ProbeError("no key", path=source, field="key")
    raw_facts = data.get("facts")
    facts = raw_facts if isinstance(raw_facts, dict) else {}
    raw_variants = data.get("variants")
    if not isinstance(raw_variants, list) or not raw_variants:
        raise ProbeError("no variants", path=source, field="variants")
    variants: List[ProbeVariant] = []
    for i, v in enumerate(raw_variants):
        where = f"variants[{i}]"
        if not isinstance(v, dict):
            raise ProbeError(f"{where} is not an object", path=source, field=where)
        isa = v.get("isa")
        if isa is not None and not isinstance(isa, str):
            raise ProbeError(f"{where}.isa must be a string or null", path=source, field=f"{where}.isa")
        if v.get("error"):
            variants.append(ProbeVariant(isa, {}, str(v["error"])))
            continue
        kernels = v.get("kernels")
        if not isinstance(kernels, dict) or not kernels:
            raise ProbeError(f"{where} has no kernels", path=source, field=f"{where}.kernels")
        parsed: Dict[str, KernelTiming] = {}
        for name, k in kernels.items():
            kw = f"{where}.kernels.{name}"
            if not isinstance(k, dict):
                raise ProbeError(f"{kw} is not an object", path=source, field=kw)
            ms = _num(k, "ms", kw, source)
            if ms <= 0:
                raise ProbeError(f"{kw}.ms must be > 0", path=source, field=f"{kw}.ms")
            parsed[name] = KernelTiming(str(k.get("impl", "")), ms, _num(k, "gflops", kw, source))
        variants.append(ProbeVariant(isa, parsed))
    numpy_gflops = data.get("numpy_gflops")
    return CpuProbe(
        key=key,
        host=str(facts.get("host", "")),
        cpu_model=str(facts.get("cpu_model", "")),
        mindspore=str(facts.get("mindspore", "")),
        onednn=str(data.get("onednn", "")),
        onednn_isa=str(data.get("onednn_isa", "")),
        numpy_gflops=float(numpy_gflops)
        if isinstance(numpy_gflops, (int, float)) and not isinstance(numpy_gflops, bool)
        else None,
        seconds=float(data.get("seconds", 0.0)) if isinstance(data.get("seconds"), (int, float)) else 0.0,
        variants=tuple(variants),
    )


@dataclass(frozen=True)
class IsaAdvice:
    """What the probe says about oneDNN's ISA: ``isa`` to set (None: leave the default)."""

    isa: Optional[str]
    gain: float
    summary: str


#: CPU flag prefixes of ISAs above AVX2 that oneDNN dispatches to.
ABOVE_AVX2 = ("avx512", "amx", "avx_vnni", "avx_ne_convert", "avx_ifma")


def cap_can_matter(flags: Sequence[str]) -> Optional[str]:
    """None when an ``ONEDNN_MAX_CPU_ISA`` cap could change oneDNN's kernels on a CPU with
    ``flags`` (so only the probe can tell), else why it cannot: without an ISA above AVX2,
    oneDNN's default already stops at the probe's lowest cap (AVX2), and the caps it tries
    (AVX2, AVX512_CORE) choose the same kernels as the default."""
    if any(f.startswith(ABOVE_AVX2) for f in flags):
        return None
    return "this CPU has no ISA above AVX2 (no AVX-512, AVX-VNNI or AMX), so no cap can change oneDNN's kernels"


def _gain(default: ProbeVariant, other: ProbeVariant) -> float:
    """Geometric mean over common kernels of default time / other time; 1.0 when oneDNN ran the
    same implementation of every kernel under both (then a difference is only noise, e.g. a
    cap at the CPU's own top ISA on a loaded machine)."""
    common = [k for k in default.kernels if k in other.kernels]
    if not common or all(default.kernels[k].impl == other.kernels[k].impl for k in common):
        return 1.0
    return math.exp(sum(math.log(default.kernels[k].ms / other.kernels[k].ms) for k in common) / len(common))


def _conv_text(k: Optional[KernelTiming]) -> str:
    if k is None:
        return "?"
    return f"{k.gflops:.1f} GFLOPS, {k.impl or 'implementation unknown'}"


def isa_advice(probe: CpuProbe, min_gain: float = MIN_GAIN) -> IsaAdvice:
    """Pick the ISA cap to set from a probe: the fastest variant if it beats the default by
    ``min_gain`` (geometric mean over kernels), else None. ``summary`` is one line for people."""
    default = probe.default
    if default is None:
        return IsaAdvice(None, 1.0, "the CPU probe could not time oneDNN's default; nothing set")
    best: Optional[ProbeVariant] = None
    best_gain = 0.0
    for v in probe.variants:
        if v.isa is None or v.error is not None:
            continue
        g = _gain(default, v)
        if g > best_gain:
            best, best_gain = v, g
    conv = default.kernels.get("conv")
    if best is not None and best_gain >= min_gain:
        what = (
            "run oneDNN's reference kernel here"
            if conv is not None and conv.is_reference
            else "are slow under oneDNN's default ISA here"
        )
        return IsaAdvice(
            best.isa,
            best_gain,
            f"MindSpore CPU convolutions {what} ({_conv_text(conv)}); with ONEDNN_MAX_CPU_ISA={best.isa}: "
            f"{_conv_text(best.kernels.get('conv'))} ({best_gain:.1f}x over the probe's kernels)",
        )
    tried = ", ".join(
        f"{v.isa} {_gain(default, v):.2f}x" for v in probe.variants if v.isa is not None and v.error is None
    )
    return IsaAdvice(
        None,
        best_gain if best is not None else 1.0,
        f"oneDNN's default is fast here (conv {_conv_text(conv)}); capping the ISA gains less than {min_gain:g}x"
        + (f" ({tried})" if tried else " (no other ISA to try)"),
    )
