"""Verdict rules of ``verify`` (issue 12), on the CPU: what counts, what is only shown, what never passes.

The GPU rows themselves are exercised on a GPU machine (``tests/verify/test_gpu_path.py``); here the rules that
turn rows into a verdict and a report, and what a machine without a usable GPU says.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, assert_parity_failure, planted_error_copy
from gruconv import report
from gruconv.cli import main
from gruconv.verify import Check, VerifyReport
from gruconv.verify import compare as _compare
from gruconv.options import Bounds


def _report(*checks, bounds=Bounds(tolerance=1e-5)) -> VerifyReport:
    rep = VerifyReport(input="m.h5", converted=None, reference="oracle", reference_reason="requested",
                       bounds=bounds, math_mode="float64", seed=0, batch=2, steps=8)
    rep.checks.extend(checks)
    return rep


def _check(name, max_abs, *, device="cpu", counts=True, tol=1e-5):
    return Check(name, max_abs, max_abs, tol, max_abs <= tol, 0.0, (2, 8, 4), device=device, counts=counts)


def test_default_math_rows_are_shown_but_never_decide():
    rep = _report(_check("g: sequence", 1e-7), _check("g: sequence", 2e-7, device="gpu strict"),
                  _check("g: sequence", 3e-3, device="gpu default", counts=False))
    assert rep.passed
    text = report.verify_text(rep.to_json())
    assert "(info) over" in text and "parity: PASS (2/2 checks" in text
    rep.checks[1] = _check("g: sequence", 2e-5, device="gpu strict")  # strict GPU math does decide
    assert not rep.passed


def test_nonfinite_outputs_never_pass_even_when_equal():
    got = np.array([[np.nan, 1.0]])
    c = _compare("g: sequence", got, got.copy(), got.copy(), Bounds(1e-5), "float32")
    assert not c.passed and c.nonfinite == 2 and "never a pass" in c.reason
    assert not _report(c).passed


def test_float16_floor_is_applied_and_said():
    c = _compare("g: sequence", np.full((1, 2), 1e-3), np.zeros((1, 2)), np.zeros((1, 2)), Bounds(1e-5), "float16")
    assert c.passed and c.tolerance == pytest.approx(4e-3)
    text = report.verify_text(_report(c).to_json())
    assert "tolerance applied 0.004 (float16 checks use the float16 floor, not the requested 1e-05)" in text


def test_shape_mismatch_fails_with_a_reason():
    c = _compare("g: sequence", np.zeros((2, 3)), np.zeros((2, 4)), None, Bounds(1e-5), "float32")
    assert not c.passed and "shape (2, 3) where the reference has (2, 4)" in c.reason


def test_no_gpu_here_auto_says_why_and_gpu_refuses_in_one_line(tmp_path):
    src = str(FIXTURES / "keras" / "sequential.h5")
    res = CliRunner().invoke(main, ["verify", src, "--reference", "oracle", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert "note: GPU path not run: " in res.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert {c["device"] for c in data["checks"]} == {"cpu"}
    assert data["devices"] and data["devices"][0]["ran"] is False and data["devices"][0]["reason"]
    for device in ("gpu", "both"):  # asked for explicitly: refused in one line (issue 19); auto keeps the note
        res = CliRunner().invoke(main, ["verify", src, "--reference", "oracle", "--device", device])
        assert res.exit_code == 3
        assert res.output.count("gruconv: error:") == 1 and f"--device {device}: the " in res.output
        assert "parity" not in res.output  # nothing ran


def test_inputs_file_sets_batch_and_steps_in_the_report(tmp_path):
    src = FIXTURES / "keras" / "sequential.h5"
    x = np.random.default_rng(0).uniform(-1, 1, (5, 11, 6)).astype("float32")
    np.savez(tmp_path / "x.npz", x=x)
    res = CliRunner().invoke(main, ["verify", str(src), "--reference", "oracle", "--device", "cpu",
                                    "--inputs", str(tmp_path / "x.npz"), "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert (data["batch"], data["steps"]) == (5, 11)
    assert "inputs batch 5 x steps 11" in res.output


def test_bad_inputs_are_usage_errors_in_one_line(tmp_path):
    src = FIXTURES / "keras" / "time_distributed.h5"  # Embedding(20, 6): token ids 0..19
    np.savez(tmp_path / "ids.npz", x=np.full((2, 5), 25, dtype="int32"))
    res = CliRunner().invoke(main, ["verify", str(src), "--reference", "oracle", "--device", "cpu",
                                    "--inputs", str(tmp_path / "ids.npz")])
    assert res.exit_code == 2, res.output
    assert res.output.count("gruconv: error:") == 1 and "outside the Embedding vocabulary 0..19" in res.output
    np.savez(tmp_path / "shape.npz", x=np.zeros((2, 5, 7), dtype="float32"))
    res = CliRunner().invoke(main, ["verify", str(FIXTURES / "keras" / "sequential.h5"), "--reference", "oracle",
                                    "--device", "cpu", "--inputs", str(tmp_path / "shape.npz")])
    assert res.exit_code == 2 and "has shape (2, 5, 7)" in res.output


def test_a_parity_failure_says_so_on_stderr_once(tmp_path):
    """A converted file with one recurrent weight changed: exit 1, the table on stdout, one error line."""
    src = FIXTURES / "keras" / "sequential.h5"
    bad = planted_error_copy(src, tmp_path)
    res = CliRunner().invoke(main, ["verify", str(src), str(bad), "--reference", "oracle",
                                    "--device", "cpu"])
    assert_parity_failure(res)
    assert "parity: FAIL" in res.output
    assert res.output.count("gruconv: error:") == 1 and "parity FAIL, " in res.output


# --------------------------------------------------------------------------- trained models (issue 19)
#
# The verdict rule wired into verify: every trained fixture (fixtures/trained: character GRU/LSTM models
# trained on the README, written by tf_keras's CuDNN layers and TF's SaveV2) verifies at default settings
# through the CLI, whole model, weights-only file without --config, and TF1 checkpoint, and every planted
# conversion error in the converted file fails with exit 1.

import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

TRAINED = Path(__file__).resolve().parents[2] / "fixtures" / "trained"
FAMILIES = ("gru2", "lstm2", "bilstm")
FORMS = {"full": "{}.h5", "weights-only": "{}_weights.h5", "tf1": "{}.tf1"}
BOUNDS = {"tolerance", "rtol", "floor"}


def _plant_fn():
    """The planted errors of ``scripts/measure_verdicts.py`` (the numbers of docs/verdicts.md)."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[2] / "scripts" / "measure_verdicts.py"
    spec = importlib.util.spec_from_file_location("measure_verdicts", path)
    mod = sys.modules.get("measure_verdicts")
    if mod is None:
        mod = importlib.util.module_from_spec(spec)
        sys.modules["measure_verdicts"] = mod
        spec.loader.exec_module(mod)
    return mod.plant, mod.PLANTS


def _verify_json(args, tmp_path, name="r.json"):
    out = tmp_path / name
    res = CliRunner().invoke(main, ["verify", *map(str, args), "--json", str(out)])
    data = json.loads(out.read_text()) if out.exists() else None
    return res, data


def _converted(src: Path, tmp_path: Path) -> Path:
    """``src`` converted by the CLI to its default output (``.keras`` for a model or a TF1 stack, a
    legacy-layout weights ``.h5`` for a weights-only file)."""
    out = tmp_path / ("conv.h5" if src.name.endswith("_weights.h5") else "conv.keras")
    res = CliRunner().invoke(main, ["convert", str(src), str(out)])
    assert res.exit_code == 0, res.output
    return out


def _plant_in(converted: Path, plant: str, tmp_path: Path) -> tuple:
    """A copy of ``converted`` with ``plant`` applied to its first recurrent layer (first direction of
    a Bidirectional); returns (copy, cell).  A ``.keras`` is loaded and saved by Keras; a weights
    ``.h5`` has its first recurrent group's kernel, recurrent kernel and bias rewritten in place."""
    plant_fn, _ = _plant_fn()
    if converted.suffix == ".keras":
        from gruconv.keras3 import runtime as keras3

        k = keras3.keras()
        model = k.saving.load_model(converted)
        layer = next(l for l in model.layers if isinstance(l, (k.layers.GRU, k.layers.LSTM, k.layers.Bidirectional)))
        inner = layer.forward_layer if isinstance(layer, k.layers.Bidirectional) else layer
        cell = "gru" if isinstance(inner, k.layers.GRU) else "lstm"
        inner.set_weights(plant_fn(plant, cell, [keras3.to_numpy(v) for v in inner.weights]))
        bad = tmp_path / f"bad-{plant.replace(' ', '_')}.keras"
        model.save(bad)
        return bad, cell
    import h5py

    bad = tmp_path / f"bad-{plant.replace(' ', '_')}.h5"
    shutil.copyfile(converted, bad)
    with h5py.File(bad, "r+") as f:
        for name in f.attrs["layer_names"]:
            names = [n.decode() if isinstance(n, bytes) else n for n in f[name].attrs["weight_names"]]
            if len(names) >= 3 and "recurrent_kernel" in names[1]:
                ds = [f[name][n] for n in names[:3]]
                cell = "gru" if ds[2].ndim == 2 else "lstm"
                for d, a in zip(ds, plant_fn(plant, cell, [d[()] for d in ds])):
                    d[...] = a
                return bad, cell
    raise AssertionError(f"no recurrent layer in {converted}")


#: bilstm's whole model is the slow tier's (issue 47: 2.4 s; its weights-only and TF1 forms stay quick, and the
#: whole-model form quickly on gru2 and lstm2)
@pytest.mark.parametrize("family,form", [
    (f, form) if (f, form) != ("bilstm", "full") else pytest.param(f, form, marks=pytest.mark.slow)
    for f in FAMILIES for form in FORMS])
def test_trained_fixture_passes_at_defaults_and_rows_say_which_bound(family, form, tmp_path):
    src = TRAINED / FORMS[form].format(family)
    res, data = _verify_json([src], tmp_path)
    assert res.exit_code == 0, res.output
    assert data["passed"] and data["checks"] and data["rtol"] > 0 and data["floor_k"] > 0
    for c in data["checks"]:
        assert c["bound"] in BOUNDS and c["floor"] > 0 and c["magnitude"] > 0
        assert set(c["limits"]) == BOUNDS and c["max_abs"] <= c["limits"][c["bound"]]
    states = [c for c in data["checks"] if "state" in c["name"]]
    assert states or form == "full", "every final state is checked"  # the full models return sequences only
    if form == "weights-only":  # no --config: each layer alone, sequence(s) and every final state
        assert "each cuDNN layer checked alone" in res.output
        if family != "gru2":
            assert any(c["name"].endswith("state c") for c in states)
    assert "decided by" in res.output and "parity: PASS" in res.output


@pytest.mark.slow
def test_long_sequences_pass_where_the_fixed_tolerance_alone_fails(tmp_path):
    """Issue 19's symptom on our own trained LSTM: at 400 steps the TF1 stack's cell states (|c| ~ 60) are
    over the absolute 1e-5 on a correct conversion; the rtol/floor bounds admit them, and the report says so."""
    res, data = _verify_json([TRAINED / "lstm2.tf1", "--steps", "400"], tmp_path)
    assert res.exit_code == 0, res.output
    over = [c for c in data["checks"] if c["max_abs"] > data["tolerance"]]
    assert over and all(c["bound"] in ("rtol", "floor") for c in over), data["checks"]
    # with only the absolute tolerance (rtol and the floor multiple at 0) the same conversion fails
    res, data = _verify_json([TRAINED / "lstm2.tf1", "--steps", "400", "--rtol", "0", "--floor-k", "0"], tmp_path)
    assert_parity_failure(res)
    assert not data["passed"]
    assert {c["bound"] for c in data["checks"] if not c["passed"]} == {"none"}


def _assert_planted_fails(family, form, plant, tmp_path):
    src = TRAINED / FORMS[form].format(family)
    conv = _converted(src, tmp_path)
    bad, cell = _plant_in(conv, plant, tmp_path)
    res, data = _verify_json([src, bad], tmp_path)
    assert_parity_failure(res)
    assert res.output.count("gruconv: error:") == 1 and "parity FAIL" in res.output
    failed = [c for c in data["checks"] if not c["passed"]]
    assert failed and all(c["bound"] == "none" for c in failed)
    for c in failed:  # over every bound, each recorded
        assert c["max_abs"] > max(v for v in c["limits"].values() if v is not None)
    return data


def test_planted_small_bias_error_fails_weights_only(tmp_path):
    """Quick tier: one bias vector off by 1e-4 relative (the weakest planted error measured) in a
    weights-only file's converted output fails without --config."""
    _assert_planted_fails("gru2", "weights-only", "bias 1e-4 relative", tmp_path)


_PLANTED = [(family, form, plant) for family in FAMILIES for form in FORMS
            for plant in ("bias 1e-4 relative", "gate order swapped", "matrix transposed", "biases exchanged",
                          "forget bias dropped", "float16 layer")
            # "biases exchanged" is no error for an LSTM (cuDNN uses only the sum of its two biases:
            # docs/verdicts.md) and a GRU has no forget gate: those pairs are not planted
            if plant in {"gru2": ("bias 1e-4 relative", "gate order swapped", "matrix transposed",
                                  "biases exchanged", "float16 layer")}.get(
                family, ("bias 1e-4 relative", "gate order swapped", "matrix transposed", "forget bias dropped",
                         "float16 layer"))]


@pytest.mark.slow
@pytest.mark.parametrize("family,form,plant", _PLANTED)
def test_every_planted_error_fails_on_every_trained_fixture(family, form, plant, tmp_path):
    _assert_planted_fails(family, form, plant, tmp_path)


def test_compare_names_the_bound_that_decided_and_nan_never_passes():
    ref = np.full((2, 3), 40.0)  # an LSTM cell state's magnitude
    c = _compare("c", ref + 5e-6, ref, ref, Bounds(1e-5), "float32", floor=1e-6)
    assert c.passed and c.bound == "tolerance"
    c = _compare("c", ref + 5e-5, ref, ref, Bounds(1e-5), "float32", floor=1e-6)  # 5e-5 <= 2e-6 x 40 = 8e-5
    assert c.passed and c.bound == "rtol" and c.limits["rtol"] == pytest.approx(8e-5)
    c = _compare("c", ref + 1e-4, ref, ref, Bounds(1e-5), "float32", floor=2e-5)  # 1e-4 <= 8 x 2e-5
    assert c.passed and c.bound == "floor" and c.limits["floor"] == pytest.approx(1.6e-4) and c.floor == 2e-5
    c = _compare("c", ref + 1e-4, ref, ref, Bounds(1e-5, k=4.0), "float32", floor=2e-5)  # the planted side: over all
    assert not c.passed and c.bound == "none" and "over every bound" in c.reason
    c = _compare("c", ref + 1e-4, ref, ref, Bounds(1e-5), "float32", floor=None)  # no floor measured: that bound drops
    assert not c.passed and c.limits["floor"] is None
    got = ref.copy()
    got[0, 0] = np.inf
    c = _compare("c", got, ref, ref, Bounds(1e-5), "float32", floor=1.0)
    assert not c.passed and c.bound == "none" and "never a pass" in c.reason


def test_floors_are_measured_once_per_inputs_across_device_runs():
    from gruconv.verify.verdicts import floor_cache, measure_floors

    calls = []

    def run(engine):
        calls.append(engine)
        return [np.zeros(3)]

    rep = _report()
    engine = type("E", (), {})()
    x = np.arange(6.0)
    a = measure_floors(rep, run, [np.zeros(3)], key=("l", x), cache=floor_cache(engine))
    b = measure_floors(rep, run, [np.zeros(3)], key=("l", x.copy()), cache=floor_cache(engine))
    assert a == b and len(calls) == 3  # 3 seeds, once
    measure_floors(rep, run, [np.zeros(3)], key=("l", x + 1), cache=floor_cache(engine))
    assert len(calls) == 6  # other inputs: measured again


# --------------------------------------------------------------------------- cuDNN's algorithms (issue 19)

def test_a_row_is_compared_with_the_closest_cudnn_algorithm_and_a_plant_stays_caught():
    """The numbers of scripts/gpu_cudnn_variants.py on trained/gru2 (H100): the standard algorithm is
    1.2e-6 from float64, the persistent ones 3.3e-5, and torch's cuDNN call equals persist_static_small_h.
    A correct candidate run by that algorithm passes against it; the same candidate with a planted error
    of 4e-5 (the bias 1e-4-relative plant's size at 8 steps) fails against every algorithm."""
    from gruconv.verify.verdicts import judge

    rng = np.random.default_rng(0)
    f64 = rng.uniform(-1, 1, (2, 8, 32))
    standard = f64 + 1.2e-6
    small_h = f64 + rng.choice([-3.3e-5, 3.3e-5], f64.shape)  # the persistent kernel's rounding
    alts = {"persist_static": small_h + 3e-7, "persist_static_small_h": small_h}
    rep = _report()
    c = judge(rep, "gru: sequence", small_h, standard, f64, "float32", 1e-7, lambda: alts)
    assert c.passed and c.reference_algorithm == "persist_static_small_h" and c.max_abs == 0.0
    assert c.by_algorithm["standard"] == pytest.approx(3.3e-5, rel=0.1)
    assert set(c.by_algorithm) == {"standard", "persist_static", "persist_static_small_h"}
    assert c.reference_error == pytest.approx(3.3e-5, rel=0.1)  # the chosen algorithm's own f64 error
    planted = small_h + 4e-5 * np.sign(rng.uniform(-1, 1, f64.shape))
    c = judge(rep, "gru: sequence", planted, standard, f64, "float32", 1e-7, lambda: alts)
    assert not c.passed and min(c.by_algorithm.values()) > 1e-5
    # a row within k x floor of the standard algorithm never runs the others (they cost a run each) ...
    c = judge(rep, "gru: sequence", standard + 5e-7, standard, f64, "float32", 1e-7,
              lambda: pytest.fail("alternates run for a row within the floor bound"))
    assert c.passed and c.max_abs <= c.limits["floor"] and c.reference_algorithm is None
    # ... but one the absolute tolerance alone admits does: it is shown matching its kernel's run
    c = judge(_report(bounds=Bounds(tolerance=1e-4)), "gru: sequence", small_h, standard, f64, "float32", 1e-7,
              lambda: alts)  # --tolerance 1e-4
    assert c.passed and c.reference_algorithm == "persist_static_small_h" and c.max_abs == 0.0
    # without alternates (the float64 oracle) the standard reference alone decides: the kernel's
    # 3.3e-5 rounding is over every bound there, which is why the algorithms are run at all
    c = judge(rep, "gru: sequence", small_h, standard, f64, "float32", 1e-7)
    assert not c.passed and c.reference_algorithm is None and c.by_algorithm == {}


def test_reference_variants_run_once_on_demand_and_name_what_cudnn_refuses():
    from gruconv.verify.reference.cudnn_lib import CudaCallError
    from gruconv.verify import CURRENT_RUN
    from gruconv.verify.engines import Engine
    from gruconv.verify.verdicts import ReferenceVariants

    assert Engine("oracle", False).variants() == []
    assert ReferenceVariants(Engine("oracle", False), None).at(0) is None
    eng = Engine.__new__(Engine)
    eng.kind, eng.allow_tf32, eng.algo, eng.info = "cudnn", False, "standard", {}
    names = [n for n, _ in eng.variants()]
    assert names == ["persist_static", "persist_dynamic", "persist_static_small_h"]
    assert all(e.algo == n and e is not eng for n, e in eng.variants()) and eng.algo == "standard"
    calls = []

    def run(e):
        calls.append(e.algo)
        if e.algo == "persist_dynamic":
            raise CudaCallError("cudnnBuildRNNDynamic failed: CUDNN_STATUS_NOT_SUPPORTED", status=3000)
        return [np.full(2, float(len(e.algo))), np.zeros(1)]

    alts = ReferenceVariants(eng, run)
    assert calls == []  # nothing runs until a row asks
    first = alts.at(0)()
    assert set(first) == {"persist_static", "persist_static_small_h"}
    assert alts.at(1)()["persist_static"].shape == (1,) and alts.at(2)() is None
    assert len(calls) == 3  # each algorithm once for the whole group
    ran = eng.info["cudnn_algorithms"]
    assert ran["standard"] == "reference" and ran["persist_static"] == "ran"
    assert ran["persist_dynamic"].startswith("not offered here: cudnnBuildRNNDynamic failed")
    token = CURRENT_RUN.set(("gpu default", "default"))  # informational TF32 rows: never
    try:
        assert ReferenceVariants(eng, run).at(0) is None
    finally:
        CURRENT_RUN.reset(token)


def test_the_report_says_which_rows_took_another_algorithm():
    rep = _report()
    rows = [Check("l: sequence", 0.0, 0.0, 1e-5, True, 3.3e-5, (2, 8, 32), device="gpu strict",
                  reference_algorithm="persist_static_small_h",
                  by_algorithm={"standard": 3.3e-5, "persist_static_small_h": 0.0}),
            Check("l: state", 1e-7, 1e-7, 1e-5, True, 1e-7, (2, 32), device="gpu strict",
                  reference_algorithm="standard", by_algorithm={"standard": 1e-7, "persist_static_small_h": 3e-5}),
            Check("l: sequence", 1e-7, 1e-7, 1e-5, True, 1e-7, (2, 8, 32), device="cpu",
                  reference_algorithm="standard", by_algorithm={"standard": 1e-7})]
    rep.checks = rows
    text = report.verify_text(rep.to_json())
    assert ("note: gpu strict: 1 of 2 row(s) compared with cuDNN's persist_static_small_h run of the original, "
            "the closest of its algorithms (its standard one is up to 3.30e-05 away") in text
    assert "note: cpu:" not in text
    rep.checks.append(Check("m: sequence", 0.0, 0.0, 1e-5, True, 1e-5, (2, 8, 32), device="gpu strict",
                            reference_algorithm="persist_static", by_algorithm={"standard": 2e-5, "persist_static": 0.0}))
    text = report.verify_text(rep.to_json())
    assert ("note: gpu strict: 2 of 3 row(s) compared with cuDNN's persist_static (1), persist_static_small_h (1) "
            "runs of the original") in text
    assert rep.to_json()["checks"][0]["by_algorithm"]["standard"] == 3.3e-5


# One form per family, so each verify route runs on the GPU (TF1 stack, whole Keras model, weights-only
# layers alone) and every plant of the family: 15 device runs instead of 45 (device time is budgeted).
_GPU_FORM = {"gru2": "tf1", "lstm2": "full", "bilstm": "weights-only"}


@pytest.mark.gpu
@pytest.mark.parametrize("family,form,plant", [p for p in _PLANTED if _GPU_FORM[p[0]] == p[1]])
def test_gpu_every_planted_error_fails_on_the_strict_gpu_rows_too(family, form, plant, tmp_path):
    """Issue 19 on a GPU: with the reference run by each of cuDNN's algorithms and every row compared with
    the closest (so the Keras-on-torch cuDNN kernel's rounding is not a failure), each planted error on a
    trained model still fails on the strict GPU rows as well as on the CPU, at the default settings."""
    from gruconv.keras3 import runtime as keras3

    ok, why = keras3.gpu_status()
    assert ok, f"this test needs a GPU the Keras backend can use: {why}"
    src = TRAINED / FORMS[form].format(family)
    bad, _ = _plant_in(_converted(src, tmp_path), plant, tmp_path)
    res, data = _verify_json([src, bad, "--reference", "cudnn", "--device", "both"], tmp_path)
    failed = {c["device"] for c in data["checks"] if c["counts"] and not c["passed"]}
    print(f"PLANTED {family} {form} {plant}: " + ", ".join(
        f"{c['device']} {c['name'][-24:]} {c['max_abs']:.2e} ({c.get('reference_algorithm')})"
        for c in data["checks"] if not c["passed"]))
    assert_parity_failure(res)
    assert failed >= {"cpu", "gpu strict"}, res.output
