"""A converted stack of a non-Keras target (torch, onnx) as ``verify`` drives it: :class:`StackRunner`, the
same inputs and outputs as the ``.keras`` stack model (:func:`gruconv.keras3.build.build_stack_model`), so
the per-stack checks and verdicts are one code path for every target.  The writers of those targets hand
their stacks over as runners (their ``runners`` verb); it lives with the targets, not in ``verify``, so no
writer imports ``verify`` (the GPU math of a run is an argument, :meth:`StackRunner.on`); the gate packing
they need is :mod:`gruconv.model.target_gates`."""

from __future__ import annotations

import numpy as np

from ..model.canonical import CELLS


class _Input:
    """A named model input, as ``verify`` reads them off a Keras model (``t.name``)."""

    def __init__(self, name: str):
        self.name = name


class StackRunner:
    """A converted stack of a non-Keras target, driven the way ``verify`` drives the ``.keras`` stack
    model (:func:`gruconv.verify.stacks.verify_stack`), so that the per-stack checks and verdicts are
    the same code for every target.

    ``inputs``: ``x``, then (``state_inputs``) one ``initial_state_*`` per pseudo-layer state (h, and
    c for an LSTM, pseudo-layer by pseudo-layer: cuDNN's order, as
    :func:`gruconv.keras3.build.build_stack_model` names them), then (``mask_input``) ``mask``.
    Calling it with those arrays (batch-major; ``mask`` right-padded booleans) returns
    ``[y (batch, time, dirs*units), h_0 (, c_0), h_1 ...]``: the sequence, then every final state.

    ``run(x_tm, h0, c0, lengths, math)`` is the target's own engine (torch, onnxruntime), time-major,
    returning ``(y, hy, cy or None)`` as :func:`gruconv.verify.reference.oracle.run_stack` does; ``math`` is the GPU
    math it runs with (None: the CPU; ``"strict"`` / ``"default"``: a GPU run), an argument: the runner is
    made for the CPU and :meth:`on` gives its twin for another run (``verify`` asks for the run it is
    doing), so a writer needs nothing of ``verify``.  ``engine(math)`` says in words what runs it
    (``self.engine``: the last run's).
    """

    def __init__(self, name: str, shape, run, *, state_inputs: bool = True, mask_input: bool = True,
                 engine=None, math=None, steps=None):
        self.name, self.shape, self._run, self.math = name, shape, run, math
        #: the number of time steps the target fixes (an unrolled ``.tflite``), None: any
        self.steps = steps
        self._engine = engine or (lambda math: "")
        self.engine = self._engine(None)
        self.state_inputs, self.mask_input = state_inputs, mask_input
        per = len(CELLS[shape.cell].states)
        names = ["x"]
        if state_inputs:
            names += [f"initial_state_{i}" for i in range(shape.num_pseudo_layers * per)]
        if mask_input:
            names.append("mask")
        self.inputs = [_Input(n) for n in names]

    def __call__(self, args):
        args = list(args) if isinstance(args, (list, tuple)) else [args]
        s = self.shape
        per = len(CELLS[s.cell].states)  # h (and c): each pseudo-layer's final states, cuDNN's order
        x = np.asarray(args.pop(0))
        h0 = c0 = lengths = None
        if self.state_inputs:
            states = [np.asarray(a) for a in args[:s.num_pseudo_layers * per]]
            args = args[s.num_pseudo_layers * per:]
            h0 = np.stack(states[0::per])
            c0 = np.stack(states[1::per]) if per > 1 else None
        if self.mask_input:
            lengths = np.asarray(args.pop(0)).astype(bool).sum(axis=1)
        self.engine = self._engine(self.math)
        y, hy, cy = self._run(np.ascontiguousarray(x.transpose(1, 0, 2)), h0, c0, lengths, self.math)
        finals = (hy, cy)[:per]
        out = [np.ascontiguousarray(np.asarray(y).transpose(1, 0, 2))]
        for i in range(s.num_pseudo_layers):
            out += [f[i] for f in finals]
        return out

    def on(self, math) -> "StackRunner":
        """This runner for a run with GPU math ``math`` (None: the CPU)."""
        return StackRunner(self.name, self.shape, self._run, state_inputs=self.state_inputs,
                           mask_input=self.mask_input, engine=self._engine, math=math, steps=self.steps)
