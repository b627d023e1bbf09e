"""A graph's cuDNN nodes as bare stacks (:mod:`gruconv.readers.tfgraph.stacks`): ``convert GRAPH out.keras`` /
``out.safetensors`` / ``--format keras|onnx DIR``, their params evaluated as the graph computes them.

Numerical truth: ``fixtures/graphs_golden`` (real cuDNN 9.19 buffers inside graphs, cuDNN's own outputs): each
graph's stack, written as PyTorch ``.safetensors`` and run by ``torch.nn.GRU``/``LSTM`` on the golden inputs
(initial states, sequence lengths), gives cuDNN's ``y``/``hy``/``cy``."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, assert_parity_failure
from gruconv.cli import main

pytestmark = pytest.mark.xdist_group("test_graph_stacks")

GOLDEN_GRAPHS = FIXTURES / "graphs_golden"
GOLDEN = json.loads((GOLDEN_GRAPHS / "manifest.json").read_text())["fixtures"]
CONVERTIBLE = sorted(k for k in GOLDEN if k != "lstm_2l_bidir_proj_v3")
EXPORT = FIXTURES / "graphs" / "keras3_export"
#: Each convertible golden graph's stack as convert writes it (``fixtures/make_golden_graph_stacks.py``).
STACKS = GOLDEN_GRAPHS / "stacks"


def run(*args):
    """The CLI in-process; no exception may escape it (an exit code is gruconv's own)."""
    res = CliRunner().invoke(main, [str(a) for a in args])
    escaped = res.exception if not isinstance(res.exception, (SystemExit, type(None))) else None
    assert escaped is None, f"{type(escaped).__name__}: {escaped}"
    return res


def _torch_outputs(path, golden) -> dict:
    from gruconv.torch import run_torch

    c0 = golden["c0"] if "c0" in golden.files else None
    lengths = golden["seq_lengths"] if "seq_lengths" in golden.files else None
    y, hy, cy = run_torch(path, golden["x"], golden["h0"], c0, lengths)
    return {"y": y, "hy": hy, **({"cy": cy} if cy is not None else {})}


def _worst(path, name) -> float:
    golden = np.load(FIXTURES / GOLDEN[name]["golden"])
    got = _torch_outputs(path, golden)
    return max(float(np.max(np.abs(got[k].astype(np.float64) - golden[k]))) for k in got)


#: Golden graphs converted in the quick tier: Const params (v1), in-graph-packed params from a SavedModel's
#: variables (canonical), a batch-major variable-length bidirectional LSTM.  Each conversion evaluates params in a
#: bounded TensorFlow child (~6 CPU s): the other twelve run in the slow tier (CI); skip input is quick in
#: ``test_graph_onnx.py`` and ``test_torch_target.py``.
QUICK_GOLDEN = {"gru_1l_uni_v1", "gru_2l_bidir_canonical_savedmodel", "lstm_2l_bidir_varlen_v3_bt"}
GOLDEN_CASES = [n if n in QUICK_GOLDEN else pytest.param(n, marks=pytest.mark.slow) for n in CONVERTIBLE]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Each golden graph converted to a ``.safetensors`` stack once per module, on first use: ``name -> (path,
    result)`` (both tests below read the same conversion)."""
    d = tmp_path_factory.mktemp("stacks")
    done: dict = {}

    def get(name):
        if name not in done:
            out = d / f"{name}.safetensors"
            done[name] = (out, run("convert", GOLDEN_GRAPHS / GOLDEN[name]["file"], out))
        return done[name]
    return get


def test_quick_golden_graphs_exist():
    assert QUICK_GOLDEN <= set(CONVERTIBLE)


@pytest.mark.parametrize("name", GOLDEN_CASES)
def test_every_golden_graph_stack_computes_what_cudnn_computed(converted, name):
    """Const, variable and in-graph-packed params alike: the stack written alone runs cuDNN's numbers (torch on
    the CPU, within 5e-7 of strict fp32), and the output says the graph's other ops are not in it."""
    out, res = converted(name)
    assert res.exit_code == 0, res.output
    assert "cuDNN node stack(s) written alone" in res.output
    assert _worst(out, name) < 5e-7


@pytest.mark.parametrize("name", GOLDEN_CASES)
def test_the_committed_stacks_are_what_convert_writes(converted, name):
    """``fixtures/graphs_golden/stacks`` (run on the GPU, where no TensorFlow evaluates params) is, byte for
    byte, what ``convert`` writes today (``fixtures/make_golden_graph_stacks.py`` writes it again)."""
    out, res = converted(name)
    assert res.exit_code == 0, res.output
    assert out.read_bytes() == (STACKS / f"{name}.safetensors").read_bytes()


@pytest.mark.gpu
def test_every_golden_graph_stack_on_cuda_computes_what_cudnn_computed():
    """The committed stacks run by ``torch.nn.GRU``/``LSTM`` on CUDA (cuDNN, TF32 off) on the golden inputs:
    within the verdict's tolerance (1e-5) of the outputs cuDNN gave for the same buffers inside the graphs."""
    import torch

    from gruconv.torch import load, run_torch

    if not torch.cuda.is_available():
        pytest.fail("pytest -m gpu needs CUDA: torch.cuda.is_available() is False")
    worst = {}
    for name in CONVERTIBLE:
        golden = np.load(FIXTURES / GOLDEN[name]["golden"])
        mods = load(STACKS / f"{name}.safetensors", device="cuda")
        c0 = golden["c0"] if "c0" in golden.files else None
        lengths = golden["seq_lengths"] if "seq_lengths" in golden.files else None
        y, hy, cy = run_torch(mods, golden["x"], golden["h0"], c0, lengths, device="cuda", strict=True)
        got = {"y": y, "hy": hy, **({"cy": cy} if cy is not None else {})}
        worst[name] = max(float(np.max(np.abs(got[k].astype(np.float64) - golden[k]))) for k in got)
        print(f"{name}: torch CUDA strict fp32 vs cuDNN inside the graph {worst[name]:.2e}")
    assert max(worst.values()) <= 1e-5, worst


def test_a_wrong_params_buffer_is_caught_by_the_comparison(tmp_path, monkeypatch):
    """The comparison above can fail: params evaluated wrong (the buffer reversed) are far from cuDNN's.  The
    evaluation runs in a child process (:mod:`gruconv.tf.bounded`), so the error is planted in what comes back."""
    from gruconv.tf import bounded

    real = bounded.run
    monkeypatch.setattr(bounded, "run", lambda fn, *a, **k: {key: v[::-1].copy() for key, v in real(fn, *a, **k).items()})
    out = tmp_path / "stack.safetensors"
    assert run("convert", GOLDEN_GRAPHS / GOLDEN["gru_2l_uni_v2"]["file"], out).exit_code == 0
    assert _worst(out, "gru_2l_uni_v2") > 1e-3


def test_a_keras_export_converts_to_one_keras_model_per_node_and_verifies(tmp_path):
    """Keras 3's export computes each node's params from its variables inside a function: a directory of
    ``.keras`` models, each opened by plain ``load_model``; verify checks each against the reference on those
    params (exit 0) and says why the graph is not checked end to end."""
    import keras

    out = tmp_path / "stacks"
    res = run("convert", EXPORT, out, "--format", "keras")
    assert res.exit_code == 0, res.output
    files = sorted(p.name for p in out.iterdir())
    assert len(files) == 4 and all(f.endswith(".keras") for f in files), files
    for f in files:
        keras.saving.load_model(out / f)
    res = run("verify", EXPORT, out, "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert len(report["checks"]) == 4 and report["passed"]
    assert any(n.startswith("end to end: not checked, the converted stacks") for n in report["notes"])


def test_onnx_stacks_go_to_a_directory_and_a_dot_onnx_file_is_the_whole_graph(tmp_path):
    out = tmp_path / "onnx_stacks"
    assert run("convert", EXPORT, out, "--format", "onnx").exit_code == 0
    assert len(list(out.glob("*.onnx"))) == 4
    whole = tmp_path / "model.onnx"
    res = run("convert", EXPORT, whole)
    assert res.exit_code == 0 and whole.is_file() and "written alone" not in res.output


def test_several_nodes_into_one_file_is_a_usage_line(tmp_path):
    res = run("convert", EXPORT, tmp_path / "one.keras")
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert "the graph holds 4 cuDNN node stacks" in res.output and "name a directory as OUTPUT" in res.output
    assert list(tmp_path.iterdir()) == []


def test_a_planted_error_in_a_written_stack_fails_verify(tmp_path, monkeypatch):
    """A GRU written with its reset and update gates swapped: verify of the written stack fails, exit 1."""
    from gruconv.model import target_gates

    out = tmp_path / "stack.safetensors"
    monkeypatch.setitem(target_gates.TARGET_GATE_NAMES["torch"], "gru", ("update", "reset", "candidate"))
    assert run("convert", GOLDEN_GRAPHS / GOLDEN["gru_2l_uni_v2"]["file"], out).exit_code == 0
    monkeypatch.undo()
    assert_parity_failure(run("verify", GOLDEN_GRAPHS / GOLDEN["gru_2l_uni_v2"]["file"], out))


def test_batch_names_a_graphs_outputs_by_what_is_written(tmp_path):
    """Batch mode: ``--format keras`` gives a one-node graph ``NAME.keras`` and a graph of several nodes a
    directory of them; ``--format onnx`` the whole graph in ``NAME.onnx``; no format a SavedModel directory
    (planned here; written in the slow test below)."""
    from gruconv.batch.plan import output_name

    assert [output_name(EXPORT, "tf-graph", {"format": f}) for f in ("keras", "onnx", None)] == \
        ["keras3_export", "keras3_export.onnx", "keras3_export"]
    frozen = FIXTURES / "graphs" / "frozen_gru.pb"
    res = run("convert", EXPORT, frozen, "--out-dir", tmp_path / "k", "--format", "keras", "--jobs", "1")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "k" / "frozen_gru.keras").is_file()
    assert len(list((tmp_path / "k" / "keras3_export").glob("*.keras"))) == 4


@pytest.mark.slow  # two whole-graph writes in fresh TensorFlow children (8 s of the quick tier, issue 47)
def test_batch_writes_a_graph_as_onnx_and_as_a_saved_model_where_planned(tmp_path):
    res = run("convert", EXPORT, "--out-dir", tmp_path / "o", "--format", "onnx", "--jobs", "1")
    assert res.exit_code == 0 and (tmp_path / "o" / "keras3_export.onnx").is_file(), res.output
    res = run("convert", EXPORT, "--out-dir", tmp_path / "s", "--jobs", "1")
    assert res.exit_code == 0 and (tmp_path / "s" / "keras3_export" / "saved_model.pb").is_file(), res.output


def test_a_tf_saved_model_save_export_with_copies_no_signature_calls(tmp_path):
    """``tf.saved_model.save`` of a Keras 3 model keeps its traced calls beside the signature's function: copies
    of the cuDNN nodes under another name no signature runs.  The stacks written are the signature's nodes,
    with a note naming the others; each verifies."""
    src = FIXTURES / "graphs" / "keras3_tf_saved"
    out = tmp_path / "stacks"
    res = run("convert", src, out, "--format", "keras")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["sequential_1__gru_1__CudnnRNNV3.keras",
                                                     "sequential_1__lstm_1__CudnnRNNV3.keras"]
    assert "2 cuDNN node(s) in functions no signature calls are not written" in res.output
    assert run("verify", src, out).exit_code == 0
