"""The PyTorch (``.safetensors``) and ONNX (``.onnx``) targets through the CLI (issue 21).

Every TF1 fixture (``fixtures/tf1``, ``fixtures/tf1_lstm``) and every Keras fixture
(``fixtures/keras``, ``fixtures/keras_lstm``) is converted with ``gruconv convert`` and checked
with ``gruconv verify`` (the same reference and per-stack checks as the ``.keras`` path; on this
CPU machine the float64 oracle).  A full Keras model to ONNX is one usage line; a planted gate
swap in either output fails ``verify`` (exit 1); bad inputs leave nothing behind and the input
untouched.  The sweep over every fixture is ``slow``; a few cases run in the quick tier.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import assert_parity_failure
from gruconv.cli import main

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures"

#: Shape hints a user must give where a checkpoint stores no shape (as tests/readers/test_tf1_checkpoint.py gives them).
HINTS = {
    "tf1/tf14_opaque_only": ["--variable", "encoder/cudnn_params", "--num-units", "7", "--input-size", "5"],
    "tf1/opaque_only_skip_uni": ["--input-mode", "skip"],
    "tf1/opaque_only_skip_bidir": ["--input-mode", "skip"],
    "tf1_lstm/tf14_opaque_only": ["--variable", "decoder/lstm_params", "--cell", "lstm", "--num-units", "7",
                                  "--input-size", "5"],
    "tf1_lstm/opaque_only_skip_uni": ["--input-mode", "skip"],
    "tf1_lstm/opaque_only_skip_bidir": ["--input-mode", "skip", "--num-units", "8"],
}
TF1 = [f"{d}/{c}" for d in ("tf1", "tf1_lstm") for c in sorted(json.loads((FIX / d / "manifest.json").read_text())["cases"])]
#: Checkpoints with several stacks (their manifests say so): a directory of .onnx, one .safetensors.
MULTI = {f"{d}/{c}" for d in ("tf1", "tf1_lstm")
         for c, m in json.loads((FIX / d / "manifest.json").read_text())["cases"].items() if len(m["stacks"]) > 1}
KERAS = [f"{d}/{p.name}" for d in ("keras", "keras_lstm") for p in sorted((FIX / d).glob("*.h5"))]
#: Keras fixtures with no cuDNN layer: nothing to convert, nothing written.
NOTHING = {"keras/plain_gru.h5"}
QUICK = {"tf1/layer_bidir", "tf1_lstm/layer_varlen", "tf1/multi_stack", "keras_lstm/bidir_concat.h5",
         "keras/weights_only.h5"}


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r


def digest(path: Path) -> str:
    files = sorted(p for p in Path(path).rglob("*") if p.is_file()) if Path(path).is_dir() else [Path(path)]
    return hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()


def _marks(case):
    return () if case in QUICK else (pytest.mark.slow,)


def convert_and_verify(case: str, out: Path, *extra) -> dict:
    hints = HINTS.get(case, [])
    before = digest(FIX / case)
    r = run("convert", FIX / case, out, *hints, *extra)
    assert r.exit_code == 0, r.output
    assert out.exists()
    v = run("verify", FIX / case, out, *hints, "--json", out.parent / "verdict.json")
    assert v.exit_code == 0, v.output
    assert "parity: PASS" in v.output
    rep = json.loads((out.parent / "verdict.json").read_text())
    assert rep["passed"] and rep["checks"] and all(c["passed"] for c in rep["checks"])
    assert digest(FIX / case) == before  # inputs never modified
    return rep


@pytest.mark.parametrize("case", [pytest.param(c, marks=_marks(c)) for c in TF1])
def test_tf1_to_torch(case, tmp_path):
    """One .safetensors for the whole checkpoint: every stack (multi_stack: both) and its other tensors."""
    from gruconv.writers.torch.safetensors import read_document

    rep = convert_and_verify(case, tmp_path / "out.safetensors")
    doc = read_document(tmp_path / "out.safetensors")
    assert {c["name"].split(":")[0] for c in rep["checks"]} == {r["name"] for r in doc["rnns"]}
    assert rep["environment"]["converted_by"] == ["torch (CPU)"]
    assert not (tmp_path / "out.safetensors.rest.npz").exists()  # the other tensors are inside
    assert len(doc["rnns"]) == (2 if case in MULTI else 1)


@pytest.mark.parametrize("case", [pytest.param(c, marks=_marks(c)) for c in TF1])
def test_tf1_to_onnx(case, tmp_path):
    """One .onnx per stack: a file, or (several stacks) a directory of them with rest.npz."""
    if case in MULTI:
        out = tmp_path / "models"
        rep = convert_and_verify(case, out, "--format", "onnx")
        assert len(list(out.glob("*.onnx"))) == 2 and len({c["name"].split(":")[0] for c in rep["checks"]}) == 2
        if case == "tf1/multi_stack":
            assert sorted(p.name for p in out.iterdir()) == ["decoder__cudnn_gru.onnx", "encoder__cudnn_gru.onnx",
                                                             "rest.npz"]
    else:
        rep = convert_and_verify(case, tmp_path / "out.onnx")
    assert rep["environment"]["converted_by"] == ["onnxruntime (CPU)"]


@pytest.mark.parametrize("case", [pytest.param(c, marks=_marks(c)) for c in KERAS])
def test_keras_to_torch(case, tmp_path):
    """Every cuDNN layer one module named by its layer path; the other layers' weights beside them."""
    from gruconv.writers.torch.safetensors import read_document

    out = tmp_path / "out.safetensors"
    if case in NOTHING:
        r = run("convert", FIX / case, out)
        assert r.exit_code == 0 and "nothing to convert" in r.output and not out.exists()
        return
    rep = convert_and_verify(case, out)
    doc = read_document(out)
    assert {c["name"].split(":")[0] for c in rep["checks"]} == {r["name"] for r in doc["rnns"]}
    assert all("/" in orig for orig in doc["tensors"].values())  # <layer>/<weight>


@pytest.mark.parametrize("case", [pytest.param(c, marks=_marks(c)) for c in KERAS if c not in NOTHING])
def test_keras_to_onnx(case, tmp_path):
    """A full Keras model is not an ONNX target: one usage line (exit 2), nothing written.  A
    weights-only file with several RNNs converts into a directory, one .onnx per RNN."""
    out = tmp_path / "out.onnx"
    import h5py

    with h5py.File(FIX / case) as f:
        full = "model_config" in f.attrs
    if full:
        r = run("convert", FIX / case, out)
        assert r.exit_code == 2
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and "a full Keras model is not an ONNX target" in lines[0] and ".keras" in lines[0]
        assert list(tmp_path.iterdir()) == []
        return
    out = tmp_path / "models"
    convert_and_verify(case, out, "--format", "onnx")
    assert len(list(out.glob("*.onnx"))) >= 2


def test_keras_weights_only_one_rnn_to_onnx(tmp_path):
    """A weights-only file with one cuDNN RNN (a Bidirectional CuDNNLSTM) is one .onnx file."""
    convert_and_verify("trained/bilstm_weights.h5", tmp_path / "out.onnx")


# --------------------------------------------------------------------------- planted errors

def _swap_torch_gates(src: Path, dst: Path) -> None:
    """Swap two gate blocks (reset <-> update) of one layer's recurrent matrix: a reorder bug."""
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    with safe_open(str(src), "np") as f:
        meta = f.metadata()
    t = load_file(str(src))
    key = next(k for k in t if k.endswith("weight_hh_l0"))
    H = t[key].shape[1]
    w = t[key].copy()
    w[:H], w[H:2 * H] = t[key][H:2 * H], t[key][:H]
    t[key] = w
    save_file(t, str(dst), metadata=meta)


def _swap_onnx_gates(src: Path, dst: Path) -> None:
    import onnx
    from onnx import numpy_helper

    m = onnx.load(str(src))
    for i, init in enumerate(m.graph.initializer):
        if init.name == "R_l0":
            a = numpy_helper.to_array(init).copy()
            H = a.shape[2]
            a[:, :H], a[:, H:2 * H] = a[:, H:2 * H].copy(), a[:, :H].copy()
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(a, "R_l0"))
    onnx.save(m, str(dst))


@pytest.mark.parametrize("case", ["tf1/layer_uni", "tf1_lstm/layer_bidir"])
@pytest.mark.parametrize("ext", [".safetensors", ".onnx"])
def test_planted_gate_swap_fails_verify(case, ext, tmp_path):
    good, bad = tmp_path / f"good{ext}", tmp_path / f"bad{ext}"
    assert run("convert", FIX / case, good).exit_code == 0
    (_swap_torch_gates if ext == ".safetensors" else _swap_onnx_gates)(good, bad)
    assert run("verify", FIX / case, good).exit_code == 0
    r = run("verify", FIX / case, bad)
    assert_parity_failure(r)
    assert "parity: FAIL" in r.output


def test_convert_verify_flag_places_nothing_on_failure(tmp_path, monkeypatch):
    """``convert --verify``: a passing run places the output; a planted error (a gate order swapped
    in the writer) places nothing."""
    from gruconv.model import target_gates

    ok = tmp_path / "ok.safetensors"
    assert run("convert", FIX / "tf1/layer_uni", ok, "--verify").exit_code == 0 and ok.exists()
    monkeypatch.setitem(target_gates.TARGET_GATE_NAMES["torch"], "gru", ("update", "reset", "candidate"))
    bad = tmp_path / "bad.safetensors"
    r = run("convert", FIX / "tf1/layer_uni", bad, "--verify")
    assert_parity_failure(r)
    assert not bad.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ok.safetensors"]


# --------------------------------------------------------------------------- bad inputs, options

@pytest.mark.parametrize("ext", [".safetensors", ".onnx"])
def test_bad_input_one_line_nothing_left(ext, tmp_path):
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    before = digest(junk)
    r = run("convert", junk, tmp_path / f"out{ext}")
    assert r.exit_code == 3
    assert len(r.output.strip().splitlines()) == 1 and r.output.startswith("gruconv: error:")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.h5"] and digest(junk) == before


@pytest.mark.parametrize("ext", [".safetensors", ".onnx"])
def test_existing_output_refused(ext, tmp_path):
    out = tmp_path / f"out{ext}"
    out.write_bytes(b"mine")
    r = run("convert", FIX / "tf1/layer_uni", out)
    assert r.exit_code == 3 and out.read_bytes() == b"mine"
    assert len(r.output.strip().splitlines()) == 1


def test_unread_options_refused(tmp_path):
    """torch reads no interface option; onnx reads --initial-state/--mask-input, not --return-state."""
    r = run("convert", FIX / "tf1/layer_uni", tmp_path / "o.safetensors", "--initial-state")
    assert r.exit_code == 2 and "--initial-state does not apply" in r.output
    r = run("convert", FIX / "tf1/layer_uni", tmp_path / "o.onnx", "--return-state")
    assert r.exit_code == 2 and "--return-state does not apply" in r.output
    assert list(tmp_path.iterdir()) == []


def test_onnx_interface_options_verify(tmp_path):
    """--initial-state and --mask-input add h0/c0 and sequence_lens; verify drives them (variable lengths)."""
    import onnx

    out = tmp_path / "o.onnx"
    rep = convert_and_verify("tf1_lstm/layer_varlen", out, "--initial-state", "--mask-input")
    assert [i.name for i in onnx.load(str(out)).graph.input] == ["x", "h0", "c0", "sequence_lens"]
    assert any("variable lengths" in n for n in rep["notes"])


def test_multi_stack_torch_one_file_other_tensors(tmp_path):
    """multi_stack: both stacks in one file, and the checkpoint's other tensors by original name."""
    from gruconv.writers.torch.safetensors import other_tensors, read_document

    out = tmp_path / "all.safetensors"
    assert run("convert", FIX / "tf1/multi_stack", out).exit_code == 0
    doc = read_document(out)
    assert sorted(r["name"] for r in doc["rnns"]) == ["decoder/cudnn_gru", "encoder/cudnn_gru"]
    rest = other_tensors(out)
    assert rest and all(isinstance(v, np.ndarray) for v in rest.values())


def test_inspect_shows_targets():
    r = run("inspect", FIX / "tf1/layer_bidir")
    assert r.exit_code == 0
    assert ("torch: torch.nn.GRU(input_size=5, hidden_size=7, num_layers=2, bidirectional=True, "
            "batch_first=True)") in r.output
    assert "onnx: ONNX opset 17: 2 x GRU(hidden_size=7, direction=bidirectional, linear_before_reset=1)" in r.output


@pytest.mark.parametrize("fmt,expect", [("torch", {"multi_stack.safetensors", "layer_uni.safetensors"}),
                                        ("onnx", {"multi_stack", "layer_uni.onnx", "layer_uni.onnx.rest.npz"})])
def test_batch_names_from_registry(fmt, expect, tmp_path):
    out = tmp_path / "out"
    r = run("convert", FIX / "tf1/multi_stack", FIX / "tf1/layer_uni", "--out-dir", out, "--format", fmt,
            "--jobs", "1")
    assert r.exit_code == 0, r.output
    assert {p.name for p in out.iterdir() if not p.name.startswith(".")} == expect


# --------------------------------------------------------------------------- GPU: torch on cuDNN

@pytest.mark.gpu
@pytest.mark.parametrize("case", ["tf1/layer_bidir", "tf1/layer_varlen", "tf1_lstm/layer_3l_bidir",
                                  "tf1/opaque_only_skip_bidir", "keras_lstm/bidir_concat.h5"])
def test_verify_torch_on_cuda_against_cudnn(case, tmp_path):
    """``verify --device both --reference cudnn``: the module on torch's CUDA path (cuDNN's RNN) with TF32
    off counts and passes 1e-5 against real cuDNN; default math (TF32) is shown, not judged."""
    out = tmp_path / "out.safetensors"
    hints = HINTS.get(case, [])
    assert run("convert", FIX / case, out, *hints).exit_code == 0
    r = run("verify", FIX / case, out, *hints, "--reference", "cudnn", "--device", "both", "--steps", "50",
            "--batch", "4", "--json", tmp_path / "v.json")
    print(r.output)
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "v.json").read_text())
    strict = [c for c in rep["checks"] if c["device"] == "gpu strict"]
    default = [c for c in rep["checks"] if c["device"] == "gpu default"]
    assert strict and all(c["counts"] and c["passed"] for c in strict)
    assert default and not any(c["counts"] for c in default)
    assert "torch (CUDA, cuDNN, strict fp32)" in rep["environment"]["converted_by"]


@pytest.mark.parametrize("ext,content", [(".safetensors", b"\x08\0\0\0\0\0\0\0{}      "),
                                         (".safetensors", b"not a safetensors file"),
                                         (".onnx", b"\x08\x07garbage protobuf"),
                                         (".onnx", b"")])
def test_verify_refuses_a_bad_converted_file(ext, content, tmp_path):
    """A damaged or foreign output given to verify: one line, exit 3, never a traceback."""
    bad = tmp_path / f"bad{ext}"
    bad.write_bytes(content)
    r = run("verify", FIX / "tf1/layer_uni", bad)
    assert r.exit_code == 3, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gruconv: error:"), r.output
    assert bad.read_bytes() == content


def test_verify_refuses_a_foreign_onnx_model(tmp_path):
    """An ONNX model gruconv did not write (no GRU/LSTM stack interface) is one line, exit 3."""
    import onnx
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "relu.onnx"))
    r = run("verify", FIX / "tf1/layer_uni", tmp_path / "relu.onnx")
    assert r.exit_code == 3 and "not a gruconv stack model" in r.output
    assert len(r.output.strip().splitlines()) == 1


@pytest.mark.parametrize("ext", [".safetensors", ".onnx"])
def test_verify_against_another_models_output_is_one_line(ext, tmp_path):
    """The output of another checkpoint (other scope and shape), or of one stack of a multi-stack
    checkpoint verified against all of it: one line (exit 3), not a torch/onnxruntime shape error."""
    other = tmp_path / f"uni{ext}"
    assert run("convert", FIX / "tf1/layer_uni", other).exit_code == 0
    r = run("verify", FIX / "tf1/layer_bidir", other)
    assert r.exit_code == 3 and "not a conversion of this input" in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1
    one = tmp_path / f"encoder{ext}"
    assert run("convert", FIX / "tf1/multi_stack", one, "--rnn", "encoder/cudnn_gru").exit_code == 0
    assert run("verify", FIX / "tf1/multi_stack", one, "--rnn", "encoder/cudnn_gru").exit_code == 0
    r = run("verify", FIX / "tf1/multi_stack", one)
    assert r.exit_code == 3 and "holds no RNN named 'decoder/cudnn_gru'" in r.output, r.output
