"""A tf.keras 2.x SavedModel (``model.save(dir)``) converts even without a cuDNN layer (Keras 3 cannot open it),
and verify checks the conversion against the original SavedModel served by TensorFlow on the CPU (issue 39:
:mod:`gruconv.verify.reference.saved_model`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, assert_parity_failure
from gruconv.cli import main

pytestmark = pytest.mark.xdist_group("test_saved_model_reference")

GRAPHS = FIXTURES / "graphs"
PLAIN = GRAPHS / "tf_keras_gru_lstm"      # tf.keras GRU + Bidirectional(LSTM) + Dense: serves on a CPU
CUDNN = GRAPHS / "tf_keras_cudnngru"      # CuDNNGRU layers: CudnnRNN with no CPU twin


def run(*args):
    """The CLI in-process; no exception may escape it (an exit code is gruconv's own)."""
    res = CliRunner().invoke(main, [str(a) for a in args])
    escaped = res.exception if not isinstance(res.exception, (SystemExit, type(None))) else None
    assert escaped is None, f"{type(escaped).__name__}: {escaped}"
    return res


def _served(x: np.ndarray) -> np.ndarray:
    import tensorflow as tf

    fn = tf.saved_model.load(str(PLAIN)).signatures["serving_default"]
    (key,) = fn.structured_input_signature[1]
    (out,) = fn(**{key: tf.constant(x)}).values()
    return out.numpy()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("plain") / "m.keras"
    res = run("convert", PLAIN, out)
    assert res.exit_code == 0, res.output
    assert "Keras 3 cannot open a tf.keras 2.x SavedModel" in res.output
    return out


def test_plain_gru_lstm_saved_model_converts_and_predicts_what_tensorflow_serves(converted):
    import keras

    x = np.random.default_rng(0).uniform(-1, 1, (3, 7, 3)).astype("float32")
    got = np.asarray(keras.saving.load_model(converted)(x))
    np.testing.assert_allclose(got, _served(x), rtol=0, atol=1e-6)


@pytest.mark.slow  # a second verify of the 885-function SavedModel (issue 47); the quick tier keeps the row's failing
# half (the planted bias below) and the served-vs-converted comparison itself (the test above)
def test_verify_runs_the_served_saved_model(tmp_path, converted):
    res = run("verify", PLAIN, converted, "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    rows = {c["name"]: c for c in report["checks"]}
    assert rows["end to end (SavedModel): model output"]["passed"]
    assert "end to end (tf_keras): model output" in rows
    assert report["environment"]["saved_model_reference"] == "TensorFlow serving_default, CPU"


def test_a_planted_weight_error_fails_the_saved_model_row(tmp_path, converted):
    """The converted model with one Dense bias moved by 1e-3: the served original catches it (exit 1)."""
    import keras

    bad = tmp_path / "bad.keras"
    model = keras.saving.load_model(converted)
    dense = model.layers[-1]
    kernel, bias = dense.get_weights()
    dense.set_weights([kernel, bias + 1e-3])
    model.save(bad)
    res = run("verify", PLAIN, bad, "--json", tmp_path / "r.json")
    assert_parity_failure(res)
    report = json.loads((tmp_path / "r.json").read_text())
    row = next(c for c in report["checks"] if c["name"] == "end to end (SavedModel): model output")
    assert not row["passed"] and row["max_abs"] > 5e-4


def test_a_saved_model_with_cudnn_layers_says_why_it_is_not_served(tmp_path):
    res = run("verify", CUDNN, "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert not any(c["name"].startswith("end to end (SavedModel)") for c in report["checks"])
    assert report["environment"]["saved_model_reference"].startswith("not run: its graph calls CudnnRNN")
    assert any("not checked, its graph calls CudnnRNN" in n for n in report["notes"]), report["notes"]


@pytest.mark.slow
def test_an_h5_model_gets_no_saved_model_row(tmp_path):
    res = run("verify", GRAPHS / "tf_keras_cudnngru.h5", "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert "saved_model_reference" not in report["environment"]
    assert not any("SavedModel served" in n for n in report["notes"])
