"""Which reader reads an input (:func:`gruconv.run_options.reader_for`): a tf.keras 2.x SavedModel of CuDNN layers
is the tf2 reader's for its Keras config (to a ``.keras``), and the graph reader's when the output is the graph
rewritten in place (a SavedModel directory, the whole graph as ``.onnx``): its graph holds ``CudnnRNN`` ops
with no CPU twin, so it serves on no CPU as it is."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from gruconv.cli import main
from gruconv.run_options import reader_for

pytestmark = pytest.mark.xdist_group("test_reader_for")

CUDNN_SM = FIXTURES / "graphs" / "tf_keras_cudnngru"   # tf_keras SavedModel, CuDNNGRU layers
TWINNED_SM = FIXTURES / "graphs" / "tf_keras_gru_lstm"  # tf_keras SavedModel, GRU/LSTM: cuDNN nodes with CPU twins


def run(*args):
    res = CliRunner().invoke(main, [str(a) for a in args])
    escaped = res.exception if not isinstance(res.exception, (SystemExit, type(None))) else None
    assert escaped is None, f"{type(escaped).__name__}: {escaped}"
    return res


def test_the_output_decides_between_the_keras_config_and_the_graph(tmp_path):
    sm_dir = tmp_path / "sm"
    (sm_dir).mkdir()
    (sm_dir / "saved_model.pb").write_bytes(b"")
    assert reader_for(CUDNN_SM) == "tf2-checkpoint"
    assert reader_for(CUDNN_SM, tmp_path / "m.keras") == "tf2-checkpoint"
    assert reader_for(CUDNN_SM, tmp_path / "m.onnx") == "tf-graph"
    assert reader_for(CUDNN_SM, sm_dir) == "tf-graph"  # verify of a converted SavedModel
    assert reader_for(FIXTURES / "graphs" / "keras3_export", tmp_path / "m.keras") == "tf-graph"


def _cpu_saved_model(tmp_path):
    """``CUDNN_SM`` converted to a SavedModel: no cuDNN op left, written deterministically."""
    from gruconv.tf.rewrite import cudnn_ops_left
    from tensorflow.core.protobuf import saved_model_pb2

    out = tmp_path / "cpu_model"
    res = run("convert", CUDNN_SM, out, "--format", "saved-model")
    assert res.exit_code == 0, res.output
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((out / "saved_model.pb").read_bytes())
    # written deterministically (map fields in key order), as tf.saved_model.save writes: two runs, same bytes
    assert (out / "saved_model.pb").read_bytes() == sm.SerializeToString(deterministic=True)
    assert cudnn_ops_left([m.graph_def for m in sm.meta_graphs], [m.meta_info_def.stripped_op_list
                                                                   for m in sm.meta_graphs]) == []
    return out


def test_a_tf_keras_saved_model_of_cudnn_layers_converts_to_a_cpu_saved_model_and_verifies(tmp_path):
    """The rewritten SavedModel holds no cuDNN op and verify (the served SavedModel against the original graph's
    equations) exits 0."""
    out = _cpu_saved_model(tmp_path)
    res = run("verify", CUDNN_SM, out)
    assert res.exit_code == 0 and "end to end (converted SavedModel)" in res.output, res.output


@pytest.mark.slow  # a third load of the 885-function SavedModel, in this process (issue 47: 6 s of the quick tier)
def test_the_cpu_saved_model_predicts_what_the_keras_conversion_predicts(tmp_path):
    """Served on the CPU by TensorFlow, the rewritten SavedModel predicts what the ``.keras`` conversion (through
    the Keras config, checked against tf_keras by its own verify) predicts: a check beside verify's own."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import tensorflow as tf

    out, model = _cpu_saved_model(tmp_path), tmp_path / "m.keras"
    assert run("convert", CUDNN_SM, model).exit_code == 0
    fn = tf.saved_model.load(str(out)).signatures["serving_default"]
    (name, spec), = fn.structured_input_signature[1].items()
    x = np.random.default_rng(1).uniform(-1, 1, [3 if d is None else d for d in spec.shape.as_list()]).astype("float32")
    with tf.device("/CPU:0"):
        served = list(fn(**{name: tf.constant(x)}).values())[0].numpy()
    predicted = keras.saving.load_model(model).predict(x, verbose=0)
    assert np.max(np.abs(served - predicted)) < 1e-5


@pytest.mark.slow  # ~15 s of bounded TensorFlow children; the reader's choice for .onnx is quick above, and a
# whole SavedModel graph to ONNX verified end to end is quick in tests/verify/test_graph_end_to_end.py (keras3_export)
def test_the_whole_graph_as_onnx_of_a_tf_keras_saved_model(tmp_path):
    out = tmp_path / "m.onnx"
    assert run("convert", CUDNN_SM, out).exit_code == 0
    res = run("verify", CUDNN_SM, out)
    assert res.exit_code == 0 and "end to end (whole graph as ONNX)" in res.output, res.output


def test_a_tf_keras_saved_model_that_already_serves_on_a_cpu_is_written_as_asked(tmp_path):
    """Issue 46 (a): a tf.keras 2.x SavedModel of plain GRU/LSTM layers (cuDNN ops only in tf.keras's GPU variants)
    asked for a SavedModel or ONNX exited 0 with nothing written ("already serves on a CPU").  It is written as
    asked (the graph as it is, its GPU variants kept: TensorFlow runs their twins on a CPU), checked to serve on a
    CPU, and verify checks it end to end against the original."""
    _twinned_to_saved_model(tmp_path / "cpu_model")


def _twinned_to_saved_model(out: Path) -> None:
    res = run("convert", TWINNED_SM, out, "--format", "saved-model")
    assert res.exit_code == 0 and f"wrote {out}" in res.output, res.output
    assert "already serves on a CPU" in res.output  # said, as a warning
    assert (out / "saved_model.pb").is_file() and (out / "variables").is_dir()


@pytest.mark.slow  # verify of the 885-function graph: its whole-graph ONNX through tf2onnx, both graphs served (issue
# 47: 20 s of the quick tier with the convert above); verify end to end of a converted SavedModel is quick in
# tests/verify/test_graph_end_to_end.py
def test_a_tf_keras_saved_model_that_already_serves_on_a_cpu_verifies_end_to_end(tmp_path):
    _twinned_to_saved_model(tmp_path / "cpu_model")
    res = run("verify", TWINNED_SM, tmp_path / "cpu_model")
    assert res.exit_code == 0 and "end to end (converted SavedModel)" in res.output, res.output


@pytest.mark.slow  # the whole graph through tf2onnx in a fresh TensorFlow child (issue 47: 9 s of the quick tier);
# the same reader choice for .onnx is quick in test_the_output_decides_between_the_keras_config_and_the_graph
def test_a_tf_keras_saved_model_that_already_serves_on_a_cpu_is_written_as_onnx_as_asked(tmp_path):
    res = run("convert", TWINNED_SM, tmp_path / "m.onnx")
    assert res.exit_code == 0 and (tmp_path / "m.onnx").is_file(), res.output
