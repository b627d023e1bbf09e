"""How far float32 rounding alone moves each output of a stack, and the verdict rule built on it.

Why: a fixed absolute tolerance cannot tell rounding from a bug on trained models.  A
trained recurrent model amplifies rounding: a TF 1.9 character LSTM (``c`` ~50) converted
correctly was 1.7e-5 from the float64 reference at ``--steps 100`` and 3.8e-5 at 400, over the
1e-5 tolerance; loosening the tolerance would let real bugs through on tame models.  The answer
is to measure, for the model and inputs at hand, how much float32 rounding moves each output
(the *floor*), and to judge each difference against it.

The floor (:func:`floors`, :class:`PerturbedEngine`): the reference equations (cuDNN's, as
:mod:`gruconv.verify.reference.oracle` implements them in float64) evaluated in float32 with every weight and
every input (``x``, ``h0``, ``c0``) moved by a random whole number of float32 ulps in
``[-ulps, ulps]``, over ``seeds`` seeds; per output, the largest ``|perturbed32 - ref64|``.  It
combines the two things any correct float32 implementation is entitled to: storing its inputs
in float32 (1/2 ulp each) and evaluating the recurrence in float32 in its own order.

The rule (:func:`decide`): a check passes when ``|diff| <= tolerance`` (absolute, as before),
or ``<= rtol * max|ref|``, or ``<= k * floor``; the report says which bound admitted it.  The
defaults (:class:`gruconv.options.Bounds`' ``rtol`` and ``k``, :data:`DEFAULT_SEEDS`) come from the
measurements in ``docs/verdicts.md`` (2-core CPU, TensorFlow backend): on the trained fixtures
(``fixtures/trained``) the correct conversions (converted Keras 3 model on the CPU vs the float64
reference, 25/100/400 steps, weights-only layers alone included) were at most 1.5x their floor and 1.9e-6 of max|ref|;
every planted error (gate order, a transposed matrix, exchanged biases, one bias off by 1e-4
relative, the LSTM forget bias dropped, one layer rounded to float16) was at least 32x its floor
and 1.3e-5 of max|ref| on its most telling check.

Framework-free: NumPy only, so it runs wherever verify runs, before any Keras import.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import numpy as np

from ..model.canonical import GateParams, RNNStack

#: Seeds of the perturbed float32 run: the floor of 10 seeds was at most 1.8x that of 3 (2.5x that of 1)
#: on every trained fixture at 25 and 400 steps; 3 seeds of a 400-step stack take 0.1-1.8 s here.
DEFAULT_SEEDS = 3
DEFAULT_ULPS = 1
#: Elements perturbed per block (:func:`perturb`): 4 MiB of float32 values and 4 MiB of drawn steps.
PERTURB_BLOCK = 1 << 20

BOUNDS = ("tolerance", "rtol", "floor")


# --------------------------------------------------------------------------- float32 forward

def forward(stack: RNNStack, x, h0=None, seq_lengths=None, c0=None, dtype=np.float32) -> tuple:
    """cuDNN's equations evaluated in ``dtype``: :func:`gruconv.verify.reference.oracle.run_stack`, whose float64 run
    is the oracle (padded I/O, per-sequence lengths, backward direction from each sequence's last
    valid step).  ``x`` time-major ``(T, B, in)``; returns ``(y, hy, cy)``."""
    from .reference.oracle import run_stack

    return run_stack(stack, x, h0, seq_lengths, c0, dtype=dtype)


# --------------------------------------------------------------------------- perturbation

def perturb(a, rng: np.random.Generator, ulps: int = DEFAULT_ULPS, dtype=np.float32):
    """``a`` rounded to ``dtype``, each element then moved by a random whole number of its own ulps in
    ``[-ulps, ulps]`` (None stays None)."""
    if a is None:
        return None
    v = np.asarray(a, dtype=dtype)
    out = np.empty(v.shape, dtype=v.dtype)
    flat_v, flat_out = v.reshape(-1), out.reshape(-1)
    # out = v + steps * spacing(|v|), one block of PERTURB_BLOCK elements at a time (a large model's floor
    # runs perturb 47 M weights each: no whole-size temporaries).  The steps are drawn as int32 blocks: the
    # same numbers, in the same order, as one int64 draw of the whole shape (NumPy's bounded draws of a
    # range under 2**32 take one 32-bit value per element whatever the output type, and a split draw
    # continues the stream; ``tests/verify/test_verify_speed.py``), half the bytes.  Bit-identical to the
    # expression: steps * spacing is a small whole number times a power of two, exact in any precision
    # (so the steps in v's own dtype change nothing), and the sum is one rounding as before.
    block = np.empty(min(flat_v.size, PERTURB_BLOCK), dtype=v.dtype)
    for i in range(0, flat_v.size, PERTURB_BLOCK):
        src, dst = flat_v[i:i + PERTURB_BLOCK], flat_out[i:i + PERTURB_BLOCK]
        steps = block[:src.size]
        steps[...] = rng.integers(-ulps, ulps + 1, size=src.size, dtype=np.int32)
        _spacing_of_abs(src, dst)
        np.multiply(dst, steps, out=dst)
        np.add(dst, src, out=dst)
    return out


def runs(model, feed: list, seeds: int = DEFAULT_SEEDS) -> list:
    """An end-to-end reference's outputs under one-ulp perturbations, per seed: every float array of ``feed``
    and every weight of ``model`` (its ``perturbed(rng, perturb)``, one generator per seed, the feed's draws
    first) moved by :func:`perturb`, then ``model.restore()``.  The one floor loop of the original-model
    references (:mod:`gruconv.verify.graph`); a reference run in a child process runs it there
    (:func:`gruconv.tf.served.served_outputs`)."""
    out = []
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        moved = [perturb(a, rng, dtype=np.asarray(a).dtype) if np.asarray(a).dtype.kind == "f" else a for a in feed]
        out.append(model.perturbed(rng, perturb)(moved))
    model.restore()
    return out


def _spacing_of_abs(src: np.ndarray, dst: np.ndarray) -> None:
    """``dst = np.spacing(np.abs(src))``, for float32 from the exponent bits: the ulp above ``|v|`` is
    ``2**(e - 150)`` for biased exponent ``e >= 1`` (a float with exponent ``e - 23`` and no mantissa when
    ``e >= 24``, else the subnormal bit ``e - 1``) and ``2**-149`` for ``e == 0``; ``e >= 254`` (the
    float32 maximum's spacing is inf, NaN/inf's NaN) goes to ``np.spacing`` itself.  Bit-identical to
    ``np.spacing(np.abs(v))`` on all 2**32 float32 bit patterns (checked by hand, NumPy 2, 2026-11-28;
    ``tests/verify/test_verify_speed.py`` checks every exponent); 2.0 ms instead of 11.2 ms per Mi elements here
    (``np.spacing`` calls ``nextafter`` per element), about 1 s of the large model's floors."""
    if src.dtype != np.float32:
        np.abs(src, out=dst)
        np.spacing(dst, out=dst)
        return
    e = (src.view(np.uint32) >> np.uint32(23)) & np.uint32(0xFF)
    out = dst.view(np.uint32)
    np.subtract(e, np.uint32(23), out=out)
    np.left_shift(out, np.uint32(23), out=out)
    small = e < 24
    if small.any():
        out[small] = np.uint32(1) << (np.maximum(e[small], np.uint32(1)) - np.uint32(1))
    big = e >= 254
    if big.any():
        with np.errstate(over="ignore", invalid="ignore"):
            dst[big] = np.spacing(np.abs(src[big]))


def perturb_stack(stack: RNNStack, rng: np.random.Generator, ulps: int = DEFAULT_ULPS,
                  dtype=np.float32) -> RNNStack:
    """A copy of ``stack`` whose every weight is moved by up to ``ulps`` ulps of ``dtype``."""
    params = [GateParams(*(perturb(a, rng, ulps, dtype) for a in dataclasses.astuple(p))) for p in stack.params]
    return RNNStack(stack.name, stack.shape, params, dict(stack.provenance))


class PerturbedEngine:
    """A stand-in for verify's reference engine whose runs are the perturbed float32 forward.

    Same call as ``verify._Engine.run`` (``run(stack, x_tm, h0, lengths, opaque, c0) -> (y, hy, y, hy)``,
    final cell states left in ``cy``/``cy64``), so the code that assembles a layer's outputs from
    reference runs (Bidirectional merges, ``go_backwards``, ``return_state``) can be rerun unchanged
    with this engine to give the same outputs under float32 rounding.  ``opaque`` is ignored: the
    stack's canonical weights are what is perturbed."""

    kind = "perturbed-float32"
    #: No cuDNN buffer: the reference's run packs the original arrays into the buffer the original layer
    #: gave cuDNN and reads them back by the golden-tested layout (:func:`gruconv.verify.graph._original_buffer`);
    #: that round trip is a copy of the same values in the same canonical order, so a perturbed run takes
    #: the canonical arrays directly (the large model: 18 buffer repacks of 6-9 M weights each, ~0.8 s and
    #: two buffer-sized copies per run; ``scripts/verdict_parity.py``: reports unchanged).
    uses_buffer = False

    def __init__(self, seed: int, ulps: int = DEFAULT_ULPS, dtype=np.float32):
        self.rng = np.random.default_rng([0x5E75, seed])
        self.ulps, self.dtype = ulps, np.dtype(dtype)
        self.cy = self.cy64 = None
        self.info: dict = {}

    def run(self, stack, x_tm, h0=None, lengths=None, opaque=None, c0=None) -> tuple:
        p = perturb_stack(stack, self.rng, self.ulps, self.dtype)
        y, hy, cy = forward(p, perturb(x_tm, self.rng, self.ulps, self.dtype),
                            perturb(h0, self.rng, self.ulps, self.dtype), lengths,
                            perturb(c0, self.rng, self.ulps, self.dtype), self.dtype)
        y, hy = y.astype(np.float64), hy.astype(np.float64)
        self.cy = self.cy64 = None if cy is None else cy.astype(np.float64)
        return y, hy, y, hy


def floors(run: Callable[[object], Sequence], ref64: Sequence, *, seeds: int = DEFAULT_SEEDS,
           ulps: int = DEFAULT_ULPS, dtype=np.float32) -> list:
    """Per output, the largest ``max|out - ref64|`` over ``seeds`` perturbed float32 runs.

    ``run(engine)`` returns the outputs (in the order of ``ref64``) computed with ``engine``, a
    :class:`PerturbedEngine`; ``ref64`` are the float64 reference outputs.  Generic over how the
    outputs are assembled: a TF1 stack's ``[y, hy[i], cy[i], ...]`` or a Keras layer's outputs.

    The seeds run one after another: on threads (each seed has its own generator, so the same draws) the
    large model's floors took 2.2 s instead of 2.3 s on 2 cores and its peak RSS rose by 118 MiB, two
    perturbed directions held at once (``docs/benchmarks.md``)."""
    ref = [np.asarray(r, dtype=np.float64) for r in ref64]
    out = [0.0] * len(ref)
    runs = (run(PerturbedEngine(seed, ulps, dtype)) for seed in range(seeds))  # one seed's outputs at a time
    for got in runs:
        for i, (g, r) in enumerate(zip(got, ref)):
            d = np.abs(np.asarray(g, dtype=np.float64) - r)
            d = d[np.isfinite(d)]
            out[i] = max(out[i], float(d.max()) if d.size else 0.0)
    return out


def stack_floors(stack: RNNStack, x_tm, h0=None, seq_lengths=None, c0=None, **kw) -> dict:
    """Floors of a whole stack's outputs: ``{"y": f, "hy": [f per pseudo-layer], "cy": [...] or None}``.
    (The TF1 check list: output sequence, then final state h (and c) per layer and direction.)"""
    from .reference.oracle import run_stack

    y64, hy64, cy64 = run_stack(stack, x_tm, h0, seq_lengths, c0)
    P = stack.shape.num_pseudo_layers
    ref = [y64] + [hy64[i] for i in range(P)] + ([cy64[i] for i in range(P)] if cy64 is not None else [])

    def run(engine):
        y, hy, _, _ = engine.run(stack, x_tm, h0, seq_lengths, None, c0)
        return [y] + [hy[i] for i in range(P)] + ([engine.cy[i] for i in range(P)] if engine.cy is not None else [])

    f = floors(run, ref, **kw)
    return {"y": f[0], "hy": f[1:1 + P], "cy": f[1 + P:] if cy64 is not None else None}


# --------------------------------------------------------------------------- the verdict rule

@dataclass(frozen=True)
class Decision:
    """The verdict of one check.  ``bound``: the bound that admitted the difference (the first of
    tolerance, rtol, floor that holds), or ``none`` when none did; ``limits``: each bound's value
    (``floor`` = k x the measured floor), all recorded so a report can show them."""

    passed: bool
    bound: str
    limits: dict
    reason: str = ""


def decide(max_abs: float, magnitude: float, floor: Optional[float], bounds, *, nonfinite: int = 0) -> Decision:
    """Pass when ``max_abs <= tolerance``, or ``<= rtol * magnitude`` (``magnitude`` = max |ref| of the
    check), or ``<= k * floor`` (``bounds``: a :class:`gruconv.options.Bounds`).  NaN/Inf outputs never
    pass.  A missing floor (None) drops that bound."""
    tolerance, rtol, k = bounds.tolerance, bounds.rtol, bounds.k
    limits = {"tolerance": float(tolerance), "rtol": float(rtol * magnitude),
              "floor": None if floor is None else float(k * floor)}
    if nonfinite:
        return Decision(False, "none", limits,
                        f"{nonfinite} NaN/Inf value(s) among the outputs: never a pass, whatever the difference")
    if not np.isfinite(max_abs):
        return Decision(False, "none", limits, "difference is not finite")
    for name in BOUNDS:
        lim = limits[name]
        if lim is not None and max_abs <= lim:
            return Decision(True, name, limits)
    best = max(v for v in limits.values() if v is not None)
    return Decision(False, "none", limits,
                    f"max abs difference {max_abs:.3g} over every bound (tolerance {tolerance:g}, "
                    f"rtol {rtol:g} x {magnitude:.3g}, {k:g} x floor "
                    f"{'-' if floor is None else f'{floor:.3g}'}; loosest {best:.3g})")
