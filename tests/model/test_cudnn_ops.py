"""``model/cudnn_ops.py``: the cuDNN op facts the graph reader and both graph writers share, checked against
TensorFlow's own op registry (``tensorflow/core/ops/cudnn_rnn_ops.cc``)."""

from __future__ import annotations

import os

import pytest

from gruconv.model import cudnn_ops
from gruconv.model.canonical import CELLS, INPUT_MODES


def test_the_tables_agree_with_each_other():
    assert set(cudnn_ops.SETTINGS) <= set(cudnn_ops.ATTR_DEFAULTS)
    assert all(op.startswith(cudnn_ops.PREFIX) for op in cudnn_ops.CUDNN_OPS)
    assert set(cudnn_ops.RNN_OPS) | cudnn_ops.PACKING_OPS == set(cudnn_ops.OUTPUTS)
    assert cudnn_ops.WITH_LENGTHS <= set(cudnn_ops.RNN_OPS)
    assert cudnn_ops.TIME_MAJOR_OPS <= set(cudnn_ops.CUDNN_OPS)
    assert set(cudnn_ops.CELL_OF_MODE.values()) <= set(CELLS)
    assert {m for m in cudnn_ops.INPUT_MODES.values() if m is not None} <= set(INPUT_MODES)
    assert cudnn_ops.ATTR_DEFAULTS["input_mode"] in cudnn_ops.INPUT_MODES
    assert cudnn_ops.ATTR_DEFAULTS["direction"] in cudnn_ops.DIRECTIONS


@pytest.mark.slow   # imports TensorFlow
def test_the_facts_are_tensorflows_op_registry():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    pytest.importorskip("tensorflow")
    from tensorflow.python.framework import op_def_registry

    for op in cudnn_ops.CUDNN_OPS:
        assert op_def_registry.get(op) is not None, op
    for op, outputs in cudnn_ops.OUTPUTS.items():
        d = op_def_registry.get(op)
        assert tuple(a.name for a in d.output_arg) == outputs, op
        if op in cudnn_ops.RNN_OPS:
            want = cudnn_ops.INPUTS if op in cudnn_ops.WITH_LENGTHS else cudnn_ops.INPUTS[:-1]
            assert tuple(a.name for a in d.input_arg) == want, op
    for op in cudnn_ops.CUDNN_OPS:
        d = op_def_registry.get(op)
        attrs = {a.name: a for a in d.attr}
        assert ("time_major" in attrs) == (op in cudnn_ops.TIME_MAJOR_OPS), op
        for key, default in cudnn_ops.ATTR_DEFAULTS.items():
            if key not in attrs:
                continue
            value = attrs[key].default_value
            got = {"s": lambda: value.s.decode(), "b": lambda: value.b, "i": lambda: value.i,
                   "f": lambda: value.f}[value.WhichOneof("value")]()
            assert got == default, (op, key)
        if "T" in attrs:
            allowed = {int(t) for t in attrs["T"].allowed_values.list.type}
            assert set(cudnn_ops.DTYPES) <= allowed, op
