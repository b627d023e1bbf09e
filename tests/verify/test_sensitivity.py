"""The sensitivity floor and the verdict rule (:mod:`gruconv.verify.floor`), on trained models.

Evidence for issue 19: a fixed absolute tolerance fails correct conversions of trained models
(amplified float32 rounding) or, loosened, lets bugs through.  These tests prove, on the trained
fixtures of ``fixtures/trained`` (character GRU/LSTM models trained on the README, written by
tf_keras's CuDNN layers and TF's SaveV2), that the default rule passes every correct conversion
and fails every planted error.  The measurement harness is ``scripts/measure_verdicts.py`` (the
same code produced the numbers of ``docs/verdicts.md``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from gruconv.options import Bounds
from gruconv.verify import floor as sensitivity
from gruconv.model.canonical import GateParams, RNNStack, StackShape
from gruconv.verify.reference.oracle import run_stack

ROOT = Path(__file__).resolve().parents[2]
TRAINED = ROOT / "fixtures" / "trained"
TOL = 1e-5  # verify's default --tolerance


def _harness():
    spec = importlib.util.spec_from_file_location("measure_verdicts", ROOT / "scripts" / "measure_verdicts.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("measure_verdicts", mod)
    spec.loader.exec_module(mod)
    return mod


H = _harness()


def _tf1_stack(name):
    from gruconv.readers.tf1 import reading

    doc = reading.read(TRAINED / f"{name}.tf1")
    (found,) = doc.stacks
    return found.stack


def _random_stack(cell="lstm", units=8, layers=2, bidir=True, seed=0, scale=0.5):
    rng = np.random.default_rng(seed)
    shape = StackShape(5, units, layers, bidir, "linear", "float32", cell)
    G = shape.gates
    params = []
    for layer in range(layers):
        for _ in range(shape.num_directions):
            inp = shape.layer_input_size(layer)
            params.append(GateParams(rng.uniform(-scale, scale, (G, units, inp)).astype(np.float32),
                                     rng.uniform(-scale, scale, (G, units, units)).astype(np.float32),
                                     rng.uniform(-scale, scale, (G, units)).astype(np.float32),
                                     rng.uniform(-scale, scale, (G, units)).astype(np.float32)))
    return RNNStack("s", shape, params)


# --------------------------------------------------------------------------- the floor itself

@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_forward_in_float64_is_the_oracle(cell):
    """The float32 forward used for the floor is the oracle's equations: run in float64 it equals
    :func:`gruconv.verify.reference.oracle.run_stack` (variable lengths, bidirectional, initial states)."""
    st = _random_stack(cell)
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (9, 3, 5))
    h0 = rng.uniform(-.5, .5, (4, 3, 8))
    c0 = rng.uniform(-.5, .5, (4, 3, 8)) if cell == "lstm" else None
    lengths = np.array([9, 4, 1])
    want = run_stack(st, x, h0, lengths, c0)
    got = sensitivity.forward(st, x, h0, lengths, c0, dtype=np.float64)
    for g, w in zip(got, want):
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=0, atol=1e-13)
    # and in float32 it differs from it by float32 rounding, no more
    got32 = sensitivity.forward(st, x, h0, lengths, c0)
    assert 0 < np.abs(got32[0] - want[0]).max() < 1e-5


def test_perturb_moves_by_whole_ulps():
    rng = np.random.default_rng(0)
    a = np.array([1.0, -3.0, 0.1, 1e-20, 0.0], np.float32)
    p = sensitivity.perturb(a, rng, ulps=1)
    assert p.dtype == np.float32
    assert np.all(np.abs(p.astype(np.float64) - a) <= np.spacing(np.abs(a)) * 1.0000001)
    moved = sensitivity.perturb(np.ones(1000, np.float32), rng, ulps=1)
    assert set(np.unique(moved - 1).tolist()) <= {-np.spacing(np.float32(1)), 0.0, float(np.spacing(np.float32(1)))}
    assert (moved != 1).sum() > 500  # two thirds move


def test_floors_positive_and_scale_with_ulps_and_length():
    """Floors are positive, grow with the size of the perturbation (1 -> 16 ulps) and, on the trained
    LSTM whose cell state integrates (c ~ 64 after 400 uniform steps), with the sequence length."""
    st = _tf1_stack("lstm2")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (400, 2, st.shape.input_size)).astype(np.float32)
    short = sensitivity.stack_floors(st, x[:25], seeds=2)
    long = sensitivity.stack_floors(st, x, seeds=2)
    big = sensitivity.stack_floors(st, x[:25], seeds=2, ulps=16)
    for f in (short, long, big):
        assert all(v > 0 for v in [f["y"], *f["hy"], *f["cy"]])
    assert max(long["cy"]) > 3 * max(short["cy"])       # |c| grows with time: so does its rounding
    # 16x the perturbation: the part of the floor that is not evaluation rounding grows (measured 10x on y, 3.6x on c)
    assert big["y"] > 4 * short["y"] and max(big["cy"]) > 2 * max(short["cy"])
    # floors of a tame random stack are float32-sized, far under the absolute tolerance
    tame = sensitivity.stack_floors(_random_stack(), rng.uniform(-1, 1, (25, 2, 5)))
    assert 1e-9 < tame["y"] < 1e-5


# --------------------------------------------------------------------------- the rule

def test_decide_reports_which_bound_admitted():
    d = sensitivity.decide(5e-6, 1.0, 1e-7, Bounds(tolerance=1e-5))
    assert d.passed and d.bound == "tolerance"
    d = sensitivity.decide(3e-5, 50.0, 1e-9, Bounds(tolerance=1e-5, rtol=1e-6))
    assert d.passed and d.bound == "rtol" and d.limits["rtol"] == pytest.approx(5e-5)
    d = sensitivity.decide(3e-5, 1.0, 1e-6, Bounds(tolerance=1e-5, rtol=1e-6, k=50))
    assert d.passed and d.bound == "floor" and d.limits["floor"] == pytest.approx(5e-5)
    d = sensitivity.decide(3e-5, 1.0, 1e-7, Bounds(tolerance=1e-5, rtol=1e-6, k=50))
    assert not d.passed and d.bound == "none" and "over every bound" in d.reason
    d = sensitivity.decide(0.0, 1.0, 1.0, Bounds(tolerance=1e-5), nonfinite=2)
    assert not d.passed and "NaN" in d.reason
    d = sensitivity.decide(3e-5, 1.0, None, Bounds(tolerance=1e-5, rtol=1e-6))
    assert not d.passed and d.limits["floor"] is None


# --------------------------------------------------------------------------- trained fixtures

def _verdicts(rows):
    return [sensitivity.decide(r["max_abs"], r["magnitude"], r["floor"], Bounds(tolerance=TOL)) for r in rows]


FIXTURES = ["gru2", "lstm2", "bilstm"]
PATHS = {"h5 in model": lambda f, t: H.keras_rows(f, t, sensitivity.DEFAULT_SEEDS),
         "h5 layer alone": lambda f, t: H.keras_rows(f, t, sensitivity.DEFAULT_SEEDS, alone=True),
         "weights-only": lambda f, t: H.weights_only_rows(f, t, sensitivity.DEFAULT_SEEDS),
         "tf1": lambda f, t: H.tf1_rows(f, t, sensitivity.DEFAULT_SEEDS)}
_CACHE: dict = {}


def _measure(fixture, path, steps):
    key = (fixture, path, steps)
    if key not in _CACHE:
        _CACHE[key] = PATHS[path](fixture, steps)
    return _CACHE[key]


@pytest.mark.slow
@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("fixture", FIXTURES)
def test_correct_conversions_pass_and_every_plant_fails(fixture, path):
    """Every trained fixture, converted by gruconv and run by Keras on the CPU, passes at the default
    rule at 100 steps; each planted error on the same layer fails.  Where the old fixed tolerance
    alone would have failed a correct check, the floor or rtol bound admitted it (and is named)."""
    rows, plants = _measure(fixture, path, 100)
    assert rows and plants
    for r, d in zip(rows, _verdicts(rows)):
        assert d.passed, (r["check"], r["max_abs"], r["floor"], d.reason)
        assert r["max_abs"] <= 2 * r["floor"] or r["max_abs"] <= TOL, r  # correct = at the rounding level
    caught = {}
    for p in plants:
        ds = _verdicts(p["rows"])
        assert not all(d.passed for d in ds), (fixture, path, p["plant"], [(r["check"], r["max_abs"], r["floor"])
                                                                           for r in p["rows"]])
        # margin over the rule's own new bounds (rtol, k x floor), whatever the user's --tolerance
        caught[p["plant"]] = max(r["max_abs"] / max(d.limits["rtol"], d.limits["floor"]) for r, d in zip(p["rows"], ds))
    cell = "gru" if fixture.startswith("gru") else "lstm"
    assert set(caught) == set(H.PLANTS[cell])
    assert min(caught.values()) > 3, caught


@pytest.mark.slow
def test_long_sequences_of_the_trained_lstm_pass_where_the_fixed_tolerance_fails():
    """Issue 19's symptom reproduced on lstm2 (c ~ 60 after 400 uniform steps): the converted TF1 stack
    is over 1e-5 on its cell state at --steps 400 (a fixed tolerance says FAIL), yet within the floor
    bound; the planted 1e-4-relative bias is still caught at that length."""
    rows, plants = _measure("lstm2", "tf1", 400)
    ds = _verdicts(rows)
    assert all(d.passed for d in ds)
    over = [(r, d) for r, d in zip(rows, ds) if r["max_abs"] > TOL]
    assert over and all(d.bound in ("rtol", "floor") for _, d in over)
    for p in plants:
        assert not all(d.passed for d in _verdicts(p["rows"])), p["plant"]


def test_plant_changes_what_it_says():
    """The planted errors are what their names say (so a pass would be a miss, not a no-op plant)."""
    rng = np.random.default_rng(0)
    Hn = 4
    w = [rng.normal(size=(3, 3 * Hn)).astype(np.float32), rng.normal(size=(Hn, 3 * Hn)).astype(np.float32),
         rng.normal(size=(2, 3 * Hn)).astype(np.float32)]
    for name in H.PLANTS["gru"]:
        k, r, b = H.plant(name, "gru", w)
        changed = [not np.array_equal(a, o) for a, o in zip((k, r, b), w)]
        assert any(changed), name
    k, r, b = H.plant("bias 1e-4 relative", "gru", w)
    rel = np.abs(b - w[2]) / np.abs(w[2])
    assert np.count_nonzero(rel) == Hn and rel.max() == pytest.approx(1e-4, rel=0.01)
