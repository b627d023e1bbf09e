"""Comparison and verdict rules: one compared output (:class:`Check`), the report
(:class:`VerifyReport`), and :func:`compare` (max abs / rel error, the float16 tolerance floor,
NaN/Inf never a pass, the reference's own float64 error shown beside it).

The verdict (``docs/verdicts.md``): a check passes when its max |diff| is within the
absolute ``tolerance``, or ``rtol`` of the reference's magnitude, or ``k`` times the measured
sensitivity floor (how far float32 rounding alone moves that output:
:func:`gruconv.verify.floor.floors`); :func:`gruconv.verify.floor.decide` says which bound admitted
it, and every row records the bound, the floor and all three limits."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

import numpy as np

from ..options import Bounds
from .floor import decide, floors

FLOAT16_TOLERANCE_FLOOR = 4e-3
#: An int8 ``.tflite``'s default bound (max abs against the float model it was quantized from): measured
#: int8 errors of unrolled GRU/LSTM models were 0.003-0.14 (``docs/edge.md``); the user sets theirs.
INT8_TOLERANCE = 0.05  # float16 rounding of a tanh output in [-1, 1] is ~5e-4 per step

#: Most points a check's per-step curve keeps (a 1e6-step verify would otherwise put 1e6 floats in
#: the JSON report; 4096 is more than an SVG plot's pixels across)
PER_STEP_POINTS = 4096


def per_step_errors(diff: np.ndarray) -> tuple:
    """``(errors, stride)``: max |diff| per time step of a compared output, over batch and features.

    The outputs compared here are batch-major (a sequence is ``(batch, time, features)``: Keras's
    layout, and :mod:`.stacks` transposes the reference's time-major runs to it), so the time axis
    is axis 1 of a 3-D or higher output; a final state or last output (2-D) has none and is one
    point.  Values keep 3 significant digits (a log-scale plot needs no more); NaN (one side NaN)
    is shown as inf, as :func:`compare` counts it.  Above :data:`PER_STEP_POINTS` steps each point
    is the max over ``stride`` consecutive steps."""
    if diff.size == 0:
        return [], 1
    if diff.ndim < 3:
        steps = np.array([np.max(diff)])
    else:
        steps = np.max(np.moveaxis(diff, 1, 0).reshape(diff.shape[1], -1), axis=1)
    stride = 1
    if steps.size > PER_STEP_POINTS:
        stride = -(-steps.size // PER_STEP_POINTS)
        pad = (-steps.size) % stride
        steps = np.max(np.pad(steps, (0, pad)).reshape(-1, stride), axis=1)
    steps = np.where(np.isnan(steps), np.inf, steps)
    return [float(f"{v:.3g}") for v in steps.tolist()], stride


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
    #: which bound admitted the difference: ``tolerance``, ``rtol``, ``floor``, or ``none`` (a failure)
    bound: Optional[str] = None
    #: the measured sensitivity floor of this output (None: not measured)
    floor: Optional[float] = None
    #: max |ref| of this output (what ``rtol`` multiplies)
    magnitude: Optional[float] = None
    #: every bound's value: {"tolerance": t, "rtol": rtol x magnitude, "floor": k x floor or None}
    limits: dict = field(default_factory=dict)
    #: the cuDNN algorithm whose run of the original this row was compared with (the closest of
    #: those cuDNN offers for the shape: :meth:`gruconv.verify.engines.Engine.variants`); None for the
    #: float64 oracle
    reference_algorithm: Optional[str] = None
    #: max |diff| against each cuDNN algorithm's run: {"standard": d, "persist_static": d, ...}
    by_algorithm: dict = field(default_factory=dict)
    #: max |diff| per time step over batch and features (:func:`per_step_errors`): the curve of the
    #: HTML report (:mod:`gruconv.report_html`), where rounding that grows with the sequence reads
    #: differently from a wrong gate (wrong from step 0); one point for an output without a time axis
    per_step: list = field(default_factory=list)
    #: steps per point of ``per_step`` (1 up to :data:`PER_STEP_POINTS` steps; above, each point is
    #: the max over ``per_step_stride`` consecutive steps)
    per_step_stride: int = 1


@dataclass
class VerifyReport:
    """One verify run.  ``bounds``: the verdict's bounds, made once by :func:`gruconv.verify.verify` and
    read by :func:`judge`; the JSON keeps them where the report always had them (``tolerance`` after
    ``reference_reason``, ``rtol`` and ``floor_k`` after ``devices``)."""

    input: str
    converted: Optional[str]
    reference: str
    reference_reason: str
    bounds: Bounds
    math_mode: str
    seed: int
    batch: int
    steps: int
    checks: list = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    nothing_to_convert: bool = False
    devices: list = field(default_factory=list)      # [{device, math, ran, reason, kernels}]
    #: an int8 file's bound against the float model (``--int8-tolerance``; None: :data:`INT8_TOLERANCE`)
    int8_tolerance: Optional[float] = None
    floor_seconds: float = 0.0                        # time spent measuring floors (all devices)

    @property
    def passed(self) -> bool:
        if self.nothing_to_convert:
            return True
        counted = [c for c in self.checks if c.counts]
        return bool(counted) and all(c.passed for c in counted)

    def to_json(self) -> dict:
        out = {}
        for key, value in asdict(self).items():
            if key == "bounds":
                out["tolerance"] = self.bounds.tolerance
                continue
            if key == "int8_tolerance" and value is None:  # only where asked for (an int8 .tflite)
                continue
            out[key] = value
            if key == "devices":
                out["rtol"], out["floor_k"] = self.bounds.rtol, self.bounds.k
        out["passed"] = self.passed
        out["checks"] = [dict(asdict(c), shape=list(c.shape)) for c in self.checks]
        return out


def compare(name: str, got, ref, ref64, bounds: Bounds, dtype: str, floor: Optional[float] = None) -> Check:
    """One output compared: ``got`` (converted) vs ``ref`` (the reference's), judged by
    :func:`gruconv.verify.floor.decide` with ``bounds`` (a float16 output's tolerance raised to
    :data:`FLOAT16_TOLERANCE_FLOOR`) and ``floor`` (this output's measured sensitivity floor; None drops
    the floor bound).  ``ref64``: the float64 oracle's output, for the "ref vs f64"
    column (None where the reference has no float64 twin)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    tol = max(bounds.tolerance, FLOAT16_TOLERANCE_FLOOR) if dtype == "float16" else bounds.tolerance
    if got.shape != ref.shape:
        return Check(name, float("inf"), float("inf"), tol, False, None, tuple(got.shape),
                     reason=f"shape {tuple(got.shape)} where the reference has {tuple(ref.shape)}",
                     bound="none", floor=floor)
    both_nan = np.isnan(got) & np.isnan(ref)
    diff = np.where(both_nan, 0.0, np.abs(got - ref))
    nonfinite = int(np.count_nonzero(~np.isfinite(got)) + np.count_nonzero(~np.isfinite(ref)))
    max_abs = float(np.max(diff)) if diff.size else 0.0
    if np.isnan(max_abs):
        max_abs = float("inf")
    scale = float(np.max(np.abs(ref[np.isfinite(ref)]))) if np.isfinite(ref).any() else 0.0
    max_rel = max_abs / scale if scale > 0 else max_abs
    ref_err = None
    if ref64 is not None:
        r64 = np.asarray(ref64, dtype=np.float64)
        ref_err = float(np.nanmax(np.abs(ref - r64))) if r64.size else 0.0
    d = decide(max_abs, scale, floor, dataclasses.replace(bounds, tolerance=tol), nonfinite=nonfinite)
    per_step, stride = per_step_errors(diff)
    return Check(name, max_abs, max_rel, tol, d.passed, ref_err, tuple(got.shape), nonfinite, reason=d.reason,
                 bound=d.bound, floor=None if floor is None else float(floor), magnitude=scale, limits=d.limits,
                 per_step=per_step, per_step_stride=stride)


def floor_cache(engine) -> dict:
    """Floors measured with this reference engine, by inputs (one verify run: kept across its device runs)."""
    cache = getattr(engine, "floor_cache", None)
    if cache is None:
        cache = engine.floor_cache = {}
    return cache


def measure_floors(report: VerifyReport, run, ref64, key=None, cache: Optional[dict] = None) -> list:
    """:func:`gruconv.verify.floor.floors` of ``run`` (the outputs assembled from a reference engine, in
    the order of ``ref64``), its time added to ``report.floor_seconds`` (the cost the report states).

    ``key`` (a tuple naming the check group and the arrays it is fed) and ``cache`` let a later device
    run (``--device both``: cpu, gpu strict, gpu default) reuse a floor measured on the same inputs."""
    if cache is not None and key is not None:
        import hashlib

        h = hashlib.sha1()
        for part in key:
            if part is None:
                h.update(b"-")
            elif isinstance(part, np.ndarray):
                h.update(str((part.dtype, part.shape)).encode())
                h.update(np.ascontiguousarray(part).tobytes())
            else:
                h.update(repr(part).encode())
        digest = h.hexdigest()
        if digest in cache:
            return cache[digest]
    t0 = time.perf_counter()
    out = floors(run, ref64)
    report.floor_seconds += time.perf_counter() - t0
    if cache is not None and key is not None:
        cache[digest] = out
    return out


def judge(report: VerifyReport, name: str, got, ref, ref64, dtype: str, floor, alternates=None) -> Check:
    """:func:`compare` with the report's bounds, against the reference's run
    ``ref`` (cuDNN's standard algorithm, or the float64 oracle) and, when the row is not within
    ``k`` x floor of it, against the closest of cuDNN's other algorithms: ``alternates`` () ->
    {algorithm: output} or None (:meth:`ReferenceVariants.at`, run only then: a persistent kernel
    costs a run, and the dynamic one a run-time compilation).  The trigger is the floor bound, not
    the verdict, so that a row the absolute tolerance would admit at 40 x the floor (torch's kernel
    at 8 steps) is still shown matching its kernel's run, not merely within 1e-5.

    Why the closest: each cuDNN algorithm is real cuDNN, and a framework picks one for the converted
    model that the reference does not know (torch: ``persist_static_small_h`` for small layers).  A
    correct conversion run by that algorithm matches it to the last bit; a planted error is off
    every algorithm's run by the error itself, so choosing among them hides nothing bigger than
    the algorithms' own disagreement (``docs/verdicts.md``)."""
    best = compare(name, got, ref, ref64, report.bounds, dtype, floor)
    within_floor = best.limits.get("floor") is not None and best.max_abs <= best.limits["floor"]
    others = alternates() if (alternates is not None and not within_floor) else None
    if not others:
        return best
    by = {"standard": best.max_abs}
    algo = "standard"
    for other, r in others.items():
        c = compare(name, got, r, ref64, report.bounds, dtype, floor)
        by[other] = c.max_abs
        if c.max_abs < best.max_abs:
            best, algo = c, other
    best.reference_algorithm, best.by_algorithm = algo, by
    return best


class ReferenceVariants:
    """Per output of ``run(engine)`` (in its order), {algorithm: output} of cuDNN's other algorithms
    (:meth:`gruconv.verify.engines.Engine.variants`), run once, on first use: only when a row of the
    check group is not within ``k`` x floor of the standard algorithm (:func:`judge`), and never for
    the informational default-math GPU rows (TF32 is over every bound whatever the algorithm).  Nothing for the float64 oracle.  An
    algorithm cuDNN refuses for the shape (``persist_static_small_h`` above its hidden-size limit, the
    persistent ones in float64, ``persist_dynamic`` without NVRTC) is left out and named in
    ``engine.info["cudnn_algorithms"]``."""

    def __init__(self, engine, run):
        from .run import CURRENT_RUN

        self.engine, self.run = engine, run
        self.wanted = bool(engine.variants()) and CURRENT_RUN.get()[1] != "default"
        self._outs: Optional[list] = None

    def all(self) -> list:
        if self._outs is None:
            self._outs = self._measure() if self.wanted else []
        return self._outs

    def at(self, i: int):
        """The lazy alternates of output ``i`` for :func:`judge` (None when there are none to run)."""
        if not self.wanted:
            return None
        return lambda: (self.all()[i] if i < len(self.all()) else None)

    def _measure(self) -> list:
        from ..errors import GruconvError  # CudaCallError (NOT_SUPPORTED) among them

        out: list = []
        ran = self.engine.info.setdefault("cudnn_algorithms", {"standard": "reference"})
        for name, eng in self.engine.variants():
            try:
                outs = self.run(eng)
            except GruconvError as e:
                ran.setdefault(name, f"not offered here: {str(e).splitlines()[0][:120]}")
                continue
            ran[name] = "ran"
            if not out:
                out = [{} for _ in outs]
            for d, o in zip(out, outs):
                d[name] = o
        return out
