"""Comparison and verdict rules: one compared output (:class:`Check`), the report
(:class:`VerifyReport`), and :func:`compare` (max abs / rel error, the float16 tolerance floor,
NaN/Inf never a pass, the reference's own float64 error shown as the noise floor)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np

FLOAT16_TOLERANCE_FLOOR = 4e-3  # float16 rounding of a tanh output in [-1, 1] is ~5e-4 per step


@dataclass
class Check:
    """One compared output.  ``device``: where the converted side ran (``cpu``, ``gpu strict``,
    ``gpu default``); ``counts``: whether it decides the verdict (default-math GPU rows show the
    precision cost of a deployment setting and are informational); ``reason``: why it failed,
    in words."""

    name: str
    max_abs: float
    max_rel: float
    tolerance: float
    passed: bool
    reference_error: Optional[float]
    shape: tuple
    nonfinite: int = 0
    device: str = "cpu"
    counts: bool = True
    reason: str = ""


@dataclass
class VerifyReport:
    input: str
    converted: Optional[str]
    reference: str
    reference_reason: str
    tolerance: float
    math_mode: str
    seed: int
    batch: int
    steps: int
    checks: list = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    nothing_to_convert: bool = False
    devices: list = field(default_factory=list)      # [{device, math, ran, reason, kernels}]

    @property
    def passed(self) -> bool:
        if self.nothing_to_convert:
            return True
        counted = [c for c in self.checks if c.counts]
        return bool(counted) and all(c.passed for c in counted)

    def to_json(self) -> dict:
        out = asdict(self)
        out["passed"] = self.passed
        out["checks"] = [dict(asdict(c), shape=list(c.shape)) for c in self.checks]
        return out


def compare(name: str, got, ref, ref64, tolerance: float, dtype: str) -> Check:
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return Check(name, float("inf"), float("inf"), tolerance, False, None, tuple(got.shape),
                     reason=f"shape {tuple(got.shape)} where the reference has {tuple(ref.shape)}")
    both_nan = np.isnan(got) & np.isnan(ref)
    diff = np.where(both_nan, 0.0, np.abs(got - ref))
    nonfinite = int(np.count_nonzero(~np.isfinite(got)) + np.count_nonzero(~np.isfinite(ref)))
    max_abs = float(np.max(diff)) if diff.size else 0.0
    if np.isnan(max_abs):
        max_abs = float("inf")
    scale = float(np.max(np.abs(ref[np.isfinite(ref)]))) if np.isfinite(ref).any() else 0.0
    max_rel = max_abs / scale if scale > 0 else max_abs
    tol = max(tolerance, FLOAT16_TOLERANCE_FLOOR) if dtype == "float16" else tolerance
    floor = None
    if ref64 is not None:
        r64 = np.asarray(ref64, dtype=np.float64)
        floor = float(np.nanmax(np.abs(ref - r64))) if r64.size else 0.0
    passed = bool(max_abs <= tol) and nonfinite == 0
    if nonfinite:
        reason = f"{nonfinite} NaN/Inf value(s) among the outputs: never a pass, whatever the difference"
    elif not passed:
        reason = f"max abs difference {max_abs:.3g} over the tolerance {tol:g}"
    else:
        reason = ""
    return Check(name, max_abs, max_rel, tol, passed, floor, tuple(got.shape), nonfinite, reason=reason)
