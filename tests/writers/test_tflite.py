"""The ``.tflite`` writer (``docs/edge.md``): real files by the real converter, run in the real runtimes (LiteRT,
``ai-edge-litert``; TensorFlow Lite Micro, ``tflite-micro``), through the CLI.

Each file is converted once per module (:func:`made`) from small fixtures; ``verify`` of it must pass, and
planted errors (a gate swap, a dropped recurrent bias) baked into a file must fail in every runtime the file
targets.  TFLM's silent failure class (a ``WHILE`` model returning sequences) must never PASS.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import assert_parity_failure

from gruconv.cli import main

pytest.importorskip("ai_edge_litert")
pytest.importorskip("tflite_micro")

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def meta_of(path):
    from gruconv.writers.tflite import litert

    return litert.describe_file(Path(path).read_bytes())


#: name -> (input, extra convert arguments)
CASES = {
    "seq_mobile": (FIX / "keras/sequential.h5", []),
    "seq_micro": (FIX / "keras/sequential.h5", ["--micro", "--timesteps", "8"]),
    "stateful": (FIX / "keras/stateful.h5", []),
    "two_inputs_micro": (FIX / "keras/functional_two_gru.h5", ["--micro", "--timesteps", "7"]),
    # two inputs whose model order is not the signature's sorted order (encoder, decoder)
    "seq2seq_mobile": (FIX / "keras_user/seq2seq.h5", []),
    "tf1_micro": (FIX / "tf1/layer_uni", ["--micro", "--timesteps", "5"]),
    "lstm_mobile": (FIX / "keras_lstm/sequential.h5", []),
    "bidir_micro": (FIX / "keras/bidir_concat.h5", ["--micro", "--timesteps", "6"]),
    "tf1_mobile": (FIX / "tf1/layer_uni", []),
    # a trained char model: Embedding -> 2 CuDNNGRU -> Dense (its Embedding made TFLM fail to allocate: SELECT)
    "embedding_micro": (FIX / "trained/gru2.h5", ["--micro", "--timesteps", "4"]),
}
#: Cases run in the slow tier only (the quick tier keeps one of each kind: mobile/micro, stateful, two inputs, an
#: Embedding; a TF1 stack to micro is converted quickly by test_planted_errors_fail_for_a_tf1_stack, its PASS here
#: is the slow tier's since issue 47).
SLOW = {"lstm_mobile", "bidir_micro", "tf1_mobile", "two_inputs_micro", "tf1_micro"}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Each case converted once, on first use: ``made(name) -> (input, output, result)``."""
    d = tmp_path_factory.mktemp("tflite")
    done: dict = {}

    def get(name):
        if name not in done:
            import keras

            src, extra = CASES[name]
            dst = d / f"{name}.tflite"
            # Keras's interactive logging on, as for a caller who imported Keras first: the converter's export
            # must still print nothing on stdout ("Saved artifact at ..." reached CI's output at 229eab3)
            keras.utils.enable_interactive_logging()
            res = run("convert", src, dst, *extra)
            done[name] = (src, dst, res)
            get.logging_after[name] = keras.utils.is_interactive_logging_enabled()
        return done[name]
    get.logging_after = {}
    import keras

    was = keras.utils.is_interactive_logging_enabled()
    yield get
    if not was:
        keras.utils.disable_interactive_logging()  # the worker's state as it was, for the modules after


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in CASES])
def test_converts_and_verifies(made, name):
    src, dst, res = made(name)
    assert res.exit_code == 0, res.output
    assert dst.is_file()
    assert "Saved artifact" not in res.output and "Endpoint" not in res.output, res.output
    info = meta_of(dst)
    micro = "--micro" in CASES[name][1]
    assert info["meta"]["profile"] == ("micro" if micro else "mobile")
    assert not any(o.startswith("CUSTOM") for o in info["ops"])  # never Flex
    assert ("WHILE" in info["ops"]) == (not micro)                # micro: unrolled
    v = run("verify", src, dst)
    assert v.exit_code == 0, v.output
    assert "LiteRT" in v.output
    assert ("TFLM" in v.output) == micro
    assert "parity: PASS" in v.output


def test_stateful_second_call_is_compared(made):
    src, dst, _ = made("stateful")
    assert meta_of(dst)["meta"]["stateful"] is True
    assert "VAR_HANDLE" in meta_of(dst)["ops"]  # state in resource variables
    v = run("verify", src, dst)
    assert "LiteRT: model output (second call)" in v.output and v.exit_code == 0


def test_keras_logging_switch_is_the_callers_afterwards(made):
    made("seq_mobile")
    assert made.logging_after["seq_mobile"] is True  # the caller's choice (on), restored after the converter


def test_convert_output_names_profile_and_ops(made):
    out = made("seq_micro")[2].output
    assert "micro profile: batch 1, 8 steps, unrolled; ops " in out


def _planted(monkeypatch, kind):
    """Bake an error into the next file written: a GRU's z and r gates swapped, or its recurrent bias dropped."""
    from gruconv.writers.tflite import litert

    real = litert.fixed_model

    def fixed(model, *a, **kw):
        m = real(model, *a, **kw)
        for layer in m.layers:
            cell = getattr(getattr(layer, "cell", None), "units", None)
            if cell is None:
                continue
            k, rk, b = [np.array(w) for w in layer.get_weights()]
            h = cell
            if kind == "gate swap":
                k[:, :h], k[:, h:2 * h] = k[:, h:2 * h].copy(), k[:, :h].copy()
            else:
                b[1] = 0.0
            layer.set_weights([k, rk, b])
            break
        return m
    monkeypatch.setattr(litert, "fixed_model", fixed)


# the dropped recurrent bias is the slow tier's (issue 47: 3.6 s); the gate swap shows the check quickly
@pytest.mark.parametrize("kind", ["gate swap", pytest.param("recurrent bias", marks=pytest.mark.slow)])
def test_planted_errors_fail_in_litert_and_tflm(tmp_path, monkeypatch, kind):
    _planted(monkeypatch, kind)
    dst = tmp_path / "bad.tflite"
    res = run("convert", FIX / "keras/sequential.h5", dst, "--micro", "--timesteps", "8")
    assert res.exit_code == 0, res.output
    monkeypatch.undo()
    v = run("verify", FIX / "keras/sequential.h5", dst)
    assert_parity_failure(v)
    rows = {ln.strip().split("  ")[0]: ln for ln in v.output.splitlines() if ln.startswith("  ")}
    assert "FAIL" in rows["LiteRT: model output"] and "FAIL" in rows["TFLM: model output"]
    assert rows["cu_dnngru: sequence"].endswith("ok")  # the in-memory model is right: the file is not


@pytest.mark.parametrize("kind", ["gate swap", pytest.param("recurrent bias", marks=pytest.mark.slow)])
def test_planted_errors_fail_for_a_tf1_stack(tmp_path, monkeypatch, kind):
    _planted(monkeypatch, kind)
    dst = tmp_path / "bad.tflite"
    res = run("convert", FIX / "tf1/layer_uni", dst, "--micro", "--timesteps", "5")
    assert res.exit_code == 0, res.output
    monkeypatch.undo()
    v = run("verify", FIX / "tf1/layer_uni", dst)
    assert_parity_failure(v)
    failed = [ln for ln in v.output.splitlines() if ln.startswith("  ") and "FAIL" in ln]
    assert any("(TFLM)" in ln for ln in failed) and any("(TFLM)" not in ln for ln in failed)


def test_tflm_while_sequences_never_pass(tmp_path):
    """A WHILE model returning sequences, taken as a micro file: LiteRT right, TFLM silently wrong -> FAIL."""
    from gruconv.writers.tflite import litert

    dst = tmp_path / "while.tflite"
    res = run("convert", FIX / "keras/bidir_concat.h5", dst, "--timesteps", "6")
    assert res.exit_code == 0, res.output
    info = meta_of(dst)
    assert "WHILE" in info["ops"]
    dst.write_bytes(litert.with_metadata(dst.read_bytes(), dict(info["meta"], profile="micro")))
    v = run("verify", FIX / "keras/bidir_concat.h5", dst)
    assert_parity_failure(v)
    rows = [ln for ln in v.output.splitlines() if ln.startswith("  TFLM") or ln.startswith("  LiteRT")]
    assert any(ln.startswith("  LiteRT") and ln.endswith("ok") for ln in rows)
    assert any(ln.startswith("  TFLM") and "FAIL" in ln for ln in rows)


def test_int8_error_reported_and_judged(tmp_path):
    calib = tmp_path / "calib.npz"
    np.savez(calib, np.random.default_rng(1).uniform(-1, 1, (8, 8, 6)).astype(np.float32))
    dst = tmp_path / "q.tflite"
    res = run("convert", FIX / "keras/sequential.h5", dst, "--int8", calib, "--timesteps", "8")
    assert res.exit_code == 0, res.output
    assert "int8: output 0 max abs error " in res.output
    assert meta_of(dst)["meta"]["int8"] is True and "WHILE" not in meta_of(dst)["ops"]
    ok = run("verify", FIX / "keras/sequential.h5", dst)
    assert ok.exit_code == 0 and "LiteRT int8: model output" in ok.output, ok.output
    tight = run("verify", FIX / "keras/sequential.h5", dst, "--int8-tolerance", "1e-6")
    assert_parity_failure(tight)


@pytest.mark.slow  # a trained char model calibrated and converted (~15 s)
def test_int8_of_a_model_taking_token_ids(tmp_path):
    """An Embedding's input is int32 in the converted model: the calibration batches are fed in the model's own
    input dtypes (a float32 batch made the converter refuse the model, ``fixtures/trained/gru2.h5``)."""
    calib = tmp_path / "ids.npz"
    np.savez(calib, np.random.default_rng(0).integers(0, 95, (8, 6)).astype(np.float32))
    dst = tmp_path / "ids8.tflite"
    res = run("convert", FIX / "trained/gru2.h5", dst, "--int8", calib, "--timesteps", "6")
    assert res.exit_code == 0, res.output
    assert "int8: output 0 max abs error " in res.output and meta_of(dst)["meta"]["int8"] is True
    # its logits are ~0.3 off (measured: 6.7% of max |float|): over the default --int8-tolerance 0.05, judged so
    assert_parity_failure(run("verify", FIX / "trained/gru2.h5", dst))
    v = run("verify", FIX / "trained/gru2.h5", dst, "--int8-tolerance", "1.0")
    assert v.exit_code == 0 and "LiteRT int8: model output" in v.output, v.output
    # convert --verify takes the same bound (without it this model cannot be converted with --verify at all)
    again = tmp_path / "again.tflite"
    args = ("convert", FIX / "trained/gru2.h5", again, "--int8", calib, "--timesteps", "6", "--verify")
    assert_parity_failure(run(*args))
    assert not again.exists()
    ok = run(*args, "--int8-tolerance", "1.0")
    assert ok.exit_code == 0 and again.is_file() and "parity: PASS" in ok.output, ok.output


def test_usage_and_refusals(tmp_path):
    out = tmp_path / "x.tflite"
    r = run("convert", FIX / "keras/sequential.h5", out, "--int8-tolerance", "0.1")
    assert r.exit_code == 2 and "--int8-tolerance applies to convert --verify of an --int8" in r.output, r.output
    r = run("convert", FIX / "keras/sequential.h5", out, "--micro")
    assert r.exit_code == 2 and "--micro needs --timesteps" in r.output
    r = run("convert", FIX / "keras/sequential.h5", out, "--int8", tmp_path / "c.npz")
    assert r.exit_code == 2 and "--int8 needs --timesteps" in r.output
    r = run("convert", FIX / "keras_user/text_classifier_mask_zero.h5", out, "--micro", "--timesteps", "4")
    assert r.exit_code == 3 and "SELECT" in r.output and "remove the Masking" in r.output, r.output
    r = run("convert", FIX / "keras/functional_two_gru.h5", out, "--micro", "--timesteps", "5")
    assert r.exit_code == 2 and "fixes 7 time steps: pass --timesteps 7" in r.output, r.output
    r = run("convert", FIX / "keras/sequential.h5", tmp_path / "y.keras", "--micro", "--timesteps", "4")
    assert r.exit_code == 2 and "--micro" in r.output
    assert not any(tmp_path.iterdir())


def test_without_the_packages_one_line(tmp_path, monkeypatch):
    from gruconv.writers.tflite import litert

    monkeypatch.setattr(litert, "available", lambda: "ai_edge_litert is not installed: pip install 'gruconv[tflite]'")
    r = run("convert", FIX / "keras/sequential.h5", tmp_path / "x.tflite")
    assert r.exit_code == 3 and "pip install 'gruconv[tflite]'" in r.output
    assert not any(tmp_path.iterdir())


def test_tf1_unknown_model_suffix_is_usage_not_directory(tmp_path):
    """Issue 46: `convert fixtures/tf1/layer_bidir out.tflite` made a directory named out.tflite; the rule: a
    name ending like a model file no writer claims is exit 2, never a directory."""
    for name in ("out.pt", "out.mlmodel"):
        r = run("convert", FIX / "tf1/layer_bidir", tmp_path / name)
        assert r.exit_code == 2 and "gruconv writes no file under" in r.output, r.output
        assert not (tmp_path / name).exists()
    # out.tflite itself is claimed now: a TF1 checkpoint's one file (test_converts_and_verifies[tf1_micro])


def test_inspect_says_which_profiles():
    i = run("inspect", FIX / "keras_user/text_classifier_mask_zero.h5")
    assert "tflite mobile: yes" in i.output and "tflite micro: no: the micro profile cannot keep the mask" in i.output
    i = run("inspect", FIX / "tf1/layer_uni")
    assert "tflite micro: yes" in i.output


@pytest.mark.slow
def test_batch_mode(tmp_path):
    out = tmp_path / "out"
    r = run("convert", FIX / "keras/bidir_sum.h5", FIX / "tf1/layer_uni", "--out-dir", out, "--format", "tflite",
            "--micro", "--timesteps", "4", "--jobs", "1")
    assert r.exit_code == 0, r.output
    assert meta_of(out / "bidir_sum.tflite")["meta"]["profile"] == "micro"
    assert meta_of(out / "layer_uni.tflite")["meta"]["kind"] == "stack"


def test_a_file_that_does_not_compute_the_model_is_not_placed(tmp_path):
    """The output contract's numbers: the converter bakes TimeDistributed's open time axis into the graph (the file
    gives 1 step where the model gives T); convert refuses it before placing it, and says what to change."""
    out = tmp_path / "td.tflite"
    r = run("convert", FIX / "keras/time_distributed.h5", out)
    assert r.exit_code == 3 and "pass --timesteps T to fix the time axis" in r.output, r.output
    assert not any(tmp_path.iterdir())


def test_micro_embedding_is_one_gather_tflm_runs(made):
    """Keras 3's Embedding wraps negative ids with a ``where`` (LESS + SELECT); TFLM has no SELECT kernel, so the
    micro profile looks rows up with one GATHER (``litert._plain_gather``) and TFLM runs the file."""
    src, dst, res = made("embedding_micro")
    assert res.exit_code == 0, res.output
    ops = meta_of(dst)["ops"]
    assert "GATHER" in ops and "SELECT" not in ops and "LESS" not in ops


def test_tflm_load_failure_names_its_reason(tmp_path, monkeypatch):
    """Without the plain gather the file holds SELECT: TFLM's own reason (printed by its C++ side, not raised)
    is in the one line, not only "failed to allocate tensors"."""
    from gruconv.writers.tflite import litert

    monkeypatch.setattr(litert, "_plain_gather", lambda model: None)
    dst = tmp_path / "select.tflite"
    res = run("convert", FIX / "trained/gru2.h5", dst, "--micro", "--timesteps", "4")
    assert res.exit_code == 3, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    errors = [ln for ln in res.output.splitlines() if ln.startswith("gruconv: error:")]
    assert len(errors) == 1 and "SELECT" in errors[0], res.output
    assert not dst.exists()
