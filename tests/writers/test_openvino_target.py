"""The OpenVINO IR target (``out.xml`` + ``out.bin``) through the CLI (issue 46, the OpenVINO half).

Every input that gives bare stacks (TF1 checkpoints, TF2 checkpoints, weights-only Keras files, a graph's cuDNN
nodes) converts to one IR per stack, ``GRUSequence(linear_before_reset=True)`` / ``LSTMSequence`` per layer,
float32 weights, and ``verify`` runs it on OpenVINO's CPU plugin at f32 through the same stack checks as the
torch/ONNX outputs.  Planted errors in the IR (a gate swap, a dropped recurrent bias, fp16 weights, bf16
inference) fail verify (exit 1); a full Keras model and ``--mask-input`` are refused in one line; ``.xml`` and
``.bin`` are placed all or nothing.  The sweep over every TF1 fixture is ``slow``; a few run in the quick tier.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_parity_failure
from test_targets_cli import FIX, HINTS, MULTI, TF1, digest, run

ov = pytest.importorskip("openvino")  # the extra ``gruconv[openvino]``; make setup installs it

QUICK = {"tf1/layer_bidir", "tf1_lstm/layer_uni", "tf1/multi_stack"}


def _marks(case):
    return () if case in QUICK else (pytest.mark.slow,)


def ops_of(xml: Path) -> list:
    """``[(type, linear_before_reset)]`` of the IR's recurrent operators."""
    from gruconv.writers.openvino import ir

    return [(t, a.get("linear_before_reset")) for t, a in ir.sequence_ops(ov.Core().read_model(str(xml)))]


def convert_and_verify(case: str, out: Path, *extra, verify_extra=()) -> dict:
    hints = HINTS.get(case, [])
    before = digest(FIX / case)
    r = run("convert", FIX / case, out, *hints, *extra)
    assert r.exit_code == 0, r.output
    v = run("verify", FIX / case, out, *hints, *verify_extra, "--json", out.parent / "verdict.json")
    assert v.exit_code == 0, v.output
    rep = json.loads((out.parent / "verdict.json").read_text())
    assert rep["passed"] and rep["checks"] and all(c["passed"] for c in rep["checks"])
    assert rep["environment"]["converted_by"][0].startswith("OpenVINO ")
    assert "INFERENCE_PRECISION_HINT=f32" in rep["environment"]["converted_by"][0]
    assert digest(FIX / case) == before  # inputs never modified
    return rep


@pytest.fixture(scope="module")
def bidir_ir(tmp_path_factory):
    """``tf1/layer_bidir`` (2-layer bidirectional GRU) as an IR, converted once."""
    out = tmp_path_factory.mktemp("ir") / "good.xml"
    r = run("convert", FIX / "tf1/layer_bidir", out)
    assert r.exit_code == 0, r.output
    return out


# --------------------------------------------------------------------------- every stack input

@pytest.mark.parametrize("case", [pytest.param(c, marks=_marks(c)) for c in TF1])
def test_tf1_to_openvino(case, tmp_path):
    """One IR per stack (several stacks: a directory of them and rest.npz), native sequence ops, verified."""
    cell = "LSTMSequence" if case.startswith("tf1_lstm") else "GRUSequence"
    if case in MULTI:
        out = tmp_path / "models"
        rep = convert_and_verify(case, out, "--format", "openvino")
        xmls = sorted(out.glob("*.xml"))
        assert len(xmls) == 2 and all(p.with_suffix(".bin").is_file() for p in xmls)
        assert len({c["name"].split(":")[0] for c in rep["checks"]}) == 2
    else:
        out = tmp_path / "out.xml"
        convert_and_verify(case, out)
        assert out.with_suffix(".bin").is_file()
        xmls = [out]
    for xml in xmls:
        ops = ops_of(xml)
        assert ops and all(t == cell for t, _ in ops)
        assert all(lbr is True for _, lbr in ops) if cell == "GRUSequence" else True


@pytest.mark.parametrize("case,files", [("tf2/ckpt_seq", 2), ("keras/weights_only.h5", 2),
                                        pytest.param("keras_lstm/weights_only.h5", 3, marks=pytest.mark.slow)])
def test_several_rnns_to_a_directory(case, files, tmp_path):
    """A TF2 checkpoint or a weights-only Keras file with several cuDNN RNNs: one IR per RNN in a directory;
    to one .xml: one usage line naming the directory form, nothing written."""
    r = run("convert", FIX / case, tmp_path / "one.xml")
    assert r.exit_code == 2 and "--format openvino" in r.output and len(r.output.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
    out = tmp_path / "models"
    convert_and_verify(case, out, "--format", "openvino")
    assert len(list(out.glob("*.xml"))) == files == len(list(out.glob("*.bin")))


def test_weights_only_one_rnn_to_one_file(tmp_path):
    """A weights-only file with one cuDNN RNN (a Bidirectional CuDNNLSTM) is one .xml + .bin."""
    out = tmp_path / "out.xml"
    convert_and_verify("trained/bilstm_weights.h5", out)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".json") == ["out.bin", "out.xml"]


#: Full Keras models (every input kind that carries an architecture): one IR of the whole model.
FULL = {"keras/sequential.h5": (), "keras_lstm/bidir_concat.h5": (), "tf_keras_zip/gru.keras": (),
        "graphs/tf_keras_cudnngru": (), "graphs/tf_keras_gru_lstm": (),
        "keras/weights_only.h5": ("--config", str(FIX / "keras/weights_only.json")),
        "keras/functional_two_gru.h5": (), "trained/bilstm.h5": (), "tf_keras_zip/nested.keras": ()}
QUICK_FULL = {"keras/sequential.h5", "tf_keras_zip/gru.keras"}  # the SavedModels (17 s each here): slow


@pytest.mark.parametrize("case", [pytest.param(c, marks=() if c in QUICK_FULL else (pytest.mark.slow,))
                                  for c in FULL])
def test_full_keras_model_to_one_ir(case, tmp_path):
    """A full Keras model (legacy HDF5, weights-only with --config, tf_keras zip, tf.keras SavedModel -- one that
    already serves on a CPU too: the user asked for an IR, they get one): one IR of the whole model, native
    sequence ops only, verified end to end against the model built in memory and the originals."""
    out = tmp_path / "model.xml"
    rep = convert_and_verify(case, out, *FULL[case], verify_extra=FULL[case])
    ops = ops_of(out)
    assert ops and all(t in ("GRUSequence", "LSTMSequence") for t, _ in ops)
    assert all(lbr is True for t, lbr in ops if t == "GRUSequence")
    rows = [c for c in rep["checks"] if c["name"].startswith("OpenVINO: model output")]  # vs the converted Keras 3 model
    assert rows and all(c["passed"] for c in rows)


def test_full_model_fp16_weights_fail_verify(tmp_path):
    """The whole model's IR saved with OpenVINO's default fp16 weights: verify fails (exit 1)."""
    good, bad = tmp_path / "good.xml", tmp_path / "bad.xml"
    assert run("convert", FIX / "trained/bilstm.h5", good).exit_code == 0
    _plant(good, bad, fp16=True)
    r = run("verify", FIX / "trained/bilstm.h5", bad)
    assert_parity_failure(r)


def test_stateful_model_refused_nothing_written(tmp_path):
    """A stateful model's IR does not compile on the CPU plugin: one line, exit 3, neither file."""
    r = run("convert", FIX / "keras/stateful.h5", tmp_path / "s.xml")
    assert r.exit_code == 3 and "cannot compile" in r.output and len(r.output.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


# each graph's params come from a bounded TensorFlow child (~11 s here): the bidirectional skip-input one is slow
@pytest.mark.parametrize("case", ["graphs/frozen_gru.pb",
                                  pytest.param("graphs/frozen_gru_bidir_skip.pbtxt", marks=pytest.mark.slow)])
def test_graph_cudnn_node_to_openvino(case, tmp_path):
    """A graph holding one cuDNN node: its stack (params as the graph computes them) as one IR."""
    out = tmp_path / "node.xml"
    convert_and_verify(case, out)
    assert [t for t, _ in ops_of(out)] == ["GRUSequence"]


@pytest.mark.slow
def test_graph_cudnn_nodes_to_a_directory(tmp_path):
    """A Keras 3 export made on a GPU (4 CudnnRNNV3 nodes): one IR per node in a directory."""
    out = tmp_path / "nodes"
    convert_and_verify("graphs/keras3_export", out, "--format", "openvino")
    assert len(list(out.glob("*.xml"))) == 4 == len(list(out.glob("*.bin")))


# --------------------------------------------------------------------------- planted errors

def _plant(src: Path, dst: Path, *, port: int = 4, change=None, fp16: bool = False) -> None:
    """``src``'s IR with the first sequence op's input ``port`` (GRUSequence: 3 W, 4 R, 5 B) changed by
    ``change(array) -> array``, saved at ``dst`` (``fp16``: with OpenVINO's default fp16 weights)."""
    from openvino import opset13 as ops

    model = ov.Core().read_model(str(src))
    if change is not None:
        node = next(n for n in model.get_ordered_ops() if n.get_type_name() in ("GRUSequence", "LSTMSequence"))
        const = node.input_value(port).get_node()
        assert const.get_type_name() == "Constant"
        new = ops.constant(change(const.get_data().copy()))
        node.input(port).replace_source_output(new.output(0))
    ov.save_model(model, str(dst), compress_to_fp16=fp16)


def _swap_gates(a):
    H = a.shape[2]  # R: (dirs, 3H, H), OpenVINO's gate order z, r, h
    a[:, :H], a[:, H:2 * H] = a[:, H:2 * H].copy(), a[:, :H].copy()
    return a


@pytest.mark.parametrize("plant", ["gate swap", "dropped recurrent bias", "fp16 weights"])
def test_planted_error_fails_verify(plant, bidir_ir, tmp_path, monkeypatch):
    """A gate swap and fp16 weights planted in a good IR; a dropped recurrent bias planted in the writer (the
    stack's recurrent biases left out where its ONNX model is built, as a packing bug would)."""
    bad = tmp_path / "bad.xml"
    if plant == "gate swap":
        _plant(bidir_ir, bad, port=4, change=_swap_gates)
    elif plant == "dropped recurrent bias":
        from gruconv.writers.onnx import graph

        real = graph.stacked_blocks

        def no_recurrent_bias(*a, **k):
            W, R, Wb, Rb = real(*a, **k)
            return W, R, Wb, np.zeros_like(Rb)

        monkeypatch.setattr(graph, "stacked_blocks", no_recurrent_bias)
        assert run("convert", FIX / "tf1/layer_bidir", bad).exit_code == 0
        monkeypatch.setattr(graph, "stacked_blocks", real)
    else:
        _plant(bidir_ir, bad, fp16=True)
        types = {str(n.get_output_element_type(0)) for n in ov.Core().read_model(str(bad)).get_ordered_ops()
                 if n.get_type_name() == "Constant"}
        assert "<Type: 'float16'>" in types  # the plant took
    assert run("verify", FIX / "tf1/layer_bidir", bidir_ir).exit_code == 0
    r = run("verify", FIX / "tf1/layer_bidir", bad)
    assert_parity_failure(r)
    assert "parity: FAIL" in r.output


def _has_bf16() -> bool:
    caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    return "BF16" in caps


@pytest.mark.skipif(not _has_bf16(), reason="this CPU has no bf16: OpenVINO's CPU plugin runs bf16 hints at f32")
def test_bf16_inference_fails_verify(bidir_ir, monkeypatch):
    """Compiled with OpenVINO's bf16 hint (the CPU plugin's default on CPUs with bf16), the same IR fails."""
    from gruconv.writers import openvino as target

    monkeypatch.setattr(target, "PRECISION", "bf16")
    r = run("verify", FIX / "tf1/layer_bidir", bidir_ir, "--steps", "20")
    assert_parity_failure(r)


def test_masked_ir_is_refused_and_would_be_wrong(tmp_path, monkeypatch):
    """``--mask-input``: one line, exit 3, nothing written; the masked IR it refuses (built here past the
    refusal) fails verify: OpenVINO's CPU plugin ignores sequence_lens (the measured reason)."""
    from gruconv.writers import openvino as target

    r = run("convert", FIX / "tf1/layer_varlen", tmp_path / "m.xml", "--mask-input")
    assert r.exit_code == 3 and "sequence_lens" in r.output and len(r.output.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
    original = target.write

    def write_past_the_refusal(document, t, options):
        entry = document.stacks[t.stack]
        target._write_one(entry.stack, t.tmp, target._bin_tmp(t), t.path, initial_state=False, mask_input=True,
                          warnings=t.warnings)
        return {}

    monkeypatch.setattr(target, "write", write_past_the_refusal)
    assert run("convert", FIX / "tf1/layer_varlen", tmp_path / "m.xml", "--mask-input").exit_code == 0
    monkeypatch.setattr(target, "write", original)
    r = run("verify", FIX / "tf1/layer_varlen", tmp_path / "m.xml")
    assert_parity_failure(r)


# --------------------------------------------------------------------------- placement: .xml and .bin together

def test_existing_bin_is_an_existing_output(tmp_path):
    """An ``out.bin`` already there is refused without --force (exit 3, untouched, no .xml written) and
    replaced with it, as the output itself."""
    out = tmp_path / "out.xml"
    out.with_suffix(".bin").write_bytes(b"mine")
    r = run("convert", FIX / "tf1/layer_uni", out)
    assert r.exit_code == 3 and "out.bin" in r.output and len(r.output.strip().splitlines()) == 1
    assert out.with_suffix(".bin").read_bytes() == b"mine" and not out.exists()
    assert run("convert", FIX / "tf1/layer_uni", out, "--force").exit_code == 0
    assert out.with_suffix(".bin").read_bytes() != b"mine"
    assert run("verify", FIX / "tf1/layer_uni", out).exit_code == 0


def test_a_failed_check_leaves_neither_file(tmp_path, monkeypatch):
    """The IR is checked before it is placed; a failing check (here: the probe run) leaves no .xml, no .bin,
    no temporary file."""
    from gruconv.errors import OutputError
    from gruconv.writers.openvino import ir

    def broken(compiled, where):
        raise OutputError("the OpenVINO IR does not run on the CPU plugin (planted); nothing written", path=where)

    monkeypatch.setattr(ir, "probe", broken)
    r = run("convert", FIX / "tf1/layer_uni", tmp_path / "out.xml")
    assert r.exit_code == 3 and "planted" in r.output
    assert list(tmp_path.iterdir()) == []


def test_non_native_ops_are_refused(tmp_path, monkeypatch):
    """An IR whose GRU is not GRUSequence(linear_before_reset=True) is never placed (reset-before planted)."""
    from gruconv.writers.onnx import graph

    monkeypatch.setitem(graph.OP_ATTRS, "gru", {"linear_before_reset": 0})
    r = run("convert", FIX / "tf1/layer_uni", tmp_path / "out.xml")
    assert r.exit_code == 3 and "linear_before_reset=False" in r.output, r.output
    assert list(tmp_path.iterdir()) == []


def test_convert_verify_places_both(tmp_path):
    out = tmp_path / "v.xml"
    r = run("convert", FIX / "tf1_lstm/layer_uni", out, "--verify")
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.bin", "v.xml", "v.xml.rest.npz"]


def test_without_openvino_one_line(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "openvino", None)
    r = run("convert", FIX / "tf1/layer_uni", tmp_path / "out.xml")
    assert r.exit_code == 3 and "pip install 'gruconv[openvino]'" in r.output
    assert len(r.output.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


def test_verify_refuses_a_foreign_ir(tmp_path):
    """An IR gruconv did not write (no stack facts in its rt_info): one line, exit 3."""
    from openvino import opset13 as ops

    x = ops.parameter([1, 2, 5], np.float32, name="x")
    ov.save_model(ov.Model([ops.relu(x)], [x], "relu"), str(tmp_path / "relu.xml"))
    r = run("verify", FIX / "tf1/layer_uni", tmp_path / "relu.xml")
    assert r.exit_code == 3 and "not an OpenVINO IR gruconv wrote" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1


def test_initial_state_interface_verifies(tmp_path):
    """--initial-state adds h0 (c0); verify drives it."""
    out = tmp_path / "s.xml"
    convert_and_verify("tf1_lstm/layer_uni", out, "--initial-state")
    assert [p.get_any_name() for p in ov.Core().read_model(str(out)).inputs] == ["x", "h0", "c0"]


# --------------------------------------------------------------------------- inspect, batch

def test_inspect_shows_the_openvino_target():
    r = run("inspect", FIX / "tf1/layer_bidir")
    assert r.exit_code == 0
    assert ("openvino: OpenVINO IR: 2 x GRUSequence(hidden_size=7, direction=bidirectional, "
            "linear_before_reset=True)") in r.output


def test_batch_format_openvino(tmp_path):
    out = tmp_path / "out"
    r = run("convert", FIX / "tf1/multi_stack", FIX / "tf1/layer_uni", "--out-dir", out, "--format", "openvino",
            "--jobs", "1")
    assert r.exit_code == 0, r.output
    assert {p.name for p in out.iterdir() if not p.name.startswith(".")} == {
        "multi_stack", "layer_uni.xml", "layer_uni.bin", "layer_uni.xml.rest.npz"}
    assert sorted(p.name for p in (out / "multi_stack").iterdir()) == [
        "decoder__cudnn_gru.bin", "decoder__cudnn_gru.xml", "encoder__cudnn_gru.bin", "encoder__cudnn_gru.xml",
        "rest.npz"]
