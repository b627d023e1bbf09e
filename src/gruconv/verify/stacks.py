"""Stack checks: a bare RNN stack's converted model (a TF1 checkpoint's) against the reference fed
the stack's own stored opaque buffer, with initial states, final states and variable lengths when
the model takes them."""

from __future__ import annotations

import numpy as np

from ..errors import UsageError
from ..formats.keras3 import to_numpy
from .verdicts import compare


def verify_stack(stack, opaque, model, engine, report, rng, tolerance, user_inputs):
    """A TF1 stack: the converted model vs the reference fed the checkpoint's own stored buffer."""
    s = stack.shape
    bad = stack.nonfinite_count()
    if bad:
        report.notes.append(f"{stack.name}: {bad} NaN/Inf weight value(s) in the original; NaN outputs "
                            "at the same places on both sides count as equal")
    B, T = report.batch, report.steps
    if user_inputs:
        x = np.asarray(user_inputs[0])
        if x.ndim != 3 or x.shape[2] != s.input_size or 0 in x.shape or x.dtype.kind not in "fiu":
            raise UsageError(f"--inputs array 0 has shape {x.shape} and dtype {x.dtype}; stack {stack.name!r} "
                             f"takes (batch, time, {s.input_size}) floats", path=report.input)
        if x.dtype.kind == "f" and not np.isfinite(x).all():
            raise UsageError("--inputs array 0 holds NaN/Inf values", path=report.input)
        x = x.astype(s.dtype)
        B, T = x.shape[0], x.shape[1]
        report.batch, report.steps = int(B), int(T)
    else:
        x = rng.uniform(-1, 1, (B, T, s.input_size)).astype(s.dtype)
    h0 = rng.uniform(-0.5, 0.5, (s.num_pseudo_layers, B, s.units)).astype(s.dtype)
    lstm = s.cell == "lstm"  # LSTM: initial states h, c per pseudo-layer; final states likewise
    c0 = rng.uniform(-0.5, 0.5, (s.num_pseudo_layers, B, s.units)).astype(s.dtype) if lstm else None
    names = [t.name.split(":")[0] for t in model.inputs]
    has_state = any(n.startswith("initial_state") for n in names)
    lengths = None
    args = [x]
    if has_state:
        for i in range(s.num_pseudo_layers):
            args += [h0[i], c0[i]] if lstm else [h0[i]]
    if "mask" in names:  # a --mask-input model: exercise variable lengths (right-padded), one sequence full
        lengths = rng.integers(1, T + 1, B)
        lengths[0] = T
        args.append(np.arange(T)[None, :] < lengths[:, None])
        report.notes.append(f"{stack.name}: variable lengths {lengths.tolist()}")
    outs = model(args if len(args) > 1 else x)
    outs = [to_numpy(o) for o in (outs if isinstance(outs, (list, tuple)) else [outs])]
    y, hy, y64, hy64 = engine.run(stack, np.ascontiguousarray(x.transpose(1, 0, 2)), h0 if has_state else None,
                                  lengths, opaque=opaque, c0=c0 if has_state else None)
    cy, cy64 = engine.cy, engine.cy64
    y, y64 = y.transpose(1, 0, 2), y64.transpose(1, 0, 2)
    got = outs[0]
    if lengths is not None:  # only valid steps are defined outputs (cuDNN writes 0 past each length)
        valid = (np.arange(T)[None, :] < lengths[:, None])[:, :, None]
        got, y, y64 = (np.where(valid, a, 0) for a in (got, y, y64))
    report.checks.append(compare(f"{stack.name}: output sequence", got, y, y64, tolerance, s.dtype))
    per = 2 if lstm else 1
    for j, o in enumerate(outs[1:]):
        i, k = divmod(j, per)
        layer, d = divmod(i, s.num_directions)
        name = f"{stack.name}: final state l{layer} {'bw' if d else 'fw'}"
        if not lstm:
            report.checks.append(compare(name, o, hy[i], hy64[i], tolerance, s.dtype))
        elif k == 0:
            report.checks.append(compare(f"{name} h", o, hy[i], hy64[i], tolerance, s.dtype))
        else:
            report.checks.append(compare(f"{name} c", o, cy[i], cy64[i], tolerance, s.dtype))
