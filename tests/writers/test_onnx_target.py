"""The ONNX target (one ``GRU``/``LSTM`` operator per layer) against real cuDNN, on onnxruntime's CPU.

Every golden case of ``fixtures/cudnn-golden*`` is built by :func:`gruconv.writers.onnx.graph.build` with
``h0``/``c0`` inputs (and ``sequence_lens`` where the golden has variable lengths), written, run by
onnxruntime and compared with cuDNN's own strict-fp32 ``y``/``hy``/``cy`` within 1e-5.  The
interface (names, shapes, dtypes, opset) is asserted from the model itself; a planted gate swap and
``linear_before_reset=0`` must fail the comparison.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from target_goldens import CASES, TOLERANCE, load_case, max_error

from gruconv.writers.onnx import graph as onnx_target
from gruconv.model import target_gates
from gruconv.errors import OutputError, UsageError
from gruconv.verify.reference.oracle import run_stack

ROOT = Path(__file__).resolve().parents[2]


def _dims(value_info) -> list:
    return [d.dim_param or d.dim_value for d in value_info.type.tensor_type.shape.dim]


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_golden_through_onnxruntime_cpu(path, tmp_path):
    case = load_case(path)
    s = case["stack"].shape
    varlen = case["lengths"] is not None
    out = tmp_path / f"{path.stem}.onnx"
    onnx_target.write(out, case["stack"], initial_state=True, mask_input=varlen)
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    # The interface of issue 21, read from the file.
    assert [o.domain for o in model.opset_import] == [""] and model.opset_import[0].version >= 17
    ins = {i.name: i for i in model.graph.input}
    outs = {o.name: o for o in model.graph.output}
    lstm = s.cell == "lstm"
    assert list(ins) == ["x", "h0"] + (["c0"] if lstm else []) + (["sequence_lens"] if varlen else [])
    assert list(outs) == ["y", "h_n"] + (["c_n"] if lstm else [])
    assert _dims(ins["x"]) == ["batch", "time", s.input_size]
    assert ins["x"].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert _dims(outs["y"]) == ["batch", "time", s.num_directions * s.units]
    assert _dims(outs["h_n"]) == _dims(ins["h0"]) == [s.num_pseudo_layers, "batch", s.units]
    ops = [n for n in model.graph.node if n.op_type in ("GRU", "LSTM")]
    assert [n.op_type for n in ops] == [{"gru": "GRU", "lstm": "LSTM"}[s.cell]] * s.num_layers
    for n in ops:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs["hidden_size"] == s.units
        assert attrs["direction"] == (b"bidirectional" if s.bidirectional else b"forward")
        assert attrs.get("linear_before_reset") == (None if lstm else 1)

    y, hy, cy = onnx_target.run_onnx(out, case["x"], case["h0"], case["c0"], case["lengths"])
    err = max_error(case, y, hy, cy)
    # Without the optional inputs: zero initial state, full lengths, against the float64 oracle.
    plain = onnx_target.build(case["stack"])
    assert [i.name for i in plain.graph.input] == ["x"]
    y0, hy0, cy0 = onnx_target.run_onnx(plain, case["x"])
    r64 = run_stack(case["stack"], case["x"])
    err0 = max(np.abs(y0 - r64[0]).max(), np.abs(hy0 - r64[1]).max(), 0 if cy0 is None else np.abs(cy0 - r64[2]).max())
    print(f"\n{case['file']}: onnxruntime CPU vs cuDNN strict {err:.2e}; no optional inputs vs f64 oracle {err0:.2e}")
    assert err <= TOLERANCE and err0 <= TOLERANCE


def test_gate_orders_are_onnx_documented_ones():
    """ONNX GRU ``W[zrh]``, LSTM ``W[iofc]`` (onnx.defs, the operator docs), as canonical indices."""
    assert target_gates.gate_order("onnx", "gru") == (1, 0, 2)
    assert target_gates.gate_order("onnx", "lstm") == (0, 3, 1, 2)
    assert target_gates.gate_order("torch", "gru") == (0, 1, 2)
    assert target_gates.gate_order("torch", "lstm") == (0, 1, 2, 3)
    for op, letters in (("GRU", "zrh"), ("LSTM", "iofc")):
        assert f"W[{letters}]" in onnx.defs.get_schema(op, 17).doc


@pytest.mark.parametrize("name,swap", [("gru_2l_bidir_varlen.npz", ("reset", "update")),
                                       ("lstm_2l_bidir.npz", ("forget", "output")),
                                       ("lstm_1l_uni.npz", ("input", "cell"))])
def test_planted_gate_swap_is_caught(name, swap, monkeypatch):
    case = load_case(next(p for p in CASES if p.name == name))
    cell = case["stack"].shape.cell
    order = list(target_gates.TARGET_GATE_NAMES["onnx"][cell])
    i, j = order.index(swap[0]), order.index(swap[1])
    order[i], order[j] = order[j], order[i]
    monkeypatch.setitem(target_gates.TARGET_GATE_NAMES["onnx"], cell, tuple(order))
    model = onnx_target.build(case["stack"], initial_state=True, mask_input=case["lengths"] is not None)
    err = max_error(case, *onnx_target.run_onnx(model, case["x"], case["h0"], case["c0"], case["lengths"]))
    print(f"\n{name}: {swap} swapped: max error {err:.3e}")
    assert err > 1e-3


def test_linear_before_reset_0_is_caught():
    """``linear_before_reset=0`` is Keras 2's ``reset_after=False``: another function, caught."""
    case = load_case(next(p for p in CASES if p.name == "gru_2l_uni.npz"))
    model = onnx_target.build(case["stack"], initial_state=True)
    for n in model.graph.node:
        for a in n.attribute:
            if a.name == "linear_before_reset":
                a.i = 0
    err = max_error(case, *onnx_target.run_onnx(model, case["x"], case["h0"]))
    assert err > 1e-3, err


def test_documented_run_code(tmp_path):
    """The onnxruntime code of docs/targets.md ("To ONNX"), run as written on a 32-input stack."""
    case = load_case(next(p for p in CASES if p.name == "gru_3l_bidir_32x64.npz"))
    out = tmp_path / "out.onnx"
    onnx_target.write(out, case["stack"])
    text = (ROOT / "docs" / "targets.md").read_text()
    code = re.search(r"<!-- onnx-run -->\s*```python\n(.*?)```", text, re.S).group(1)
    scope: dict = {}
    exec(compile(code.replace('"out.onnx"', repr(str(out))), "docs/targets.md", "exec"), scope)
    y, h_n, x = scope["y"], scope["h_n"], scope["x"]
    assert y.shape == (4, 50, 128) and h_n.shape == (6, 4, 64)
    r64 = run_stack(case["stack"], x.transpose(1, 0, 2))
    assert np.abs(y - r64[0].transpose(1, 0, 2)).max() <= TOLERANCE
    assert np.abs(h_n - r64[1]).max() <= TOLERANCE


def test_variable_lengths_zero_the_padding_and_take_each_last_state():
    """``sequence_lens`` with a length-1 sequence and a full one: outputs past a length are 0."""
    case = load_case(next(p for p in CASES if p.name == "lstm_2l_bidir_varlen.npz"))
    lengths = case["lengths"].copy()
    assert lengths.min() < lengths.max()
    lengths[0] = 1
    model = onnx_target.build(case["stack"], initial_state=True, mask_input=True)
    y, hy, cy = onnx_target.run_onnx(model, case["x"], case["h0"], case["c0"], lengths)
    r64 = run_stack(case["stack"], case["x"], case["h0"], lengths, case["c0"])
    assert np.all(y[1:, 0] == 0)
    assert max(np.abs(y - r64[0]).max(), np.abs(hy - r64[1]).max(), np.abs(cy - r64[2]).max()) <= TOLERANCE


def test_float64_stack_is_rounded_with_a_warning(tmp_path):
    case = load_case(CASES[0])
    st = case["stack"]
    st64 = type(st)(st.name, type(st.shape)(**{**st.shape.to_dict(), "dtype": "float64"}),
                    [p.astype(np.float64) for p in st.params])
    res = onnx_target.write(tmp_path / "f64.onnx", st64)
    assert len(res["warnings"]) == 1 and "rounded to float32" in res["warnings"][0]


def test_runner_refuses_inputs_the_model_lacks():
    case = load_case(CASES[0])
    model = onnx_target.build(case["stack"])
    with pytest.raises(UsageError, match="no h0 input"):
        onnx_target.run_onnx(model, case["x"], case["h0"])
    with pytest.raises(UsageError, match="no sequence_lens input"):
        onnx_target.run_onnx(model, case["x"], seq_lengths=np.ones(case["x"].shape[1], np.int32))


def test_write_refuses_to_overwrite_and_leaves_nothing_on_error(tmp_path, monkeypatch):
    case = load_case(CASES[0])
    out = tmp_path / "o.onnx"
    out.write_bytes(b"keep me")
    with pytest.raises(OutputError, match="output exists"):
        onnx_target.write(out, case["stack"])
    assert out.read_bytes() == b"keep me"
    onnx_target.write(out, case["stack"], force=True)
    assert ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).get_inputs()[0].name == "x"
    monkeypatch.setattr(onnx_target, "MAX_MODEL_BYTES", 100)
    with pytest.raises(OutputError, match="over protobuf's 2 GiB"):
        onnx_target.write(tmp_path / "big.onnx", case["stack"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.onnx"]
