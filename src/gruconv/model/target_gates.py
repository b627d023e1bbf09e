"""Gate order and packing for the PyTorch and ONNX targets: every reorder for them happens here.

Both targets store, per pseudo-layer (layer x direction), the gate blocks of one side stacked
along the first axis, each block in cuDNN orientation (``(units, in)``, a matrix maps a column
vector): PyTorch's ``weight_ih_l{k}`` is ``(G*H, in)``, ONNX's ``W`` is
``(directions, G*H, in)``.  They differ only in the order of the blocks, written below as gate
NAMES of :data:`gruconv.model.canonical.CELLS`, so the permutation is derived, never typed as numbers:

* PyTorch ``nn.GRU``: ``weight_ih_l[k]`` = ``(W_ir|W_iz|W_in)``, reset, update, new (candidate),
  with ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))`` — the reset gate after the recurrent
  product, as cuDNN computes it.  ``nn.LSTM``: ``(W_ii|W_if|W_ig|W_io)``, input, forget, cell,
  output.  (PyTorch docs, ``torch.nn.GRU`` / ``torch.nn.LSTM`` "Variables"; the cuDNN LSTM golden
  README records PyTorch float64 ``nn.LSTM`` with blocks stacked i, f, c~, o matching cuDNN's
  float64 outputs to 3e-16.)  So PyTorch's order is cuDNN's own: the permutation is the identity.
* ONNX ``GRU``: ``W[zrh]`` — update, reset, hidden (candidate); with ``linear_before_reset=1``
  ``ht = g(Xt*(Wh^T) + (rt (.) (Ht-1*(Rh^T) + Rbh)) + Wbh)``, cuDNN's equation.  ONNX ``LSTM``:
  ``W[iofc]`` — input, output, forget, cell.  Bias ``B`` = ``[Wb[...], Rb[...]]``.  (ONNX operator
  docs, ``GRU``/``LSTM`` since opset 14, read from ``onnx.defs.get_schema`` of onnx 1.23.)

Skip input (``CUDNN_SKIP_INPUT``, layer 0 without input matrices): neither target has that mode,
so each gate gets an identity input matrix (input size equals units), which is exact: ``1*x + 0``
sums in any order to ``x``.
"""

from __future__ import annotations

import numpy as np

from .canonical import CELLS, GateParams

#: Gate names per target and cell, in the order the target stacks the gate blocks.
TARGET_GATE_NAMES = {
    "torch": {"gru": ("reset", "update", "candidate"), "lstm": ("input", "forget", "cell", "output")},
    "onnx": {"gru": ("update", "reset", "candidate"), "lstm": ("input", "output", "forget", "cell")},
}


def gate_order(target: str, cell: str) -> tuple:
    """Canonical (cuDNN) gate index of each of ``target``'s gate blocks, in the target's order."""
    names = CELLS[cell].gates
    order = tuple(names.index(n) for n in TARGET_GATE_NAMES[target][cell])
    assert sorted(order) == list(range(len(names))), (target, cell)
    return order


def stacked_blocks(p: GateParams, target: str, cell: str, input_size: int, dtype) -> tuple:
    """One pseudo-layer as ``(W (G*H, in), R (G*H, H), bW (G*H,), bR (G*H,))`` in ``target``'s
    gate order, cast to ``dtype``; a skip-input layer (``input_weights is None``) gets identity
    input matrices of width ``input_size`` (== units)."""
    order = list(gate_order(target, cell))
    dtype = np.dtype(dtype)
    G, H = p.recurrent_weights.shape[0], p.recurrent_weights.shape[1]
    if p.input_weights is None:
        if input_size != H:
            raise ValueError(f"skip input needs input_size == units, got {input_size} and {H}")
        W = np.tile(np.eye(H, dtype=dtype), (G, 1))
    else:
        W = np.asarray(p.input_weights, dtype=dtype)[order].reshape(G * H, -1)
    R = np.asarray(p.recurrent_weights, dtype=dtype)[order].reshape(G * H, H)
    bW = np.asarray(p.input_bias, dtype=dtype)[order].reshape(G * H)
    bR = np.asarray(p.recurrent_bias, dtype=dtype)[order].reshape(G * H)
    return W, R, bW, bR


# --------------------------------------------------------------------------- verify's view of a target

class _Input:
    """A named model input, as ``verify`` reads them off a Keras model (``t.name``)."""

    def __init__(self, name: str):
        self.name = name


def matching_runner(runners: dict, stack, *, only: bool, path):
    """The runner of ``stack`` among ``runners`` (by its name; a file of one RNN serves the one stack
    of an input that has one), checked to have the stack's shape: a converted file of another model
    is one :class:`InputError`, never a torch/onnxruntime shape error."""
    from ..errors import InputError

    runner = runners.get(stack.name) or (None if stack.name else runners.get(f"{stack.shape.cell}_stack"))
    if runner is None and only and len(runners) == 1:
        runner = next(iter(runners.values()))
    if runner is None:
        raise InputError(f"holds no RNN named {stack.name!r} (it has {', '.join(map(repr, runners))})", path=path)
    a, b = runner.shape, stack.shape
    mine = (a.cell, a.input_size, a.units, a.num_layers, a.bidirectional)
    theirs = (b.cell, b.input_size, b.units, b.num_layers, b.bidirectional)
    if mine != theirs:
        what = lambda t: f"{t[0].upper()} input {t[1]}, units {t[2]}, {t[3]} layer(s), {'bi' if t[4] else 'uni'}"  # noqa: E731
        raise InputError(f"RNN {runner.name!r} is {what(mine)}; the original {stack.name!r} is {what(theirs)}: "
                         "not a conversion of this input", path=path)
    return runner


class StackRunner:
    """A converted stack of a non-Keras target, driven the way ``verify`` drives the ``.keras`` stack
    model (:func:`gruconv.verify.stacks.verify_stack`), so that the per-stack checks and verdicts are
    the same code for every target.

    ``inputs``: ``x``, then (``state_inputs``) one ``initial_state_*`` per pseudo-layer state (h, and
    c for an LSTM, pseudo-layer by pseudo-layer: cuDNN's order, as
    :func:`gruconv.keras3.runtime.build_stack_model` names them), then (``mask_input``) ``mask``.
    Calling it with those arrays (batch-major; ``mask`` right-padded booleans) returns
    ``[y (batch, time, dirs*units), h_0 (, c_0), h_1 ...]``: the sequence, then every final state.

    ``run(x_tm, h0, c0, lengths, math)`` is the target's own engine (torch, onnxruntime), time-major,
    returning ``(y, hy, cy or None)`` as :func:`gruconv.verify.reference.oracle.run_stack` does; ``math`` is the GPU
    math of the run ``verify`` is doing (:data:`gruconv.verify.CURRENT_RUN`; None: the CPU), and
    ``engine(math)`` says in words what runs it (``self.engine``: the last run's).
    """

    def __init__(self, name: str, shape, run, *, state_inputs: bool = True, mask_input: bool = True,
                 engine=None):
        self.name, self.shape, self._run = name, shape, run
        self._engine = engine or (lambda math: "")
        self.engine = self._engine(None)
        self.state_inputs, self.mask_input = state_inputs, mask_input
        per = 2 if shape.cell == "lstm" else 1
        names = ["x"]
        if state_inputs:
            names += [f"initial_state_{i}" for i in range(shape.num_pseudo_layers * per)]
        if mask_input:
            names.append("mask")
        self.inputs = [_Input(n) for n in names]

    def __call__(self, args):
        args = list(args) if isinstance(args, (list, tuple)) else [args]
        s = self.shape
        lstm = s.cell == "lstm"
        x = np.asarray(args.pop(0))
        h0 = c0 = lengths = None
        if self.state_inputs:
            per = 2 if lstm else 1
            states = [np.asarray(a) for a in args[:s.num_pseudo_layers * per]]
            args = args[s.num_pseudo_layers * per:]
            h0 = np.stack(states[0::per])
            c0 = np.stack(states[1::per]) if lstm else None
        if self.mask_input:
            lengths = np.asarray(args.pop(0)).astype(bool).sum(axis=1)
        from ..verify import CURRENT_RUN

        _, math = CURRENT_RUN.get()  # None: CPU; "strict" / "default": the GPU run verify is doing
        self.engine = self._engine(math)
        y, hy, cy = self._run(np.ascontiguousarray(x.transpose(1, 0, 2)), h0, c0, lengths, math)
        out = [np.ascontiguousarray(np.asarray(y).transpose(1, 0, 2))]
        for i in range(s.num_pseudo_layers):
            out.append(hy[i])
            if lstm:
                out.append(cy[i])
        return out
