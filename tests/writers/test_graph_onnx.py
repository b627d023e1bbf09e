"""The whole-graph ONNX writer (:mod:`gruconv.writers.onnx.tfgraph`, issue 39): graphs holding cuDNN ops through
tf2onnx with gruconv's handlers, run by onnxruntime on the CPU.

Numerical truth: ``fixtures/graphs_golden`` (``fixtures/make_golden_graph_fixtures.py``: real cuDNN 9.19 buffers
inside ``CudnnRNN``/``V2``/``V3`` graphs, frozen and as TF1 SavedModels, cuDNN's own strict-fp32 ``y``/``hy``/``cy``
as the expected outputs, read through the fixtures' ``manifest.json``), and ``fixtures/graphs/keras3_export`` with
``keras3_export_reference.npz`` (what Keras 3 computes on the CPU for the same model and input).  A planted gate
order and a planted cuDNN op must be caught; refusals are one line and write nothing.

Batch-major (``time_major=false``) fixtures: their states are ``[batch, layers*dirs, units]``, as TensorFlow's
kernel takes them, whose *memory* it hands cuDNN as ``[layers*dirs, batch, units]``; the manifest's layout
``"mem"`` says so, and the golden states are reshaped (not transposed) to compare.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import FIXTURES

from gruconv.errors import GruconvError, InputError, OutputError, UnsupportedError
from gruconv.model import target_gates
from gruconv.writers.onnx import tfgraph

GOLDEN_GRAPHS = FIXTURES / "graphs_golden"
MANIFEST = json.loads((GOLDEN_GRAPHS / "manifest.json").read_text())["fixtures"]
#: The verdict rules' strict-fp32 row: cuDNN's FMA-math outputs are matched within ~1e-6.
STRICT = 1e-6
#: Fixtures the writer refuses, with the words of the one line.
REFUSED = {"lstm_2l_bidir_proj_v3": "num_proj=5 (an LSTM projection) is not converted"}
CONVERTED = sorted(set(MANIFEST) - set(REFUSED))
#: One of each op, layout and parameter source: the quick tier; the rest run in the slow tier.
QUICK = {"gru_1l_uni_v1", "gru_2l_bidir_canonical_savedmodel", "lstm_2l_bidir_varlen_v3_bt", "gru_2l_uni_skip_v1"}


def _layout(a, layout: str):
    """A golden time-major array as the fixture's graph takes or gives it (the manifest's ``layout``)."""
    if layout == "bt":
        return a.transpose(1, 0, 2)
    if layout == "mem":  # a batch-major graph's states: the same memory, [batch, layers*dirs, units]
        return a.reshape(a.shape[1], a.shape[0], a.shape[2])
    return a


def _run(model, feed: dict) -> dict:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))


def _errors(name: str, model) -> dict:
    """Max abs error of each fetch of a golden-graph fixture's converted ``model`` against cuDNN."""
    e = MANIFEST[name]
    z = np.load(FIXTURES / e["golden"])
    feed = {k: _layout(z[v["golden"]], v["layout"]).astype(np.int32 if v["golden"] == "seq_lengths" else np.float32)
            for k, v in e["feeds"].items()}
    outs = _run(model, feed)
    errors = {}
    for k, v in e["fetches"].items():
        want = _layout(z[v["golden"]], v["layout"])
        got = outs[k]
        assert got.shape == want.shape, (k, got.shape, want.shape)
        errors[k] = float(np.abs(got - want).max())
    return errors


def _ops(model) -> list:
    return [n.op_type for n in model.graph.node]


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in QUICK else pytest.mark.slow) for n in CONVERTED])
def test_golden_graph_matches_cudnn(name):
    e = MANIFEST[name]
    z = np.load(FIXTURES / e["golden"])
    cfg = json.loads(str(z["config"]))
    model, facts = tfgraph.build(GOLDEN_GRAPHS / e["file"])
    errors = _errors(name, model)
    assert max(errors.values()) <= STRICT, errors
    assert set(errors) == set(e["fetches"])
    ops = _ops(model)
    op = {"gru": "GRU", "lstm": "LSTM"}[e["cell"]]
    assert ops.count(op) == cfg["L"] and not any(o.startswith("Cudnn") for o in ops), ops
    for n in model.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type == op:
            assert attrs["direction"] == (b"bidirectional" if cfg["bidir"] else b"forward")
            assert attrs.get("linear_before_reset", 0) == (1 if op == "GRU" else 0)
            assert len(n.input) > 4 and (n.input[4] != "") == (e["op"] == "CudnnRNNV3"), n.input
    assert facts["cudnn_nodes"] == ["cudnn_rnn"] and facts["signature"] == e.get("signature")


def test_keras3_export_matches_keras_on_the_cpu(tmp_path):
    """Keras 3's ``model.export`` traced on its cuDNN branch (four ``CudnnRNNV3``, batch-major, parameters computed
    from variables, folded by tf2onnx's loader) against Keras 3's own CPU output for the same model."""
    out = tmp_path / "keras3.onnx"
    facts = tfgraph.write_graph_onnx(FIXTURES / "graphs" / "keras3_export", out)
    ref = np.load(FIXTURES / "graphs" / "keras3_export_reference.npz")
    model = onnx.load(str(out))
    y = _run(model, {"x": ref["x"]})["output_0"]
    assert y.shape == ref["y"].shape and float(np.abs(y - ref["y"]).max()) <= STRICT
    assert facts["signature"] == "serving_default" and len(facts["cudnn_nodes"]) == 4
    assert facts["inputs"] == ["x"] and facts["outputs"] == ["output_0"]
    assert _ops(model).count("GRU") == 2 and _ops(model).count("LSTM") == 2
    assert tfgraph.leftover_ops(model) == []


def test_frozen_pbtxt_with_skip_input_and_lengths():
    model, facts = tfgraph.build(FIXTURES / "graphs" / "frozen_gru_bidir_skip.pbtxt")
    z = np.load(FIXTURES / "cudnn-golden" / "gru_1l_bidir_skip.npz")
    outs = _run(model, {"x": z["x"], "h0": z["h0"], "lengths": z["seq_lengths"].astype(np.int32)})
    assert facts["inputs"] == ["x", "h0", "lengths"] and facts["outputs"] == ["y", "hy"]
    assert float(np.abs(outs["y"] - z["y"]).max()) <= STRICT and float(np.abs(outs["hy"] - z["hy"]).max()) <= STRICT


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_a_planted_gate_order_is_caught(cell, monkeypatch):
    """The comparison above catches ONNX gate blocks left in cuDNN's order (not reordered)."""
    name = {"gru": "gru_1l_uni_v1", "lstm": "lstm_1l_uni_v1"}[cell]
    good = max(_errors(name, tfgraph.build(GOLDEN_GRAPHS / MANIFEST[name]["file"])[0]).values())
    monkeypatch.setitem(target_gates.TARGET_GATE_NAMES["onnx"], cell, target_gates.CELLS[cell].gates)
    bad = max(_errors(name, tfgraph.build(GOLDEN_GRAPHS / MANIFEST[name]["file"])[0]).values())
    assert good <= STRICT < 1e-3 < bad


def test_a_planted_cudnn_op_is_caught():
    model, _ = tfgraph.build(GOLDEN_GRAPHS / MANIFEST["gru_1l_uni_v1"]["file"])
    assert tfgraph.leftover_ops(model) == []
    model.graph.node[0].op_type = "CudnnRNNV3"
    assert tfgraph.leftover_ops(model) == ["CudnnRNNV3"]
    with pytest.raises(UnsupportedError, match="ops no ONNX runtime has: CudnnRNNV3"):
        tfgraph.check(model)


def _one_line(e: GruconvError, text: str) -> None:
    line = str(e)
    assert "\n" not in line and text in line, line


def test_projection_is_refused_in_one_line_and_nothing_is_written(tmp_path, capfd):
    out = tmp_path / "proj.onnx"
    with pytest.raises(UnsupportedError) as info:
        tfgraph.write_graph_onnx(GOLDEN_GRAPHS / MANIFEST["lstm_2l_bidir_proj_v3"]["file"], out)
    _one_line(info.value, REFUSED["lstm_2l_bidir_proj_v3"])
    assert "CudnnRNNV3 'cudnn_rnn'" in str(info.value)
    assert list(tmp_path.iterdir()) == []
    assert "tf2onnx" not in capfd.readouterr().err  # its own "Failed to convert node" log stays quiet


def _graph(tmp_path, name: str, *, params_const: bool = True, dtype: str = "float32", extra: tuple = (), **attrs):
    """A frozen graph of one ``CudnnRNN`` around the golden ``gru_1l_uni`` buffer (``opaque_f64`` for float64),
    written by TensorFlow; ``extra``: indices of more outputs fetched (``rs`` is reserve_space)."""
    import tensorflow as tf

    z = np.load(FIXTURES / "cudnn-golden" / "gru_1l_uni.npz")
    g = tf.Graph()
    with g.as_default():
        v1 = tf.compat.v1
        x = v1.placeholder(dtype, [None, None, 5], name="x")
        h0 = v1.placeholder(dtype, [1, None, 7], name="h0")
        buf = (z["opaque_f64"] if dtype == "float64" else z["opaque"]).astype(dtype)
        params = tf.constant(buf) if params_const else v1.placeholder(dtype, [None], name="p")
        out = tf.raw_ops.CudnnRNN(input=x, input_h=h0, input_c=tf.constant(0.0, dtype), params=params,
                                  **{"rnn_mode": "gru", "is_training": False, **attrs}, name="rnn")
        tf.identity(out[0], name="y")
        for i in extra:
            tf.identity(out[i], name={1: "hy", 2: "cy", 3: "rs"}[i])
    path = tmp_path / name
    path.write_bytes(g.as_graph_def().SerializeToString())
    return path


@pytest.mark.parametrize("attrs, text", [
    ({"rnn_mode": "rnn_tanh"}, "rnn_mode 'rnn_tanh' is not converted (GRU and LSTM are)"),
    ({"dropout": 0.5, "is_training": True}, "dropout=0.5 with is_training=true is a random graph"),
    ({"params_const": False}, "its params come from Placeholder 'p', not a constant"),
], ids=["rnn_tanh", "training_dropout", "params_not_constant"])
def test_refusals_are_one_line(tmp_path, attrs, text):
    path = _graph(tmp_path, "g.pb", **attrs)
    with pytest.raises(UnsupportedError) as info:
        tfgraph.write_graph_onnx(path, tmp_path / "g.onnx")
    _one_line(info.value, text)
    assert str(info.value).startswith(str(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.pb"]


def test_inference_dropout_converts(tmp_path):
    """``dropout`` with ``is_training=false`` is the identity (cuDNN applies dropout in training only)."""
    model, _ = tfgraph.build(_graph(tmp_path, "g.pb", dropout=0.5, is_training=False))
    z = np.load(FIXTURES / "cudnn-golden" / "gru_1l_uni.npz")
    y = _run(model, {"x": z["x"], "h0": z["h0"]})["y"]
    assert float(np.abs(y - z["y"]).max()) <= STRICT


def test_bad_inputs_and_outputs_are_one_line(tmp_path):
    junk = tmp_path / "junk.pb"
    junk.write_bytes(b"\xff\xff\xff not a graph")
    with pytest.raises(InputError) as info:
        tfgraph.build(junk)
    _one_line(info.value, "not a GraphDef")
    with pytest.raises(InputError) as info:
        tfgraph.build(tmp_path / "missing.pb")
    _one_line(info.value, "missing.pb")
    with pytest.raises(InputError) as info:
        tfgraph.build(FIXTURES / "graphs" / "keras3_export", signature="nope")
    _one_line(info.value, "cannot load the SavedModel's 'nope' signature")
    with pytest.raises(UnsupportedError, match="a frozen GraphDef has no signatures"):
        tfgraph.build(GOLDEN_GRAPHS / "gru_1l_uni_v1.pb", signature="serving_default")
    out = tmp_path / "exists.onnx"
    out.write_bytes(b"keep")
    with pytest.raises(OutputError):
        tfgraph.write_graph_onnx(GOLDEN_GRAPHS / "gru_1l_uni_v1.pb", out)
    assert out.read_bytes() == b"keep"
    tfgraph.write_graph_onnx(GOLDEN_GRAPHS / "gru_1l_uni_v1.pb", out, force=True)
    onnx.checker.check_model(onnx.load(str(out)), full_check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists.onnx", "junk.pb"]


def test_half_and_double_nodes_compute_in_float32(tmp_path):
    """A float16 node's model takes and returns float16 (computed in float32 between casts); a float64 one is
    rounded to float32, with a warning, and still matches cuDNN's own float64 run to float32's precision."""
    z = np.load(FIXTURES / "cudnn-golden" / "gru_1l_uni.npz")
    model, facts = tfgraph.build(_graph(tmp_path, "h.pb", dtype="float16"))
    y = _run(model, {"x": z["x"].astype(np.float16), "h0": z["h0"].astype(np.float16)})["y"]
    assert y.dtype == np.float16 and facts["warnings"] == [] and float(np.abs(y - z["y"]).max()) < 5e-3
    model, facts = tfgraph.build(_graph(tmp_path, "d.pb", dtype="float64"))
    y = _run(model, {"x": z["x"].astype(np.float64), "h0": z["h0"].astype(np.float64)})["y"]
    assert y.dtype == np.float64 and float(np.abs(y - z["y_f64"]).max()) <= STRICT
    assert facts["warnings"] == ["CudnnRNN 'rnn': float64, computed in float32"]


def test_consumed_reserve_space_is_an_empty_tensor(tmp_path):
    z = np.load(FIXTURES / "cudnn-golden" / "gru_1l_uni.npz")
    model, facts = tfgraph.build(_graph(tmp_path, "r.pb", extra=(1, 3)))
    outs = _run(model, {"x": z["x"], "h0": z["h0"]})
    assert facts["outputs"] == ["y", "hy", "rs"] and outs["rs"].size == 0
    assert float(np.abs(outs["hy"] - z["hy"]).max()) <= STRICT


@pytest.mark.slow   # one tf_keras interpreter per case: ~30 s each on the shared 2-core machine
@pytest.mark.parametrize("name", ["tf_keras_cudnngru", "tf_keras_cudnnlstm"])
def test_a_tf_keras_savedmodel_converts_like_its_hdf5_twin_computes(name, tmp_path):
    """tf.keras 2.x ``model.save(dir, save_format="tf")`` of CuDNNGRU/CuDNNLSTM models (``CudnnRNNV3`` traced
    directly, no CPU twin) -> ONNX, against tf_keras running the HDF5 twin with CPU twins (tests/tf_keras_twins.py)."""
    from tf_keras_twins import reference

    x = np.random.default_rng(392).standard_normal((3, 7, 3)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    reference(FIXTURES / "graphs" / f"{name}.h5", tmp_path / "x.npy", tmp_path / "ref.npy")
    model, facts = tfgraph.build(FIXTURES / "graphs" / name)
    got = _run(model, {facts["inputs"][0]: x})[facts["outputs"][0]]
    ref = np.load(tmp_path / "ref.npy")
    assert got.shape == ref.shape and float(np.abs(got - ref).max()) <= 1e-5, float(np.abs(got - ref).max())
    assert tfgraph.leftover_ops(model) == []


def test_batch_major_states_in_the_shape_tensorflow_demands(tmp_path):
    """``time_major=false`` with the states shaped ``[batch, layers*dirs, units]``, as TensorFlow's kernel demands
    (``cudnn_rnn_ops.cc`` ``ExtractForwardInput``): their memory is cuDNN's ``[layers*dirs, batch, units]``
    (``CreateForwardAndBackwardIODescriptors``), so golden ``h0`` goes in reshaped, not transposed, and ``hy``
    comes back the same way.  A transposed reading (the other plausible one) is far off."""
    import tensorflow as tf

    z = np.load(FIXTURES / "cudnn-golden" / "gru_2l_bidir.npz")
    cfg = json.loads(str(z["config"]))
    LD, B, H = 2 * cfg["L"], cfg["B"], cfg["H"]
    g = tf.Graph()
    with g.as_default():
        v1 = tf.compat.v1
        x = v1.placeholder(tf.float32, [None, None, cfg["I"]], name="x")
        h0 = v1.placeholder(tf.float32, [None, LD, H], name="h0")
        lengths = v1.placeholder(tf.int32, [None], name="lengths")
        out = tf.raw_ops.CudnnRNNV3(input=x, input_h=h0, input_c=tf.constant(0.0), params=tf.constant(z["opaque"]),
                                    sequence_lengths=lengths, rnn_mode="gru", direction="bidirectional",
                                    time_major=False, is_training=False, name="rnn")
        tf.identity(out[0], name="y")
        tf.identity(out[1], name="hy")
    path = tmp_path / "bt.pb"
    path.write_bytes(g.as_graph_def().SerializeToString())
    model, _ = tfgraph.build(path)
    feed = {"x": z["x"].transpose(1, 0, 2), "lengths": z["seq_lengths"].astype(np.int32)}
    outs = _run(model, {**feed, "h0": z["h0"].reshape(B, LD, H)})
    assert float(np.abs(outs["y"] - z["y"].transpose(1, 0, 2)).max()) <= STRICT
    assert outs["hy"].shape == (B, LD, H) and float(np.abs(outs["hy"] - z["hy"].reshape(B, LD, H)).max()) <= STRICT
    transposed = _run(model, {**feed, "h0": z["h0"].transpose(1, 0, 2)})
    assert float(np.abs(transposed["y"] - z["y"].transpose(1, 0, 2)).max()) > 1e-3


# --------------------------------------------------------------------------- through the command line

def _cli(*args):
    """The CLI in-process; no exception may escape it (an exit code is gruconv's own)."""
    from click.testing import CliRunner

    from gruconv.cli import main

    res = CliRunner().invoke(main, [str(a) for a in args])
    escaped = res.exception if not isinstance(res.exception, (SystemExit, type(None))) else None
    assert escaped is None, f"{type(escaped).__name__}: {escaped}"
    return res


# the LSTM graph through the command line is the slow tier's (a fresh TensorFlow child, 5-7 s: issue 47); its
# whole-graph ONNX is checked quickly through the API above (QUICK)
@pytest.mark.parametrize("name", ["gru_2l_bidir_canonical_savedmodel",
                                  pytest.param("lstm_2l_bidir_varlen_v3_bt", marks=pytest.mark.slow)])
def test_convert_graph_to_onnx_on_the_command_line(name, tmp_path):
    """``gruconv convert GRAPH model.onnx``: the whole graph, each node's row naming the ONNX operators."""
    out = tmp_path / "model.onnx"
    res = _cli("convert", FIXTURES / "graphs_golden" / MANIFEST[name]["file"], out)
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == f"wrote {out}"
    assert "-> ONNX opset 17: " in res.output
    model = onnx.load(str(out))
    assert not [op for op in _ops(model) if op.startswith("CudnnRNN")]
    assert max(_errors(name, model).values()) <= STRICT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]


def test_the_command_line_prints_no_tensorflow_start_up_lines(tmp_path):
    """A user's terminal sees gruconv's lines only: TensorFlow's C++ logs (oneDNN, CUDA probing) are silenced
    before it loads, which the whole-graph writer is the first to do."""
    import subprocess
    import sys

    out = tmp_path / "m.onnx"
    r = subprocess.run([sys.executable, "-m", "gruconv", "convert", str(FIXTURES / "graphs" / "keras3_export"), str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stderr == "" and r.stdout.startswith(f"wrote {out}\n"), r.stderr[-2000:]
