"""verify of a graph holding cuDNN ops, end to end: the original graph (each cuDNN node computed by the float64
oracle from its own inputs, :mod:`gruconv.verify.reference.tf_graph`) against the converted SavedModel and the
whole graph as ONNX on every serving_default output (:mod:`gruconv.verify.tfgraph`), beside each node's check.

The reference itself is checked against real cuDNN: on every golden graph (``fixtures/graphs_golden``, real
cuDNN 9.19 buffers and outputs) it gives cuDNN's ``y``/``hy``/``cy``."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, assert_parity_failure
from gruconv.cli import main
from gruconv.model import target_gates

pytestmark = pytest.mark.xdist_group("test_graph_end_to_end")

LABEL = "end to end (whole graph as ONNX)"
SM_LABEL = "end to end (converted SavedModel)"
GOLDEN_GRAPHS = FIXTURES / "graphs_golden"
GOLDEN = json.loads((GOLDEN_GRAPHS / "manifest.json").read_text())["fixtures"]
#: The golden graph the reader refuses (an LSTM with projections).
REFUSED = {"lstm_2l_bidir_proj_v3"}


def run(*args):
    """The CLI in-process; no exception may escape it (an exit code is gruconv's own)."""
    res = CliRunner().invoke(main, [str(a) for a in args])
    escaped = res.exception if not isinstance(res.exception, (SystemExit, type(None))) else None
    assert escaped is None, f"{type(escaped).__name__}: {escaped}"
    return res


def _rows(path) -> dict:
    return {c["name"]: c for c in json.loads(path.read_text())["checks"]}


@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow

    return tensorflow


def _laid_out(a, layout: str):
    """A golden (time-major) array as the graph takes it (``fixtures/graphs_golden/manifest.json``)."""
    if layout == "bt":
        return a.transpose(1, 0, 2)
    if layout == "mem":
        return a.reshape(a.shape[1], a.shape[0], a.shape[2])
    return a


def _reference_outputs(tf, name, tmp_path) -> tuple:
    from gruconv.readers.tfgraph import read
    from gruconv.verify.reference.tf_graph import original

    m = GOLDEN[name]
    golden = np.load(FIXTURES / m["golden"])
    ref = original(read(GOLDEN_GRAPHS / m["file"]).document().tf_graph, tmp_path / "original")
    fn = tf.saved_model.load(str(ref)).signatures["serving_default"]
    feeds = {k: _laid_out(golden[f["golden"]], f["layout"]) for k, f in m["feeds"].items()}
    with tf.device("/CPU:0"):
        got = {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in feeds.items()}).items()}
    want = {k: _laid_out(golden[f["golden"]], f["layout"]) for k, f in m["fetches"].items()}
    return got, want


#: Golden graphs whose reference is built in the quick tier (Const, in-graph-packed params from variables, a
#: batch-major variable-length LSTM: the same three as ``tests/writers/test_graph_stacks.py``); the other eleven
#: in the slow tier (CI).
QUICK_GOLDEN = {"gru_1l_uni_v1", "gru_2l_bidir_canonical_savedmodel", "lstm_2l_bidir_varlen_v3_bt"}


@pytest.mark.parametrize("name", [n if n in QUICK_GOLDEN else pytest.param(n, marks=pytest.mark.slow)
                                  for n in sorted(set(GOLDEN) - REFUSED)])
def test_the_reference_graph_computes_what_real_cudnn_computed(tf, name, tmp_path):
    """The original graph with its cuDNN nodes computed by the oracle: every fetch within 5e-7 of real cuDNN's
    strict-fp32 output (the nodes' params as the graph holds them: Const, variable, packed in the graph)."""
    got, want = _reference_outputs(tf, name, tmp_path)
    assert sorted(got) == sorted(want)
    worst = {k: float(np.max(np.abs(got[k].astype(np.float64) - want[k]))) for k in want}
    assert max(worst.values()) < 5e-7, worst


def _planted_errors_reach_the_graph_runs(monkeypatch) -> None:
    """The graph runs (verify's reference, the writers' checks) happen in a bounded child process
    (:mod:`gruconv.tf.bounded`), where this test's monkeypatches would not be: run them in place, as a run
    inside such a child does, so the planted error is in the code that runs."""
    from gruconv.tf import bounded

    monkeypatch.setattr(bounded, "_in_child", True)


def test_the_reference_comparison_can_fail(tf, tmp_path, monkeypatch):
    """The check above is not vacuous: the oracle's GRU with its reset and update gates swapped is far off."""
    from gruconv.verify.reference import oracle

    gru = oracle.STEPS["gru"]
    monkeypatch.setitem(oracle.STEPS, "gru", lambda xw, hr, h, c: gru([xw[1], xw[0], xw[2]], [hr[1], hr[0], hr[2]], h, c))
    got, want = _reference_outputs(tf, "gru_2l_uni_v2", tmp_path)
    assert min(float(np.max(np.abs(got[k] - want[k]))) for k in want) > 1e-3


@pytest.mark.parametrize("src, outputs, signatures", [
    (FIXTURES / "graphs" / "keras3_export", ["output_0"], ["serve"]),  # Keras's export: two signatures
    (GOLDEN_GRAPHS / "lstm_2l_bidir_varlen_v3_bt.pb", ["cy", "hy", "y"], []),
    # a SavedModel of one signature: the slow tier's (issue 47); keras3_export above is a SavedModel quickly
    pytest.param(GOLDEN_GRAPHS / "gru_2l_bidir_canonical_savedmodel", ["hy", "y"], [], marks=pytest.mark.slow),
])
def test_verify_compares_every_output_of_both_conversions_with_the_original(tmp_path, src, outputs, signatures):
    """Every serving_default output of both conversions; every output of the SavedModel's other signatures."""
    res = run("verify", src, "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rows = _rows(tmp_path / "r.json")
    sm = outputs + [f"{s}: {k}" for s in signatures for k in outputs]
    assert sorted(k[len(SM_LABEL) + 2:] for k in rows if k.startswith(SM_LABEL)) == sorted(sm)
    assert sorted(k[len(LABEL) + 2:] for k in rows if k.startswith(LABEL)) == outputs
    assert all(c["passed"] for k, c in rows.items() if k.startswith("end to end"))


def test_a_planted_error_in_the_onnx_output_fails_its_end_to_end_rows(tmp_path, monkeypatch):
    """An ONNX output with gate blocks left in cuDNN's order: each node's check (the SavedModel replacement
    against the reference) and the SavedModel's end-to-end rows pass; the ONNX rows fail, exit 1."""
    _planted_errors_reach_the_graph_runs(monkeypatch)
    src, bad = GOLDEN_GRAPHS / "gru_2l_uni_v2.pb", tmp_path / "bad.onnx"
    monkeypatch.setitem(target_gates.TARGET_GATE_NAMES["onnx"], "gru", target_gates.CELLS["gru"].gates)
    assert run("convert", src, bad).exit_code == 0
    monkeypatch.undo()
    res = run("verify", src, bad, "--json", tmp_path / "r.json")
    assert_parity_failure(res)
    failed = sorted(k for k, c in _rows(tmp_path / "r.json").items() if not c["passed"])
    assert failed == [f"{LABEL}: hy", f"{LABEL}: y"], failed


def test_a_planted_error_in_the_saved_model_fails_its_rows(tmp_path, monkeypatch):
    """The SavedModel's GRU with reset and update gates swapped: its node rows and its end-to-end rows fail,
    the ONNX rows pass, exit 1."""
    _planted_errors_reach_the_graph_runs(monkeypatch)
    from gruconv.tf import equations

    gru = equations.STEPS["gru"]
    monkeypatch.setitem(equations.STEPS, "gru",
                        lambda tf_, xw, hr, h, c: gru(tf_, [xw[1], xw[0], xw[2]], [hr[1], hr[0], hr[2]], h, c))
    res = run("verify", GOLDEN_GRAPHS / "gru_2l_uni_v2.pb", "--json", tmp_path / "r.json")
    assert_parity_failure(res)
    rows = _rows(tmp_path / "r.json")
    assert not any(c["passed"] for k, c in rows.items() if k.startswith(SM_LABEL))
    assert all(c["passed"] for k, c in rows.items() if k.startswith(LABEL))


def test_without_tf2onnx_the_report_says_what_was_not_checked(tmp_path, monkeypatch):
    import sys

    _planted_errors_reach_the_graph_runs(monkeypatch)

    monkeypatch.setitem(sys.modules, "tf2onnx", None)  # import tf2onnx: ModuleNotFoundError, as uninstalled
    res = run("verify", GOLDEN_GRAPHS / "gru_1l_uni_v1.pb", "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert not any(c["name"].startswith(LABEL) for c in report["checks"])
    assert [c["passed"] for c in report["checks"] if c["name"].startswith(SM_LABEL)] == [True, True]
    assert any(n.startswith(f"{LABEL}: not checked, tf2onnx is not installed") for n in report["notes"]), report["notes"]


def test_an_error_both_conversions_share_is_caught_by_the_original(tmp_path, monkeypatch):
    """A ``time_major`` the node leaves at TensorFlow's default (true) read as false by both conversions: they
    agree with each other (so comparing them finds nothing) and each node's own check passes (it runs the
    replacement as read); only the original graph, whose reference reads the NodeDef with TensorFlow's op
    registry, fails every end-to-end row, exit 1."""
    _planted_errors_reach_the_graph_runs(monkeypatch)
    from tensorflow.core.framework import graph_pb2

    from gruconv.model import cudnn_ops
    from gruconv.writers.onnx import tfgraph

    g = graph_pb2.GraphDef()
    g.ParseFromString((GOLDEN_GRAPHS / "gru_2l_bidir_varlen_v3.pb").read_bytes())
    for n in g.node:
        if n.op == "CudnnRNNV3":
            del n.attr["time_major"]  # the default: the same graph
    src = tmp_path / "default_time_major.pb"
    src.write_bytes(g.SerializeToString())
    res = run("verify", src, "--json", tmp_path / "ok.json")
    assert res.exit_code == 0, res.output
    attr = tfgraph._attr
    monkeypatch.setitem(cudnn_ops.ATTR_DEFAULTS, "time_major", False)
    monkeypatch.setattr(tfgraph, "_attr", lambda node, key: False if key == "time_major" else attr(node, key))
    res = run("verify", src, "--json", tmp_path / "r.json")
    assert_parity_failure(res)
    rows = _rows(tmp_path / "r.json")
    ends = {k: c["passed"] for k, c in rows.items() if k.startswith("end to end")}
    assert sorted(ends) == [f"{SM_LABEL}: hy", f"{SM_LABEL}: y", f"{LABEL}: hy", f"{LABEL}: y"]
    assert not any(ends.values())
    assert all(c["passed"] for k, c in rows.items() if not k.startswith("end to end"))


def test_integer_token_inputs_with_a_mask_convert_and_verify(tmp_path):
    """A Keras 3 model with ``Embedding(mask_zero=True)`` saved by ``tf.saved_model.save``: its graph asserts the
    mask is right-padded (cuDNN's condition), so the serve check and verify feed token ids of 1 and up, not 0."""
    src, out = FIXTURES / "graphs" / "keras3_tf_saved", tmp_path / "cpu_model"
    res = run("convert", src, out)
    assert res.exit_code == 0, res.output
    res = run("verify", src, out, "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rows = _rows(tmp_path / "r.json")
    assert [k for k in rows if k.startswith("end to end")] == [f"{SM_LABEL}: scores", f"{LABEL}: scores"]
