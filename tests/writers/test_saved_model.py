"""The ``saved-model`` writer: graphs holding cuDNN ops become SavedModels that serve on a CPU (issue 39).

Numerical truth: ``fixtures/graphs_golden`` (real cuDNN 9.19 buffers inside ``CudnnRNN``/``V2``/``V3`` graphs,
frozen GraphDefs and TF1 SavedModels, one whose params ``CudnnRNNCanonicalToParams`` packs; cuDNN's own
strict-fp32 ``y``/``hy``/``cy`` as the expected outputs: ``fixtures/make_golden_graph_fixtures.py``) and, for
Keras 3's ``model.export`` traced on its cuDNN branch, what the Keras model predicts on the CPU
(``fixtures/graphs/keras3_export_reference.npz``, ``fixtures/make_graph_fixtures.py --part keras3_reference``).

The quick tier needs no TensorFlow (refusals are decided by the reader and the plan); everything that
writes a SavedModel is slow (TensorFlow's import and tracing: ~5-15 s per conversion).
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

from conftest import FIXTURES
from gruconv.cli import main as cli

GOLDEN_GRAPHS = FIXTURES / "graphs_golden"
GOLDEN = json.loads((GOLDEN_GRAPHS / "manifest.json").read_text())["fixtures"]
GRAPHS = FIXTURES / "graphs"
#: The golden graph the reader refuses by name (an LSTM with projections).
REFUSED_GOLDEN = {"lstm_2l_bidir_proj_v3": "CudnnRNNV3 'cudnn_rnn': num_proj=5 (LSTM projections do not convert)"}
CONVERTIBLE = sorted(k for k in GOLDEN if k not in REFUSED_GOLDEN)
#: Strict fp32 (``CUDNN_FMA_MATH``) outputs are within ~3e-7 of float64 (``shared/cudnn-golden/README.md``): a
#: correct float32 replacement is within 1e-6 of them (``DESIGN.md``, verification on a GPU).
TOLERANCE = 1e-6


def _run(args, **kw):
    return CliRunner().invoke(cli, [str(a) for a in args], **kw)


def _one_line_error(r, code: int, text: str) -> None:
    assert r.exit_code == code, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gruconv: error: ") and text in lines[0], r.output


# --------------------------------------------------------------------------- quick: reader and plan (no TF)

def test_inspect_sizes_every_golden_graph_node_as_its_golden_file_says():
    """The sizes the reader determines without TensorFlow are the golden file's (config I, H, L, bidir, skip)."""
    for name, m in GOLDEN.items():
        cfg = json.loads(str(np.load(FIXTURES / m["golden"])["config"]))
        r = _run(["inspect", GOLDEN_GRAPHS / m["file"], "--json"])
        assert r.exit_code == 0, r.output
        nodes = {n["name"]: n for n in json.loads(r.output)["cudnn_nodes"]}
        node = nodes["cudnn_rnn"]
        if name in REFUSED_GOLDEN:
            assert node["problem"] and "num_proj" in node["problem"]
            continue
        assert node["shape"] == {"input_size": cfg["I"], "units": cfg["H"], "num_layers": cfg["L"],
                                 "bidirectional": bool(cfg["bidir"]), "input_mode": "skip" if cfg["skip"] else "linear",
                                 "dtype": "float32", "cell": m["cell"]}, name
        assert node["params_from"] == {"const": "a Const", "variable": "a variable",
                                       "canonical": "packed in the graph (CudnnRNNCanonicalToParams)"}[m["params"]], name


def _edited(tmp_path, old: str, new: str, name="g.pbtxt") -> Path:
    text = (GRAPHS / "frozen_gru_bidir_skip.pbtxt").read_text()
    assert old in text
    p = tmp_path / name
    p.write_text(text.replace(old, new, 1))
    return p


_NODE_END = '  attr {\n    key: "time_major"'
REFUSALS = {
    "rnn_tanh": ('s: "gru"', 's: "rnn_tanh"', "rnn_mode 'rnn_tanh' (only gru and lstm convert)"),
    "num_proj": ("i: 0\n    }\n  }\n  attr {\n    key: \"rnn_mode\"", "i: 3\n    }\n  }\n  attr {\n    key: \"rnn_mode\"",
                 "num_proj=3 (LSTM projections do not convert)"),
    "training_dropout": ("f: 0.0", "f: 0.25", None),  # with is_training below
    "const_size": ("size: 378", "size: 377", "params holds 377 values, a 1 layer(s) x 7 units, bidirectional, input "
                                             "size 7, skip input, float32 GRU needs 378"),
    "py_func": ('node {\n  name: "y"', 'node {\n  name: "code"\n  op: "EagerPyFunc"\n}\nnode {\n  name: "y"',
                "it holds Python code ops (code (EagerPyFunc)), which gruconv never runs"),
    "backprop": ('node {\n  name: "y"', 'node {\n  name: "grad"\n  op: "CudnnRNNBackpropV3"\n}\nnode {\n  name: "y"',
                 "CudnnRNNBackpropV3 'grad' (the RNN's gradient) has no CPU replacement here"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_graph_node_gruconv_cannot_replace_is_refused_in_one_line(case, tmp_path):
    """rnn_tanh, projections, training-mode dropout, a Const whose size disagrees with the node, Python ops,
    a gradient op: exit 3, one line naming the node and why, nothing written, no TensorFlow needed."""
    old, new, why = REFUSALS[case]
    p = _edited(tmp_path, old, new)
    if case == "training_dropout":
        p.write_text(p.read_text().replace("b: false", "b: true", 1))
        why = "is_training with dropout=0.25 (a random op)"
    out = tmp_path / "out"
    r = _run(["convert", p, out])
    _one_line_error(r, 3, why)
    assert "cannot be converted" in r.output
    assert not out.exists() and sorted(x.name for x in tmp_path.iterdir()) == ["g.pbtxt"]
    r = _run(["inspect", p])
    assert r.exit_code == 0 and "gruconv convert refuses it (exit 3)" in r.output, r.output


_CYCLE = '''library {
  function {
    signature { name: "f" input_arg { name: "a" type: DT_FLOAT } output_arg { name: "b" type: DT_FLOAT } }
    node_def { name: "call" op: "g" input: "a" }
    ret { key: "b" value: "call:b:0" }
  }
  function {
    signature { name: "g" input_arg { name: "a" type: DT_FLOAT } output_arg { name: "b" type: DT_FLOAT } }
    node_def { name: "w" op: "While" attr { key: "body" value { func { name: "f" } } } }
    ret { key: "b" value: "w:output:0" }
  }
}
versions'''


def test_a_function_library_that_calls_itself_is_refused_before_tensorflow_sees_it(tmp_path):
    """f calls g (by op name), g calls f (a While body): TensorFlow crashed (segfault) importing and running
    such a graph; the reader refuses it in one line, bounded, with no TensorFlow."""
    p = _edited(tmp_path, "versions", 'node {\n  name: "loop"\n  op: "f"\n  input: "c0"\n}\n' + _CYCLE)
    r = _run(["convert", p, tmp_path / "out"])
    _one_line_error(r, 3, "whose function library calls itself (f -> g -> f); TensorFlow has no recursive functions")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["g.pbtxt"]


def test_the_projection_golden_graph_is_refused_in_one_line(tmp_path):
    m = GOLDEN["lstm_2l_bidir_proj_v3"]
    r = _run(["convert", GOLDEN_GRAPHS / m["file"], tmp_path / "out"])
    _one_line_error(r, 3, REFUSED_GOLDEN["lstm_2l_bidir_proj_v3"])
    assert list(tmp_path.iterdir()) == []


def test_an_existing_output_is_refused_before_any_work(tmp_path):
    """Without --force an existing output is refused; with --force only an empty directory or a SavedModel
    is replaced (never a directory of the user's files), and a file is never replaced by a directory."""
    src = GOLDEN_GRAPHS / GOLDEN["gru_1l_uni_v1"]["file"]
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    _one_line_error(_run(["convert", src, out]), 3, "output exists; pass --force to replace it")
    _one_line_error(_run(["convert", src, out, "--force"]), 3, "output is a directory that is not a SavedModel")
    assert (out / "notes.txt").read_text() == "mine"
    f = tmp_path / "file"
    f.write_text("x")
    _one_line_error(_run(["convert", src, f, "--force"]), 3, "output exists and is not a directory")


def test_a_graph_to_a_model_file_name_writes_its_stack(tmp_path):
    """A model file name of a stack writer gets the graph's cuDNN node stack (:mod:`gruconv.readers.tfgraph.stacks`); .onnx
    is the whole graph; a SavedModel directory is the natural output."""
    src = GOLDEN_GRAPHS / GOLDEN["gru_1l_uni_v1"]["file"]
    for name in ("o.keras", "o.weights.h5", "o.safetensors", "o.h5"):
        r = _run(["convert", src, tmp_path / name])
        assert r.exit_code == 0 and "cuDNN node stack(s) written alone" in r.output, (name, r.output)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.h5", "o.keras", "o.safetensors", "o.weights.h5"]


# --------------------------------------------------------------------------- slow: written and served on the CPU

@pytest.fixture(scope="module")
def tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow

    return tensorflow


def _laid_out(a, layout: str):
    """A golden (time-major) array as the manifest says the graph takes it: ``bt`` the batch-major transpose,
    ``mem`` a batch-major graph's states (the ``[L*D, B, H]`` memory reshaped to ``[B, L*D, H]``)."""
    if layout == "bt":
        return a.transpose(1, 0, 2)
    if layout == "mem":
        return a.reshape(a.shape[1], a.shape[0], a.shape[2])
    return a


def _feeds(m: dict, golden) -> dict:
    return {key: _laid_out(golden[f["golden"]], f["layout"]) for key, f in m["feeds"].items()}


def _expected(m: dict, golden) -> dict:
    return {key: _laid_out(golden[f["golden"]], f["layout"]) for key, f in m["fetches"].items()}


def _cudnn_ops_in(path: Path) -> list:
    from tensorflow.core.protobuf import saved_model_pb2

    from gruconv.tf.rewrite import cudnn_ops_left

    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((path / "saved_model.pb").read_bytes())
    return cudnn_ops_left([m.graph_def for m in sm.meta_graphs], [m.meta_info_def.stripped_op_list for m in sm.meta_graphs])


def _serve(tf, path: Path, feeds: dict, signature="serving_default") -> dict:
    fn = tf.saved_model.load(str(path)).signatures[signature]
    with tf.device("/CPU:0"):
        return {k: v.numpy() for k, v in fn(**{k: tf.constant(v) for k, v in feeds.items()}).items()}


def _judge(got: dict, want: dict, name: str) -> list:
    from gruconv.options import Bounds
    from gruconv.verify.verdicts import compare

    checks = [compare(f"{name}:{k}", got[k], want[k], None, Bounds(TOLERANCE, 0.0, 0.0), "float32") for k in want]
    return checks


@pytest.mark.slow   # TensorFlow: ~5-15 s per graph
@pytest.mark.parametrize("name", CONVERTIBLE)
def test_every_golden_graph_converts_and_serves_on_a_cpu_what_cudnn_computed(tf, name, tmp_path):
    """Converted (exit 0), no CudnnRNN* op left anywhere, loaded with tf.saved_model.load on the CPU: every
    fetch within 1e-6 of real cuDNN's strict-fp32 output."""
    m = GOLDEN[name]
    golden = np.load(FIXTURES / m["golden"])
    out = tmp_path / "cpu_model"
    r = _run(["convert", GOLDEN_GRAPHS / m["file"], out])
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"wrote {out}\n")
    assert _cudnn_ops_in(out) == []
    checks = _judge(_serve(tf, out, _feeds(m, golden)), _expected(m, golden), name)
    assert all(c.passed for c in checks), [(c.name, c.max_abs) for c in checks]
    assert max(c.max_abs for c in checks) < 5e-7


@pytest.mark.slow
def test_a_planted_error_in_the_replacement_fails_the_comparison(tf, tmp_path, monkeypatch):
    """The comparison above can fail: the GRU's reset and update gates swapped in the replacement."""
    from gruconv.tf import equations

    gru = equations.STEPS["gru"]

    def swapped(tf_, xw, hr, h, c):
        return gru(tf_, [xw[1], xw[0], xw[2]], [hr[1], hr[0], hr[2]], h, c)

    monkeypatch.setitem(equations.STEPS, "gru", swapped)
    from gruconv.tf import bounded
    monkeypatch.setattr(bounded, "_in_child", True)  # planted in this process: the graph runs here too
    m = GOLDEN["gru_2l_uni_v2"]
    golden = np.load(FIXTURES / m["golden"])
    out = tmp_path / "cpu_model"
    assert _run(["convert", GOLDEN_GRAPHS / m["file"], out]).exit_code == 0
    checks = _judge(_serve(tf, out, _feeds(m, golden)), _expected(m, golden), "planted")
    assert not any(c.passed for c in checks), [(c.name, c.max_abs) for c in checks]


@pytest.mark.slow
def test_a_cudnn_op_left_in_the_output_is_caught_and_nothing_written(tf, tmp_path, monkeypatch):
    """A rewrite that misses a node (planted: the replacement skipped) is refused after writing, before
    placing: exit 3, one line, no output directory and no temporary left."""
    from gruconv.tf import rewrite

    monkeypatch.setattr(rewrite, "_replace", lambda node, name: None)
    from gruconv.tf import bounded
    monkeypatch.setattr(bounded, "_in_child", True)  # planted in this process: the graph runs here too
    out = tmp_path / "cpu_model"
    r = _run(["convert", GRAPHS / "keras3_export", out])
    _one_line_error(r, 3, "the rewritten graph still names cuDNN ops (function __inference___call___1546: "
                          "functional_1/bi_gru_1/forward_gru_1/CudnnRNNV3 (CudnnRNNV3)")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_keras3_export_serves_what_keras_predicts_on_the_cpu(tf, tmp_path):
    """Keras 3 ``model.export`` traced on its cuDNN branch (4 CudnnRNNV3, params computed from the Keras
    variables): both endpoints (``serving_default``, ``serve``) match Keras's own CPU prediction; the
    variables are copied byte for byte."""
    ref = np.load(GRAPHS / "keras3_export_reference.npz")
    out = tmp_path / "cpu_model"
    r = _run(["convert", GRAPHS / "keras3_export", out])
    assert r.exit_code == 0, r.output
    assert _cudnn_ops_in(out) == []
    for f in ("variables/variables.index", "variables/variables.data-00000-of-00001"):
        assert (out / f).read_bytes() == (GRAPHS / "keras3_export" / f).read_bytes()
    loaded = tf.saved_model.load(str(out))
    assert sorted(loaded.signatures) == ["serve", "serving_default"]
    for key in loaded.signatures:
        got = _serve(tf, out, {"x": ref["x"]}, key)
        assert list(got) == ["output_0"]
        assert np.abs(got["output_0"] - ref["y"]).max() < TOLERANCE
    assert np.abs(loaded.serve(ref["x"]).numpy() - ref["y"]).max() < TOLERANCE


@pytest.mark.slow
def test_saved_model_cli_runs_the_converted_models(tf, tmp_path):
    """TensorFlow's own ``saved_model_cli run`` (a separate process) serves the outputs: a frozen graph's and
    a TF1 SavedModel's, against the golden outputs."""
    cli_bin = Path(sys.executable).parent / "saved_model_cli"
    if not cli_bin.exists():
        pytest.fail(f"saved_model_cli not found beside {sys.executable}")
    for name in ("gru_2l_bidir_varlen_v3", "lstm_3l_bidir_savedmodel"):
        m = GOLDEN[name]
        golden = np.load(FIXTURES / m["golden"])
        out = tmp_path / name
        assert _run(["convert", GOLDEN_GRAPHS / m["file"], out]).exit_code == 0
        inputs = []
        for key, a in _feeds(m, golden).items():
            np.save(tmp_path / f"{name}_{key}.npy", a)
            inputs.append(f"{key}={tmp_path / f'{name}_{key}.npy'}")
        res = tmp_path / f"{name}_out"
        r = subprocess.run([str(cli_bin), "run", "--dir", str(out), "--tag_set", "serve", "--signature_def",
                            "serving_default", "--inputs", ";".join(inputs), "--outdir", str(res)],
                           capture_output=True, text=True, timeout=300,
                           env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3"})
        assert r.returncode == 0, r.stderr[-3000:]
        got = {k: np.load(res / f"{k}.npy") for k in m["fetches"]}
        checks = _judge(got, _expected(m, golden), name)
        assert all(c.passed for c in checks), [(c.name, c.max_abs) for c in checks]


@pytest.mark.slow
def test_a_converted_saved_model_is_no_graph_to_convert_any_more(tmp_path):
    """The output holds no cuDNN op, so gruconv no longer claims it as a graph to convert (a Keras 3 export's
    output is a TF2 SavedModel of variables with no cuDNN node: no reader's)."""
    from gruconv.readers import tfgraph

    for src in (GOLDEN_GRAPHS / GOLDEN["gru_1l_uni_v1"]["file"], GRAPHS / "keras3_export"):
        out = tmp_path / "cpu_model"
        assert _run(["convert", src, out]).exit_code == 0
        assert tfgraph.sniff(out) is False
        shutil.rmtree(out)


@pytest.mark.slow
def test_force_replaces_a_saved_model_output_as_one_piece(tmp_path):
    """An existing SavedModel output is replaced only with --force, and then whole: the old directory's files are
    gone, no temporary directory is left beside it."""
    src = GOLDEN_GRAPHS / GOLDEN["gru_1l_uni_v1"]["file"]
    out = tmp_path / "cpu_model"
    assert _run(["convert", src, out]).exit_code == 0
    (out / "stale.txt").write_text("from before")
    _one_line_error(_run(["convert", src, out]), 3, "output exists; pass --force to replace it")
    r = _run(["convert", src, out, "--force"])
    assert r.exit_code == 0, r.output
    assert not (out / "stale.txt").exists() and (out / "saved_model.pb").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cpu_model"]


def test_the_replacement_has_one_step_per_cell_of_the_cell_table():
    """``equations.STEPS`` is keyed by cell like ``CELLS``: a cell added to the table without its equations
    fails here, not in a user's conversion."""
    from gruconv.model.canonical import CELLS
    from gruconv.tf import equations

    assert set(equations.STEPS) == set(CELLS)


def test_format_saved_model_for_an_input_that_is_no_graph_is_a_usage_line(tmp_path):
    """``--format saved-model`` of a Keras HDF5 file: exit 2 and one line, before any work (not exit 4)."""
    src = FIXTURES / "keras" / "bidir_ave.h5"
    r = _run(["convert", src, tmp_path / "out", "--format", "saved-model"])
    _one_line_error(r, 2, "--format saved-model writes only TensorFlow graphs holding cuDNN ops, as SavedModels, and "
                          "this input (keras-h5) is not one")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- verify

@pytest.mark.slow   # TensorFlow and Keras: ~20 s
def test_verify_checks_each_cudnn_node_of_a_graph_and_its_conversion(tmp_path):
    """``verify GRAPH``: each RNN node's replacement (traced as convert traces it) against the float64 oracle;
    ``verify GRAPH CONVERTED``: the function the converted SavedModel's node calls.  Same report, exit 0."""
    r = _run(["verify", GRAPHS / "keras3_export", "--json", tmp_path / "r.json"])
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "r.json").read_text())
    names = [c["name"] for c in report["checks"]]
    # 2 GRU x (y, h), 2 LSTM x (y, h, c), then both conversions against the original graph (verify/tfgraph.py):
    # the SavedModel on each of its two signatures (Keras's export writes "serve" and "serving_default")
    assert report["passed"] and len(names) == 13, names
    assert names[-3:] == ["end to end (converted SavedModel): output_0", "end to end (whole graph as ONNX): output_0",
                          "end to end (converted SavedModel): serve: output_0"], names
    assert "TensorFlow on the CPU (the node's replacement function)" in report["environment"]["converted_by"]
    m = GOLDEN["gru_2l_bidir_varlen_v3"]
    out = tmp_path / "cpu_model"
    assert _run(["convert", GOLDEN_GRAPHS / m["file"], out]).exit_code == 0
    r = _run(["verify", GOLDEN_GRAPHS / m["file"], out])
    assert r.exit_code == 0 and "parity: PASS" in r.output, r.output


@pytest.mark.slow
def test_verify_fails_a_planted_error_in_a_converted_node(tmp_path, monkeypatch):
    """A converted SavedModel whose GRU replacement has its reset and update gates swapped: verify of it is a
    parity failure (exit 1, no exception escaped)."""
    from gruconv.tf import equations

    gru = equations.STEPS["gru"]
    from gruconv.tf import bounded
    monkeypatch.setattr(bounded, "_in_child", True)  # planted in this process: the graph runs here too
    monkeypatch.setitem(equations.STEPS, "gru", lambda tf_, xw, hr, h, c: gru(tf_, [xw[1], xw[0], xw[2]],
                                                                              [hr[1], hr[0], hr[2]], h, c))
    src = GOLDEN_GRAPHS / GOLDEN["gru_2l_uni_v2"]["file"]
    out = tmp_path / "cpu_model"
    assert _run(["convert", src, out]).exit_code == 0
    monkeypatch.setitem(equations.STEPS, "gru", gru)
    r = _run(["verify", src, out])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code == 1 and "parity: FAIL" in r.output, r.output
