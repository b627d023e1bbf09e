"""Graphs that hold cuDNN ops (issue 39): SavedModels and frozen GraphDefs, and tf.keras 2.x SavedModels.

Fixtures: ``fixtures/graphs`` (``fixtures/make_graph_fixtures.py``: Keras 3's ``model.export`` traced on its
cuDNN branch, tf_keras's ``model.save(dir, save_format="tf")``, TF1 graphs around ``CudnnRNN``/``V3``).
Their ``manifest.json`` lists every cuDNN node as TensorFlow's own protobuf classes read it; the reader
(no TensorFlow) must find the same.  Independent reference for the tf.keras conversion: tf_keras itself in a
subprocess, each CuDNN layer swapped for its CPU twin and the HDF5 twin's weights loaded by tf_keras's own
``load_weights`` (it converts cuDNN weights itself, ``tf_keras/src/saving/legacy/hdf5_format.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import tf_keras_twins

from bundle_proto import _fb, _fv
from conftest import FIXTURES, assert_parity_failure
from gruconv import api
from gruconv.cli import main as cli
from gruconv.readers import tfgraph
from gruconv.readers import protos

GRAPHS = FIXTURES / "graphs"
MANIFEST = json.loads((GRAPHS / "manifest.json").read_text())["fixtures"]
GPU_ONLY = ("keras3_export", "frozen_gru.pb", "frozen_gru_bidir_skip.pbtxt")  # graphs running cuDNN ops
#: What ``convert`` of a graph of several cuDNN nodes to one model file says (exit 2), before any TensorFlow.
SEVERAL_INTO_ONE = "the graph holds 4 cuDNN node stacks ("


def _run(args, **kw):
    return CliRunner().invoke(cli, [str(a) for a in args], **kw)


def _one_line_error(r, code: int, text: str) -> None:
    assert r.exit_code == code, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gruconv: error: ") and text in lines[0], r.output


def _function(name: str) -> str:
    return next(n["where"] for n in MANIFEST[name]["cudnn_nodes"]).removeprefix("function ")


# --------------------------------------------------------------------------- the protobuf schema

def test_the_schema_field_numbers_are_tensorflows():
    """Every field number in ``protos.SCHEMA`` is the one TensorFlow's and tf_keras's generated classes have."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from tensorflow.core.framework import (attr_value_pb2, function_pb2, graph_pb2, node_def_pb2,
                                           op_def_pb2, tensor_pb2, tensor_shape_pb2)
    from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2, saved_object_graph_pb2 as sog, \
        trackable_object_graph_pb2 as tog
    from tf_keras.protobuf import saved_metadata_pb2

    t = tog.TrackableObjectGraph.TrackableObject
    descriptors = {
        "SavedModel": saved_model_pb2.SavedModel.DESCRIPTOR, "MetaGraphDef": meta_graph_pb2.MetaGraphDef.DESCRIPTOR,
        "GraphDef": graph_pb2.GraphDef.DESCRIPTOR, "FunctionDefLibrary": function_pb2.FunctionDefLibrary.DESCRIPTOR,
        "FunctionDef": function_pb2.FunctionDef.DESCRIPTOR, "OpDef": op_def_pb2.OpDef.DESCRIPTOR,
        "NodeDef": node_def_pb2.NodeDef.DESCRIPTOR, "ArgDef": op_def_pb2.OpDef.ArgDef.DESCRIPTOR,
        "ArgAttrEntry": function_pb2.FunctionDef.DESCRIPTOR.fields_by_name["arg_attr"].message_type,
        "ArgAttrs": function_pb2.FunctionDef.ArgAttrs.DESCRIPTOR,
        "ListValue": attr_value_pb2.AttrValue.ListValue.DESCRIPTOR,
        "NameAttrList": attr_value_pb2.NameAttrList.DESCRIPTOR,
        "TensorShapeProto": tensor_shape_pb2.TensorShapeProto.DESCRIPTOR,
        "Dim": tensor_shape_pb2.TensorShapeProto.Dim.DESCRIPTOR, "TensorProto": tensor_pb2.TensorProto.DESCRIPTOR,
        "AttrEntry": node_def_pb2.NodeDef.DESCRIPTOR.fields_by_name["attr"].message_type,
        "AttrValue": attr_value_pb2.AttrValue.DESCRIPTOR,
        "TrackableObjectGraph": tog.TrackableObjectGraph.DESCRIPTOR, "TrackableObject": t.DESCRIPTOR,
        "ObjectReference": t.ObjectReference.DESCRIPTOR, "SerializedTensor": t.SerializedTensor.DESCRIPTOR,
        "SavedObjectGraph": sog.SavedObjectGraph.DESCRIPTOR, "SavedObject": sog.SavedObject.DESCRIPTOR,
        "SavedUserObject": sog.SavedUserObject.DESCRIPTOR,
        "SavedMetadata": saved_metadata_pb2.SavedMetadata.DESCRIPTOR,
        "SavedObjectMetadata": saved_metadata_pb2.SavedObject.DESCRIPTOR,
    }
    assert set(descriptors) == set(protos.SCHEMA)
    assert function_pb2.FunctionDef.DESCRIPTOR.fields_by_name["attr"].message_type.fields_by_name["key"].number == 1
    for message, fields in protos.SCHEMA.items():
        for name, (number, _) in fields.items():
            assert descriptors[message].fields_by_name[name].number == number, (message, name)


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_every_cudnn_node_is_found_as_tensorflow_reads_it(name):
    """The nodes (op, name, where, the attrs the NodeDef has) are the ones TensorFlow's classes list."""
    gf = tfgraph.graph_file(GRAPHS / name)
    got = sorted(({"op": n.op, "name": n.name, "where": n.where} for n in tfgraph.scan(gf).nodes),
                 key=lambda d: (d["where"], d["name"]))
    want = [{k: n[k] for k in ("op", "name", "where")} for n in MANIFEST[name]["cudnn_nodes"]]
    assert got == want
    by_name = {(n.where, n.name): n for n in tfgraph.scan(gf).nodes}  # tf.keras names every node "CudnnRNNV3"
    for n in MANIFEST[name]["cudnn_nodes"]:
        for attr, value in n["attrs"].items():
            assert getattr(by_name[n["where"], n["name"]], attr) == value, (n["name"], attr)


# --------------------------------------------------------------------------- graphs that only run on a GPU

def test_inspect_lists_each_cudnn_node_with_its_settings():
    r = _run(["inspect", GRAPHS / "keras3_export"])
    assert r.exit_code == 0, r.output
    fn = _function("keras3_export")
    assert r.output.splitlines()[0] == (
        f"{GRAPHS / 'keras3_export'}: SavedModel; 4 cuDNN op(s) (CudnnRNNV3 x4) in function {fn}: runs only on a "
        "GPU; gruconv convert makes a SavedModel that serves on a CPU (each cuDNN node replaced by standard ops)")
    assert (f"  CudnnRNNV3 'functional_1/bi_gru_1/forward_gru_1/CudnnRNNV3' (gru, unidirectional, linear_input, "
            f"time_major=false) in function {fn}: 1 layer(s) x 4 units, unidirectional, input size 3, linear input, "
            "float32; params computed in the graph (ConcatV2)") in r.output
    assert f"  CudnnRNNV3 'functional_1/bi_lstm_1/backward_lstm_1/CudnnRNNV3' (lstm, unidirectional, " in r.output
    r = _run(["inspect", GRAPHS / "frozen_gru_bidir_skip.pbtxt", "--json"])
    assert r.exit_code == 0, r.output
    info = json.loads(r.output)
    assert info["format"] == "tf-graph" and [r["name"] for r in info["rnns"]] == ["cudnn_gru"]
    assert info["rnns"][0]["converts_to"] == ("standard TensorFlow ops (1 layer(s) x 7 units, bidirectional, input "
                                              "size 7, skip input, float32)")
    assert info["cudnn_nodes"] == [{"op": "CudnnRNNV3", "name": "cudnn_gru", "where": "graph", "rnn_mode": "gru",
                                    "direction": "bidirectional", "input_mode": "skip_input", "time_major": True,
                                    "cpu_twin": None, "params_from": "a Const", "problem": None,
                                    "shape": {"input_size": 7, "units": 7, "num_layers": 1, "bidirectional": True,
                                              "input_mode": "skip", "dtype": "float32", "cell": "gru"}}]


@pytest.mark.parametrize("name", sorted(GPU_ONLY))
def test_convert_of_a_graph_running_cudnn_ops_to_a_keras_name_is_never_nothing_to_convert(name, tmp_path):
    """Never "nothing to convert" (exit 0): a ``.keras`` name gets the one cuDNN node's stack
    (:mod:`gruconv.readers.tfgraph.stacks`), or, for several nodes, a usage line (exit 2) with nothing written.
    (verify of these graphs: tests/verify/test_graph_end_to_end.py, tests/writers/test_graph_stacks.py.)"""
    r = _run(["convert", GRAPHS / name, tmp_path / "out.keras"])
    if name == "keras3_export":
        _one_line_error(r, 2, SEVERAL_INTO_ONE)
        assert list(tmp_path.iterdir()) == []
    else:
        assert r.exit_code == 0 and f"wrote {tmp_path / 'out.keras'}\n" in r.output, r.output
        assert "nothing to convert" not in r.output


def test_inspect_convert_and_verify_of_a_graph_import_no_framework(tmp_path):
    """The graphs are walked without TensorFlow, and the refusals are decided from the graph alone (the plan
    refuses a .keras output, and the reader a graph it cannot convert, before any writer): no ML framework is
    imported."""
    sm, out = str(GRAPHS / "keras3_export"), str(tmp_path / "o.keras")
    proj = str(FIXTURES / "graphs_golden" / "lstm_2l_bidir_proj_v3.pb")
    code = ("import sys\nfrom gruconv import api\nfrom gruconv.errors import GruconvError\n"
            f"assert len(api.inspect({sm!r})['cudnn_nodes']) == 4\n"
            f"for f in (lambda: api.convert({sm!r}, {out!r}), lambda: api.verify({proj!r})):\n"
            "    try:\n        f()\n    except GruconvError as e:\n        print(e.exit_code)\n"
            "print(sorted(m for m in ('keras', 'tensorflow', 'torch', 'jax') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")})
    assert r.stdout.split() == ["2", "3", "[]"], r.stderr[-2000:]


def _saved_model(tmp_path, functions: list) -> Path:
    """A SavedModel directory whose graph's library holds ``functions``: (name, cuDNN op or None, {attr: str})."""
    def attr(k, v):
        return _fb(5, _fb(1, k.encode()) + _fb(2, _fb(2, v.encode())))
    lib = b""
    for name, op, attrs in functions:
        node = _fb(3, _fb(1, f"{name}/rnn".encode()) + _fb(2, op.encode()) + attr("rnn_mode", "gru")) if op else b""
        lib += _fb(1, _fb(1, _fb(1, name.encode())) + node + b"".join(attr(k, v) for k, v in attrs.items()))
    d = tmp_path / "sm"
    d.mkdir()
    (d / "saved_model.pb").write_bytes(_fv(1, 1) + _fb(2, _fb(2, _fb(2, lib))))
    return d


def test_a_graph_whose_cudnn_nodes_all_have_a_cpu_twin_already_serves_on_a_cpu(tmp_path):
    """tf.keras 2.x's implementation selector: the GPU variant (api_preferred_device GPU) has a standard twin
    with the same api_implements; on a CPU the twin runs.  inspect names the twin; convert to stacks alone: one
    line, exit 3, nothing written (issue 46: it exited 0 with nothing written; the graph itself goes to a
    SavedModel directory or OUTPUT.onnx, written as it is: ``tests/readers/test_reader_for.py``); verify: exit 3
    in one line (this hand-made protobuf is no SavedModel TensorFlow loads, and no node is there to check)."""
    d = _saved_model(tmp_path, [("gpu_gru_1", "CudnnRNNV3", {"api_implements": "gru_a", "api_preferred_device": "GPU"}),
                                ("standard_gru_1", None, {"api_implements": "gru_a", "api_preferred_device": "CPU"})])
    r = _run(["inspect", d])
    assert r.exit_code == 0, r.output
    assert "already serves on a CPU" in r.output.splitlines()[0]
    assert "a GPU-only variant: on a CPU its twin standard_gru_1 runs instead" in r.output
    r = _run(["convert", d, tmp_path / "out.keras"])
    _one_line_error(r, 3, "the SavedModel already serves on a CPU: its 1 cuDNN op(s) (CudnnRNNV3) in function gpu_gru_1 "
                          "sit in tf.keras GPU-only variants, each with a standard twin TensorFlow runs instead on a CPU: "
                          "it has no cuDNN node stack to write as .keras; convert it to a SavedModel directory or to "
                          "OUTPUT.onnx (the graph as it is)")
    assert not (tmp_path / "out.keras").exists()


@pytest.mark.slow   # a tf_keras interpreter writes the SavedModel: ~15-30 s
def test_a_tf_keras_savedmodel_of_plain_layers_is_seen_to_serve_on_a_cpu(tmp_path):
    """The same rule on tf_keras's real writer: ``tf.saved_model.save`` of a plain GRU/LSTM model holds
    ``CudnnRNNV3``/``CudnnRNNBackpropV3`` in ``gpu_*_with_fallback`` functions, each with its ``standard_*`` twin."""
    d = tmp_path / "sm"
    code = ('import os, sys\nos.environ["TF_USE_LEGACY_KERAS"]="1"; os.environ["TF_CPP_MIN_LOG_LEVEL"]="3"\n'
            "import tensorflow as tf, tf_keras as K\n"
            "m = K.Sequential([K.layers.Input((5, 3)), K.layers.GRU(4, return_sequences=True), K.layers.LSTM(2)])\n"
            f"tf.saved_model.save(m, {str(d)!r})\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    (d / "keras_metadata.pb").unlink(missing_ok=True)
    info = api.inspect(d)
    assert info["format"] == "tf-graph" and info["cudnn_nodes"]
    assert {n["op"] for n in info["cudnn_nodes"]} <= {"CudnnRNNV3", "CudnnRNNBackpropV3"}
    assert all(n["cpu_twin"] and "standard_" in n["cpu_twin"] for n in info["cudnn_nodes"])
    r = _run(["convert", d, tmp_path / "out.keras"])  # issue 46: exit 0 and nothing written, once
    assert r.exit_code == 3 and "already serves on a CPU" in r.output and "no cuDNN node stack" in r.output, r.output
    assert not (tmp_path / "out.keras").exists()
    r = _run(["convert", d, tmp_path / "cpu_model"])  # the graph as it is
    assert r.exit_code == 0 and (tmp_path / "cpu_model" / "saved_model.pb").is_file(), r.output


def test_one_cudnn_node_without_a_twin_makes_the_graph_gpu_only(tmp_path):
    d = _saved_model(tmp_path, [("gpu_gru_1", "CudnnRNNV3", {"api_implements": "gru_a", "api_preferred_device": "GPU"}),
                                ("standard_gru_1", None, {"api_implements": "gru_a", "api_preferred_device": "CPU"}),
                                ("call", "CudnnRNN", {}),
                                ("gpu_gru_2", "CudnnRNNV3", {"api_implements": "gru_b", "api_preferred_device": "GPU"})])
    r = _run(["convert", d, tmp_path / "out.keras"])
    _one_line_error(r, 3, "SavedModel holds 3 cuDNN op(s) (CudnnRNNV3 x2, CudnnRNN) in function gpu_gru_1, "
                          "function call and 1 more and cannot be converted: CudnnRNN 'call/rnn': sizes not "
                          "determined (input size, units, layers, params size unknown)")


# --------------------------------------------------------------------------- hostile inputs

def _hostile(tmp_path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _bomb_length() -> bytes:  # a node field declaring a 2**40-byte length, then the op name
    return b"\x0a" + bytes([0x80, 0x80, 0x80, 0x80, 0x80, 0x20]) + b"\x12\x08CudnnRNN"


HOSTILE = {
    "truncated.pb": lambda: (GRAPHS / "frozen_gru.pb").read_bytes()[:900],
    "bomb.pb": _bomb_length,
    "garbage.pb": lambda: bytes(np.random.default_rng(39).integers(0, 256, 4000, dtype=np.uint8)) + b"CudnnRNN",
    "wrong_wire.pb": lambda: b"\x08\x05" + _fb(1, _fb(2, b"CudnnRNN")) + b"\x0d\x01\x02",
    "deep.pbtxt": lambda: b"node { " * 5000 + b'op: "CudnnRNN"' + b" }" * 5000,
    "unclosed.pbtxt": lambda: b'node { name: "a" op: "CudnnRNN" attr { key: "rnn_mode" value { s: "gru"',
    "bad_escape.pbtxt": lambda: b'node { name: "\\q" op: "CudnnRNN" }',
    "not_utf8.pbtxt": lambda: b'node { op: "CudnnRNN" name: "\xff\xfe" }',
}


def _full_reads(monkeypatch, name: str) -> list:
    """The graph files read whole (``files.inputs.read_bytes``) while inspecting ``name``'s graph."""
    from gruconv.files import inputs

    real, reads = inputs.read_bytes, []
    monkeypatch.setattr(inputs, "read_bytes",
                        lambda p, *a, **k: reads.append(Path(p).name) or real(p, *a, **k))
    api.inspect(name)
    return [r for r in reads if r.endswith((".pb", ".pbtxt"))]


@pytest.mark.parametrize("name", ["keras3_export", "frozen_gru.pb"])
def test_the_graph_is_read_once_by_the_sniff_and_the_reader_together(name, tmp_path, monkeypatch):
    """The sniff's scan is the reader's (:func:`gruconv.files.inputs.once`): the graph file is read whole once
    (before, twice: the sniff's scan, then the reader's).
    Without the hand-over (``once`` planted to compute every time) the count is 2 again."""
    from gruconv.files import inputs

    def copy(to):  # a file of its own: no earlier answer (the scan's, the detection's) is at hand for it
        (shutil.copytree if (GRAPHS / name).is_dir() else shutil.copyfile)(GRAPHS / name, tmp_path / to)
        return tmp_path / to

    assert len(_full_reads(monkeypatch, copy(f"a_{name}"))) == 1
    monkeypatch.setattr(inputs, "once", lambda path, what, compute: compute())
    assert len(_full_reads(monkeypatch, copy(f"b_{name}"))) == 2


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize("command", ["inspect", "convert"])
def test_a_damaged_graph_naming_cudnn_ops_is_one_line_exit_3(name, command, tmp_path):
    p = _hostile(tmp_path, name, HOSTILE[name]())
    r = _run([command, p] + ([tmp_path / "out.keras"] if command == "convert" else []))
    _one_line_error(r, 3, str(p))
    assert not (tmp_path / "out.keras").exists()


def test_a_damaged_savedmodel_graph_is_one_line_exit_3(tmp_path):
    d = tmp_path / "sm"
    shutil.copytree(GRAPHS / "keras3_export", d)
    data = (d / "saved_model.pb").read_bytes()
    (d / "saved_model.pb").write_bytes(data[: len(data) // 2])
    for command in ("inspect", "verify"):
        _one_line_error(_run([command, d]), 3, "is not a readable SavedModel graph (")


def test_nesting_deep_in_an_unread_field_costs_nothing_and_claims_nothing(tmp_path):
    """A field outside the schema is skipped unread however deeply it nests: no recursion, no cuDNN node
    (the op name inside is a string in a field no graph reads), so the file is no graph of this reader's."""
    inner = b"CudnnRNN"
    for _ in range(2000):
        inner = _fb(7, inner)
    p = _hostile(tmp_path, "deep.pb", _fb(1, _fb(1, b"n") + _fb(2, b"Const") + _fb(9, inner)))
    assert tfgraph.scan(tfgraph.graph_file(p)).nodes == []
    _one_line_error(_run(["inspect", p]), 3, "not a Keras HDF5 file nor a TensorFlow checkpoint")


def test_a_graph_over_the_byte_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setenv("GRUCONV_MAX_BYTES", "1K")
    r = _run(["inspect", GRAPHS / "frozen_gru.pb"])
    assert r.exit_code == 3 and "over the 1 KiB limit" in r.output and "GRUCONV_MAX_BYTES" in r.output, r.output


@pytest.mark.slow   # 5 million fields looked at: 10-60 s on the shared machine
@pytest.mark.parametrize("bomb", ["nodes", "unknown fields", "attrs"])
def test_a_graph_of_millions_of_tiny_fields_is_refused_in_bounded_time_and_memory(bomb, tmp_path):
    """A field takes 2 bytes: 10 MB can hold 5 million.  The walk counts every field it looks at (skipped
    ones too) and refuses past ``MAX_GRAPH_FIELDS``, one line, memory flat (nothing is collected)."""
    import resource
    import time

    from gruconv.files.inputs import MAX_GRAPH_FIELDS

    n = MAX_GRAPH_FIELDS + 1
    cudnn = _fb(1, _fb(1, b"rnn") + _fb(2, b"CudnnRNN"))
    data = {"nodes": b"\x0a\x00" * n + cudnn, "unknown fields": b"\x18\x01" * n + cudnn,
            "attrs": _fb(1, _fb(1, b"rnn") + _fb(2, b"CudnnRNN") + _fb(5, _fb(1, b"x")) * n)}[bomb]
    p = _hostile(tmp_path, "bomb.pb", data)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    r = _run(["inspect", p])
    _one_line_error(r, 3, f"{p}: is a TensorFlow GraphDef with more than {MAX_GRAPH_FIELDS} fields to look at")
    assert time.perf_counter() - t < 300
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) * 1024 < 20 * len(data) + (200 << 20)


def test_a_large_graph_is_scanned_in_linear_time(tmp_path):
    """50,000 nodes, each with a 1 KiB Const payload (50 MiB): every node looked at, payloads stepped over."""
    import time

    node = _fb(1, _fb(1, b"c") + _fb(2, b"Const") + _fb(5, _fb(1, b"value") + _fb(2, b"\0" * 1024)))
    cudnn = _fb(1, _fb(1, b"rnn") + _fb(2, b"CudnnRNN"))
    p = _hostile(tmp_path, "big.pb", node * 50_000 + cudnn)
    t = time.perf_counter()
    nodes = tfgraph.scan(tfgraph.graph_file(p)).nodes
    assert [n.name for n in nodes] == ["rnn"]
    assert time.perf_counter() - t < 30


# --------------------------------------------------------------------------- tf.keras 2.x SavedModels

REFERENCE = tf_keras_twins.SCRIPT  # tf_keras running the HDF5 twin, CuDNN layers as CPU twins

CONVERTED = r'''
import json, os, sys
os.environ.pop("TF_USE_LEGACY_KERAS", None); os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import numpy as np, keras
job = json.loads(sys.argv[1])
model = keras.saving.load_model(job["keras"])
np.save(job["y"], model.predict(np.load(job["x"]), verbose=0))
'''


def _subprocess(script: str, job: dict) -> None:
    r = subprocess.run([sys.executable, "-c", script, json.dumps(job)], capture_output=True, text=True,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.slow   # two interpreters (tf_keras, Keras 3) per case: ~30-60 s each on the shared 2-core machine
@pytest.mark.parametrize("name", ["tf_keras_cudnngru", "tf_keras_cudnnlstm"])
def test_a_tf_keras_savedmodel_converts_like_its_hdf5_twin_computes(name, tmp_path):
    """The done-criterion: ``gruconv convert DIR out.keras`` (no --config: keras_metadata.pb) exits 0, plain
    ``load_model`` opens it, and it computes what tf_keras computes with each CuDNN layer swapped for its CPU
    twin and the HDF5 twin's weights loaded by tf_keras's own load_weights, within 1e-5."""
    out = tmp_path / "out.keras"
    r = _run(["convert", GRAPHS / name, out])
    assert r.exit_code == 0 and r.output.startswith(f"wrote {out}"), r.output
    x = np.random.default_rng(391).standard_normal((3, 7, 3)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    _subprocess(REFERENCE, {"h5": str(GRAPHS / (name + ".h5")), "x": str(tmp_path / "x.npy"),
                            "y": str(tmp_path / "ref.npy")})
    _subprocess(CONVERTED, {"keras": str(out), "x": str(tmp_path / "x.npy"), "y": str(tmp_path / "got.npy")})
    ref, got = np.load(tmp_path / "ref.npy"), np.load(tmp_path / "got.npy")
    assert ref.shape == got.shape and np.max(np.abs(ref - got)) < 1e-5, np.max(np.abs(ref - got))


def test_inspect_reads_the_architecture_from_keras_metadata():
    info = api.inspect(GRAPHS / "tf_keras_cudnngru")
    assert info["format"] == "tf2-checkpoint" and info["kind"] == "model"
    assert info["summary"].startswith("SavedModel variables; architecture from keras_metadata.pb")
    assert [(r["name"], r["kind"]) for r in info["rnns"]] == [
        ("cu_dnngru", "CuDNNGRU"), ("bidirectional/cu_dnngru_1", "Bidirectional(CuDNNGRU)")]
    # model.save(dir) keyed the Bidirectional's variables variables/3..8; the object graph gives their layer
    assert [r["details"][0] for r in info["rnns"]] == [
        "object: layer_with_weights-0", "object: layer_with_weights-1/{forward_layer,backward_layer}"]


@pytest.mark.slow   # Keras and the oracle on the CPU: ~20 s
def test_verify_passes_a_tf_keras_savedmodel_and_fails_a_planted_error(tmp_path):
    import h5py

    r = _run(["verify", GRAPHS / "tf_keras_cudnngru", "--device", "cpu"])
    # the layers, and the original in tf_keras (weights laid out from the checkpoint: said in a note; issue 40)
    assert r.exit_code == 0 and "parity: PASS (4/4" in r.output, r.output
    assert "end to end (tf_keras): model output" in r.output and "as laid out from the checkpoint" in r.output
    w = tmp_path / "w.h5"
    assert _run(["convert", GRAPHS / "tf_keras_cudnngru", w]).exit_code == 0
    with h5py.File(w, "r+") as f:
        ds = f["cu_dnngru"]["cu_dnngru"]["recurrent_kernel:0"]
        a = ds[...]
        a[0, 0] += 0.05
        ds[...] = a
    r = _run(["verify", GRAPHS / "tf_keras_cudnngru", w, "--device", "cpu"])
    assert_parity_failure(r)
    assert "parity: FAIL" in r.output, r.output


@pytest.mark.parametrize("command", ["inspect", "convert", "verify"])
def test_a_savedmodel_without_its_variables_data_is_one_line_exit_3(command, tmp_path):
    args = [command, GRAPHS / "no_variables_data"] + ([tmp_path / "o.keras"] if command == "convert" else [])
    _one_line_error(_run(args), 3, "variables.data-00000-of-00001: data shard 0 of 1 is missing")
    assert not (tmp_path / "o.keras").exists()


def test_a_tf_keras_savedmodel_without_variables_at_all_is_one_line_exit_3(tmp_path):
    d = tmp_path / "sm"
    shutil.copytree(GRAPHS / "tf_keras_cudnngru", d)
    shutil.rmtree(d / "variables")
    for args in (["convert", d, tmp_path / "o.keras"], ["verify", d], ["inspect", d]):
        r = _run(args)
        if args[0] == "inspect":
            assert r.exit_code == 0 and "without its variables" in r.output, r.output
            continue
        _one_line_error(r, 3, f"{d}: is a tf.keras SavedModel without its variables (variables/variables.index is "
                              "missing): its weights are not in it")


def test_a_damaged_keras_metadata_is_one_line_exit_3(tmp_path):
    d = tmp_path / "sm"
    shutil.copytree(GRAPHS / "tf_keras_cudnngru", d)
    data = (d / "keras_metadata.pb").read_bytes()
    (d / "keras_metadata.pb").write_bytes(data[: len(data) // 3])
    _one_line_error(_run(["convert", d, tmp_path / "o.keras"]), 3, "keras_metadata.pb: is not a readable tf.keras metadata file")


# --------------------------------------------------------------------------- batch

@pytest.mark.slow   # three graphs through TensorFlow: ~40 s
def test_batch_finds_savedmodels_and_graph_files_and_converts_each(tmp_path, monkeypatch):
    """``convert DIR --out-dir``: each SavedModel directory and each .pb/.pbtxt graph is one input; a
    graph running cuDNN ops becomes a SavedModel directory named after it, the tf.keras SavedModels a .keras."""
    from gruconv import batch

    monkeypatch.chdir(tmp_path)
    Path("models").mkdir()
    for name in ("keras3_export", "tf_keras_cudnnlstm", "frozen_gru.pb", "frozen_gru_bidir_skip.pbtxt"):
        src = GRAPHS / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, Path("models") / name)
    s = batch.convert_many(["models"], "out", jobs=1, echo=False, keep_going=True)
    got = {r.input: r.status for r in s.records}
    assert got == {"models/frozen_gru.pb": "ok", "models/frozen_gru_bidir_skip.pbtxt": "ok",
                   "models/keras3_export": "ok", "models/tf_keras_cudnnlstm": "ok"}, \
        [(r.input, r.status, r.error) for r in s.records]
    assert s.exit_code == 0
    assert sorted(n for n in os.listdir("out") if not n.startswith(".")) == [
        "frozen_gru", "frozen_gru_bidir_skip", "keras3_export", "tf_keras_cudnnlstm.keras"]
    for name in ("frozen_gru", "frozen_gru_bidir_skip", "keras3_export"):
        assert (Path("out") / name / "saved_model.pb").is_file()


@pytest.mark.parametrize("is_training", [None, True, False])
def test_dropout_is_refused_unless_the_node_says_it_does_not_train(tmp_path, is_training):
    """``is_training`` defaults to true in TensorFlow's op registry (``cudnn_rnn_ops.cc``): a node with
    ``dropout > 0`` that leaves the attr out runs dropout, a random op, and is refused in one line (exit 3);
    ``is_training: false`` makes dropout inert, and the node converts."""
    from tensorflow.core.framework import graph_pb2

    g = graph_pb2.GraphDef()
    g.ParseFromString((FIXTURES / "graphs_golden" / "gru_2l_uni_v2.pb").read_bytes())
    for n in g.node:
        if n.op.startswith("CudnnRNN"):
            n.attr["dropout"].f = 0.5
            del n.attr["is_training"]
            if is_training is not None:
                n.attr["is_training"].b = is_training
    src = tmp_path / "dropout.pb"
    src.write_bytes(g.SerializeToString())
    r = _run(["inspect", src])
    if is_training is False:
        assert r.exit_code == 0 and "cannot be converted" not in r.output, r.output
    else:
        assert "is_training with dropout=0.5 (a random op)" in r.output, r.output
        _one_line_error(_run(["convert", src, tmp_path / "out"]), 3, "is_training with dropout=0.5 (a random op)")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["dropout.pb"]


def test_a_graph_tensorflow_cannot_import_is_one_line_for_every_output_and_verify(tmp_path):
    """A node whose op TensorFlow does not know (a flipped bit in an op name, found by the fuzzer): convert to a
    SavedModel, to the stacks alone and verify each say so in one line, exit 3, nothing written (TensorFlow's
    NotFoundError used to escape the stacks route as an internal error)."""
    from tensorflow.core.framework import graph_pb2

    g = graph_pb2.GraphDef()
    g.ParseFromString((GRAPHS / "frozen_gru.pb").read_bytes())
    node = next(n for n in g.node if n.op == "Identity")
    node.op = "I`entity"
    src = tmp_path / "bad.pb"
    src.write_bytes(g.SerializeToString())
    for out in ("cpu_model", "m.keras"):
        _one_line_error(_run(["convert", src, tmp_path / out]), 3, "is a GraphDef TensorFlow cannot import (NotFoundError")
    _one_line_error(_run(["verify", src]), 3, "is a GraphDef TensorFlow cannot import (NotFoundError")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.pb"]


@pytest.mark.slow   # a tf_keras interpreter writes the SavedModel: ~15-30 s
def test_a_tf_module_around_a_gru_model_asked_for_keras_is_exit_3_never_exit_0_without_the_file(tmp_path):
    """Issue 46 (b): TensorFlow's text-generation tutorial's ``OneStep``, a ``tf.Module`` around a tf.keras GRU model
    saved with ``tf.saved_model.save`` (graph only: no Keras metadata), asked for ``.keras``: exit 0, nothing written.
    Its cuDNN nodes are tf.keras GPU variants with CPU twins, so it has no stack to write alone: one line, exit 3,
    naming the outputs it does go to; and to a SavedModel directory it is written."""
    d = tmp_path / "one_step"
    code = ('import os\nos.environ["TF_USE_LEGACY_KERAS"]="1"; os.environ["TF_CPP_MIN_LOG_LEVEL"]="3"\n'
            "import tensorflow as tf, tf_keras as K\n"
            "model = K.Sequential([K.layers.Embedding(20, 4), K.layers.GRU(6, return_sequences=True), "
            "K.layers.Dense(20)])\n"
            "model.build((None, None))\n"
            "class OneStep(tf.Module):\n"
            "    def __init__(self, model):\n"
            "        self.model = model\n"
            "    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])\n"
            "    def generate_one_step(self, ids):\n"
            "        logits = self.model(ids)[:, -1, :]\n"
            "        return {'ids': tf.random.categorical(logits, 1, seed=1), 'logits': logits}\n"
            "m = OneStep(model)\n"
            f"tf.saved_model.save(m, {str(d)!r}, signatures={{'serving_default': m.generate_one_step}})\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    assert not (d / "keras_metadata.pb").exists()
    r = _run(["convert", d, tmp_path / "m.keras"])
    _one_line_error(r, 3, "already serves on a CPU")
    assert "no cuDNN node stack to write as .keras" in r.output and not (tmp_path / "m.keras").exists()
    r = _run(["convert", d, tmp_path / "cpu_model"])
    assert r.exit_code == 0 and (tmp_path / "cpu_model" / "saved_model.pb").is_file(), r.output
