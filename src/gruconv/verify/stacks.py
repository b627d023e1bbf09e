"""Stack checks: a bare RNN stack's converted model (a TF1 checkpoint's) against the reference fed
the stack's own stored opaque buffer, with initial states, final states and variable lengths when
the model takes them; each output's sensitivity floor from the same assembly run with perturbed
float32 engines (:func:`gruconv.verify.floor.floors`)."""

from __future__ import annotations

import numpy as np

from ..model.canonical import CELLS

from ..errors import UsageError
from ..keras3.runtime import to_numpy
from .verdicts import ReferenceVariants, floor_cache, judge, measure_floors


def verify_stack(stack, opaque, model, engine, report, rng, user_inputs):
    """A TF1 stack: the converted model vs the reference fed the checkpoint's own stored buffer."""
    s = stack.shape
    bad = stack.nonfinite_count()
    if bad:
        report.notes.append(f"{stack.name}: {bad} NaN/Inf weight value(s) in the original; NaN outputs "
                            "at the same places on both sides count as equal")
    if not user_inputs and getattr(model, "steps", None):  # a target with a fixed number of steps
        report.steps = int(model.steps)
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
    states = CELLS[s.cell].states  # ("h",) or ("h", "c"): initial and final states per pseudo-layer
    c0 = rng.uniform(-0.5, 0.5, (s.num_pseudo_layers, B, s.units)).astype(s.dtype) if "c" in states else None
    names = [t.name.split(":")[0] for t in model.inputs]
    has_state = any(n.startswith("initial_state") for n in names)
    lengths = None
    args = [x]
    if has_state:
        for i in range(s.num_pseudo_layers):
            args += [{"h": h0, "c": c0}[st][i] for st in states]
    if "mask" in names:  # a --mask-input model: exercise variable lengths (right-padded), one sequence full
        lengths = rng.integers(1, T + 1, B)
        lengths[0] = T
        args.append(np.arange(T)[None, :] < lengths[:, None])
        report.notes.append(f"{stack.name}: variable lengths {lengths.tolist()}")
    outs = model(args if len(args) > 1 else x)
    outs = [to_numpy(o) for o in (outs if isinstance(outs, (list, tuple)) else [outs])]
    xt = np.ascontiguousarray(x.transpose(1, 0, 2))
    h0r, c0r = (h0, c0) if has_state else (None, None)
    valid = None if lengths is None else (np.arange(T)[None, :] < lengths[:, None])[:, :, None]

    def assemble(eng):
        """[output sequence, then (h, c) or h per pseudo-layer] from one reference run with ``eng``:
        the reference's outputs in check order (only valid steps of a variable-length batch)."""
        yy, hh, yy64, hh64 = eng.run(stack, xt, h0r, lengths, opaque=opaque, c0=c0r)
        cc, cc64 = eng.cy, eng.cy64

        def pack(y_, h_, c_):
            y_ = y_.transpose(1, 0, 2)
            if valid is not None:  # only valid steps are defined outputs (cuDNN writes 0 past each length)
                y_ = np.where(valid, y_, 0)
            out = [y_]
            for i in range(s.num_pseudo_layers):
                out += [{"h": h_, "c": c_}[st][i] for st in states]
            return out

        return pack(yy, hh, cc), pack(yy64, hh64, cc64)

    ref, ref64 = assemble(engine)
    alts = ReferenceVariants(engine, lambda e: assemble(e)[0])
    fl = measure_floors(report, lambda e: assemble(e)[0], ref64, key=(stack.name, xt, h0r, c0r, lengths),
                        cache=floor_cache(engine))
    got = outs[0]
    if valid is not None:
        got = np.where(valid, got, 0)
    report.checks.append(judge(report, f"{stack.name}: output sequence", got, ref[0], ref64[0], s.dtype,
                               fl[0], alts.at(0)))
    for j, o in enumerate(outs[1:]):
        i, k = divmod(j, len(states))
        layer, d = divmod(i, s.num_directions)
        name = f"{stack.name}: final state l{layer} {'bw' if d else 'fw'}"
        if len(states) > 1:
            name += f" {states[k]}"
        report.checks.append(judge(report, name, o, ref[1 + j], ref64[1 + j], s.dtype, fl[1 + j],
                                   alts.at(1 + j)))
