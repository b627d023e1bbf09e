"""Numerical parity: the ORIGINAL parameters through a reference GRU vs the converted Keras 3 model.

References (``--reference``):

``cudnn``
    The real cuDNN GRU on a GPU (:mod:`gruconv.cudnn_rnn`), fed the opaque
    buffer exactly as the original framework fed it: for a TF1 checkpoint the
    stored buffer itself; for a Keras ``CuDNNGRU`` the buffer its
    ``_process_batch`` builds (each direction a separate unidirectional
    cuDNN call, weights flattened in cuDNN gate order — see
    :mod:`gruconv.keras_layout`).  Strict fp32 (``CUDNN_FMA_MATH``) unless
    ``allow_tf32``: with TF32, cuDNN's own error against float64 is 1e-4–5e-4
    (``shared/cudnn-golden/README.md``), so a 1e-5 check would fail on
    correct weights.
``oracle``
    :mod:`gruconv.oracle`, float64 NumPy, on any machine.
``auto``
    ``cudnn`` when a GPU and libcudnn are usable, else ``oracle``; the report
    says which ran and why.

Every check also reports the reference's own error against float64 (the
noise floor), so a chaotic GRU's amplified rounding is not mistaken for a
conversion bug.  The converted side always runs on the CPU.

Checks: per converted recurrent layer (fed exactly the activations that reach
it in the converted model; every output compared: sequence/last output and
final states), plus end to end where the reference can produce the model's
outputs (a TF1 stack; a Sequential model).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from . import readers
from .canonical import RNNStack, StackShape
from .cudnn_layout import unpack
from .keras_layout import cudnn_opaque, to_cudnn
from .errors import InputError, ReferenceUnavailable, UsageError
from .results import Options

FLOAT16_TOLERANCE_FLOOR = 4e-3  # float16 rounding of a tanh output in [-1, 1] is ~5e-4 per step


@dataclass
class Check:
    """One compared output.  ``device``: where the converted side ran (``cpu``, ``gpu strict``,
    ``gpu default``); ``counts``: whether it decides the verdict (default-math GPU rows show the
    precision cost of a deployment setting and are informational); ``reason``: why it failed,
    in words."""

    name: str
    max_abs: float
    max_rel: float
    tolerance: float
    passed: bool
    reference_error: Optional[float]
    shape: tuple
    nonfinite: int = 0
    device: str = "cpu"
    counts: bool = True
    reason: str = ""


@dataclass
class VerifyReport:
    input: str
    converted: Optional[str]
    reference: str
    reference_reason: str
    tolerance: float
    math_mode: str
    seed: int
    batch: int
    steps: int
    checks: list = field(default_factory=list)
    environment: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    nothing_to_convert: bool = False
    devices: list = field(default_factory=list)      # [{device, math, ran, reason, kernels}]

    @property
    def passed(self) -> bool:
        if self.nothing_to_convert:
            return True
        counted = [c for c in self.checks if c.counts]
        return bool(counted) and all(c.passed for c in counted)

    def to_json(self) -> dict:
        out = asdict(self)
        out["passed"] = self.passed
        out["checks"] = [dict(asdict(c), shape=list(c.shape)) for c in self.checks]
        return out


# --------------------------------------------------------------------------- reference engines

class _Engine:
    """Runs a canonical stack; also returns its float64 run for the noise floor.

    An LSTM's initial cell state goes in as ``c0``; its final cell states, the
    reference's and the float64 oracle's, are left in ``cy`` and ``cy64``
    (None for a GRU) after each :meth:`run`.
    """

    def __init__(self, kind: str, allow_tf32: bool):
        self.kind = kind
        self.allow_tf32 = allow_tf32
        self.info: dict = {}
        self.cy = self.cy64 = None
        if kind == "cudnn":
            from . import cudnn_lib

            ok, reason = cudnn_lib.available()
            if not ok:
                raise ReferenceUnavailable(f"cuDNN reference unavailable: {reason}")
            self.info = cudnn_lib.library_info()

    def run(self, stack: RNNStack, x_tm: np.ndarray, h0=None, lengths=None, opaque=None, c0=None) -> tuple:
        """(y, hy, y64, hy64): reference outputs and the float64 oracle's, time-major."""
        from .oracle import run_stack

        y64, hy64, cy64 = run_stack(stack, x_tm, h0, lengths, c0)
        self.cy64 = cy64
        if self.kind == "oracle":
            self.cy = cy64
            return y64, hy64, y64, hy64
        from . import cudnn_rnn
        from .cudnn_layout import pack

        buf = pack(stack.params, stack.shape) if opaque is None else opaque
        cast = lambda a: None if a is None else np.asarray(a).astype(buf.dtype)  # noqa: E731
        y, hy, cy, info = cudnn_rnn.run(buf, stack.shape, x_tm.astype(buf.dtype), cast(h0), cast(c0),
                                        lengths, allow_tf32=self.allow_tf32)
        self.cy = cy
        self.info.update(info)
        return y, hy, y64, hy64


def _choose_reference(reference: str) -> tuple:
    if reference not in ("auto", "cudnn", "oracle"):
        raise UsageError(f"--reference must be auto, cudnn or oracle, got {reference!r}")
    if reference == "oracle":
        return "oracle", "requested"
    if reference == "cudnn":
        return "cudnn", "requested"
    try:
        from . import cudnn_lib

        ok, reason = cudnn_lib.available()
    except Exception as e:  # noqa: BLE001 - availability probing must never fail verify
        ok, reason = False, str(e)
    if ok:
        return "cudnn", f"auto: {reason}"
    short = reason.split(";")[0].split(": ")[-1][:80]
    return "oracle", f"auto: no usable GPU/cuDNN here: {short}; float64 oracle instead"


# --------------------------------------------------------------------------- comparison

def _compare(name: str, got, ref, ref64, tolerance: float, dtype: str) -> Check:
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape:
        return Check(name, float("inf"), float("inf"), tolerance, False, None, tuple(got.shape),
                     reason=f"shape {tuple(got.shape)} where the reference has {tuple(ref.shape)}")
    both_nan = np.isnan(got) & np.isnan(ref)
    diff = np.where(both_nan, 0.0, np.abs(got - ref))
    nonfinite = int(np.count_nonzero(~np.isfinite(got)) + np.count_nonzero(~np.isfinite(ref)))
    max_abs = float(np.max(diff)) if diff.size else 0.0
    if np.isnan(max_abs):
        max_abs = float("inf")
    scale = float(np.max(np.abs(ref[np.isfinite(ref)]))) if np.isfinite(ref).any() else 0.0
    max_rel = max_abs / scale if scale > 0 else max_abs
    tol = max(tolerance, FLOAT16_TOLERANCE_FLOOR) if dtype == "float16" else tolerance
    floor = None
    if ref64 is not None:
        r64 = np.asarray(ref64, dtype=np.float64)
        floor = float(np.nanmax(np.abs(ref - r64))) if r64.size else 0.0
    passed = bool(max_abs <= tol) and nonfinite == 0
    if nonfinite:
        reason = f"{nonfinite} NaN/Inf value(s) among the outputs: never a pass, whatever the difference"
    elif not passed:
        reason = f"max abs difference {max_abs:.3g} over the tolerance {tol:g}"
    else:
        reason = ""
    return Check(name, max_abs, max_rel, tol, passed, floor, tuple(got.shape), nonfinite, reason=reason)


def _np(keras, t):
    from .formats.keras3 import to_numpy

    return to_numpy(t)


# --------------------------------------------------------------------------- Keras HDF5 models

def _random_inputs(keras, model, batch: int, steps: int, rng) -> list:
    emb = [l.input_dim for l in _all_layers(keras, model) if isinstance(l, keras.layers.Embedding)]
    vocab = min(emb) if emb else 10
    # A nested model may fix a dimension its outer model leaves open (outer Input(None), inner
    # Input(12)): the tightest declared dims of same-rank nested inputs are used.
    nested = [tuple(t.shape) for l in _all_layers(keras, model) if isinstance(l, keras.Model)
              for t in l.inputs]
    zero_masked = any(isinstance(l, keras.layers.Embedding) and getattr(l, "mask_zero", False)
                      for l in _all_layers(keras, model))
    mask_values = [float(l.mask_value) for l in _all_layers(keras, model) if isinstance(l, keras.layers.Masking)]
    out = []
    for t in model.inputs:
        shape = [d for d in t.shape]
        for inner in nested:
            if len(inner) == len(shape):
                shape = [i if s is None and i is not None else s for s, i in zip(shape, inner)]
        if shape and shape[0] is None:
            shape[0] = batch
        shape = [steps if d is None else d for d in shape]
        dtype = str(t.dtype)
        if "int" in dtype:
            a = rng.integers(1 if zero_masked else 0, vocab, size=shape).astype(dtype)
        else:
            a = rng.uniform(-1.0, 1.0, size=shape).astype(dtype)
        if (zero_masked and "int" in dtype or mask_values and "int" not in dtype) and len(shape) >= 2 \
                and shape[1] > 1:
            # right padding on every other sequence: masked steps the converted layer skips
            pad = mask_values[0] if "int" not in dtype else 0
            a[::2, shape[1] // 2:] = pad
        out.append(a)
    return out


def _all_layers(keras, model) -> list:
    out = []
    for layer in model.layers:
        out.append(layer)
        if isinstance(layer, keras.Model):
            out.extend(_all_layers(keras, layer))
        for attr in ("layer", "forward_layer", "backward_layer"):
            inner = getattr(layer, attr, None)
            if isinstance(inner, keras.layers.Layer):
                out.append(inner)
    return out


def _masks_reaching(keras, model, doc, feed) -> dict:
    """{id(layer): mask array} for the converted recurrent layers that receive a mask when the
    whole model runs on ``feed`` (:func:`gruconv.formats.keras3.masks_received`; a CuDNNGRU never
    used one)."""
    from .formats.keras3 import find_layer, masks_received

    targets = []
    for rnn in doc.rnns:
        parts = rnn.path.split("/")
        if rnn.wrapper is not None:
            parts = parts[:-1]
        layer = find_layer(model, parts)
        if layer is not None:
            targets.append(layer)
    return masks_received(model, targets, feed)


def _reference_rnn(rnn, x_bt: np.ndarray, engine: _Engine, initial_state=None) -> tuple:
    """The ORIGINAL CuDNNGRU / CuDNNLSTM (or Bidirectional of one) outputs, as the original layer returned them.

    Returns (outputs, outputs64) in the layer's output order.  Semantics (tf_keras
    ``layers/rnn/base_cudnn_rnn.py``): ``go_backwards`` reverses the input and
    returns outputs in processing order; Bidirectional runs a second layer on
    the reversed input and re-reverses its sequence before merging.  States
    with ``return_state``: ``[h]`` (GRU) or ``[h, c]`` (LSTM, ``cudnn_lstm.py``
    returns ``output, [h, c]``); Bidirectional appends the forward layer's
    states, then the backward layer's (tf_keras and Keras 3 ``bidirectional.py``:
    ``states = y[1:] + y_rev[1:]``).
    """
    s = rnn.stack.shape
    opts = rnn.options
    lead = x_bt.shape[:-2]
    x = x_bt.reshape((-1,) + x_bt.shape[-2:])  # TimeDistributed folds its extra axes into the batch

    lstm = s.cell == "lstm"

    per_dir = len(s.cell_spec.states)
    init = initial_state or []

    def one(params, reverse_input, d=0):
        # The buffer the ORIGINAL layer gave cuDNN: stored arrays (to_cudnn, the exact inverse of the
        # reader) packed as CuDNNGRU/CuDNNLSTM packs them (cudnn_opaque), read back by the golden-tested layout.
        xi = x[:, ::-1] if reverse_input else x
        shape = StackShape(s.input_size, s.units, 1, False, "linear", s.dtype, s.cell)
        buf = cudnn_opaque(*to_cudnn(params, s.cell), s.cell)
        uni = RNNStack(rnn.path, shape, unpack(buf, shape))
        given = init[d * per_dir:(d + 1) * per_dir]
        h0 = given[0][None] if given else None
        c0 = given[1][None] if len(given) > 1 else None
        y, hy, y64, hy64 = engine.run(uni, np.ascontiguousarray(xi.transpose(1, 0, 2)), h0, opaque=buf,
                                      **({"c0": c0} if c0 is not None else {}))
        states = [hy[0]] + ([engine.cy[0]] if lstm else [])
        states64 = [hy64[0]] + ([engine.cy64[0]] if lstm else [])
        return (y.transpose(1, 0, 2), states), (y64.transpose(1, 0, 2), states64)

    def outputs(pairs):
        if rnn.wrapper != "Bidirectional":
            (y, st), = pairs
            outs = [y if opts["return_sequences"] else st[0]]
            return outs + (st if opts["return_state"] else [])
        (yf, stf), (yb, stb) = pairs
        hf, hb = stf[0], stb[0]
        if opts["return_sequences"]:
            fw, bw = yf, yb[:, ::-1]
        else:
            fw, bw = hf, hb
        mode = rnn.merge_mode
        merged = {"concat": lambda: [np.concatenate([fw, bw], -1)], "sum": lambda: [fw + bw],
                  "mul": lambda: [fw * bw], "ave": lambda: [(fw + bw) / 2], None: lambda: [fw, bw]}[mode]()
        return merged + (stf + stb if opts["return_state"] else [])

    go_back = opts["go_backwards"]
    runs = [one(rnn.stack.params[0], go_back)]
    if rnn.wrapper == "Bidirectional":
        runs.append(one(rnn.stack.params[1], not go_back, 1))
    ref = outputs([r[0] for r in runs])
    ref64 = outputs([r[1] for r in runs])
    fold = lambda a: a.reshape(lead + a.shape[1:])  # noqa: E731
    return [fold(a) for a in ref], [fold(a) for a in ref64]


def _compute_dtype(rnn) -> str:
    """The dtype the layer computes in: its weights' dtype, or float16 under a mixed-precision
    policy (``mixed_float16`` / ``mixed_bfloat16``: float32 weights, half-precision math, in the
    original CuDNNGRU as in the converted GRU), which gets the float16 tolerance floor."""
    dtype = (rnn.config.get("config") or {}).get("dtype")
    name = dtype if isinstance(dtype, str) else ((dtype or {}).get("config") or {}).get("name") \
        if isinstance(dtype, dict) else None
    if isinstance(name, str) and name.startswith("mixed_"):
        return "float16"
    return rnn.stack.shape.dtype


def _check_user_inputs(keras, model, feed: list, where) -> None:
    """``--inputs`` must fit the model: one array per input, its rank, fixed dims and dtype kind,
    and token ids inside every Embedding's vocabulary.  One-line usage errors, never a traceback."""
    if len(feed) != len(model.inputs):
        raise UsageError(f"--inputs holds {len(feed)} array(s), the model takes {len(model.inputs)} "
                         f"({', '.join(t.name for t in model.inputs)})", path=where)
    emb = [l.input_dim for l in _all_layers(keras, model) if isinstance(l, keras.layers.Embedding)]
    for i, (a, t) in enumerate(zip(feed, model.inputs)):
        want = tuple(t.shape)
        if a.ndim != len(want) or any(w is not None and w != g for w, g in zip(want, a.shape)):
            raise UsageError(f"--inputs array {i} has shape {a.shape}, the model input {t.name!r} takes "
                             f"{tuple('?' if w is None else w for w in want)}", path=where)
        if a.ndim >= 2 and a.shape[0] == 0 or a.size == 0:
            raise UsageError(f"--inputs array {i} is empty (shape {a.shape})", path=where)
        integer = "int" in str(t.dtype)
        if a.dtype.kind not in ("iu" if integer else "fiu") or a.dtype.kind == "b":
            raise UsageError(f"--inputs array {i} has dtype {a.dtype}, the model input {t.name!r} takes "
                             f"{t.dtype}", path=where)
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise UsageError(f"--inputs array {i} holds NaN/Inf values", path=where)
        if integer and emb and a.size and (a.min() < 0 or a.max() >= min(emb)):
            raise UsageError(f"--inputs array {i} holds token ids {int(a.min())}..{int(a.max())}, outside the "
                             f"Embedding vocabulary 0..{min(emb) - 1}", path=where)


def _verify_graph(doc, model, engine, report, rng, tolerance, user_inputs):
    keras = _keras()
    if user_inputs:
        feed = [np.asarray(a).astype(str(t.dtype)) for a, t in zip(user_inputs, model.inputs)]
        report.batch = int(feed[0].shape[0])
        report.steps = int(feed[0].shape[1]) if feed[0].ndim > 1 else 0
    else:
        feed = _random_inputs(keras, model, report.batch, report.steps, rng)
    from .formats.keras3 import layer_call, mask_producers

    masks = _masks_reaching(keras, model, doc, feed) if mask_producers(model) else {}
    for rnn in doc.rnns:
        bad = rnn.stack.nonfinite_count()
        if bad:
            report.notes.append(f"{rnn.path}: {bad} NaN/Inf weight value(s) in the original; NaN outputs "
                                "at the same places on both sides count as equal")
        parts = rnn.path.split("/")
        if rnn.wrapper is not None:
            parts = parts[:-1]
        layer, args, kwargs = layer_call(model, parts, feed)
        if getattr(layer, "stateful", False) or getattr(getattr(layer, "layer", None), "stateful", False):
            for l in (layer, getattr(layer, "layer", None)):
                if hasattr(l, "reset_states"):
                    l.reset_states()
        mask = masks.get(id(layer))
        if mask is not None:
            kwargs = dict(kwargs, mask=mask)
            report.notes.append(f"{rnn.path}: the converted layer receives a mask ({int((~mask).sum())} padded "
                                "step(s) in the inputs); the original cuDNN layer ignored masks")
        got = layer(*args, **kwargs)
        got = [_np(keras, g) for g in (got if isinstance(got, (list, tuple)) else [got])]
        x = np.asarray(args[0])
        states = kwargs.get("initial_state")
        states = None if states is None else [np.asarray(a, dtype=np.float64) for a in
                                              (states if isinstance(states, (list, tuple)) else [states])]
        if states is not None:
            report.notes.append(f"{rnn.path}: fed its initial state from the model, as in the original")
        ref, ref64 = _reference_rnn(rnn, x.astype(np.float64), engine, states)
        names = _output_names(rnn)
        for name, g, r, r64 in zip(names, got, ref, ref64):
            report.checks.append(_compare(f"{rnn.path}: {name}", g, r, r64, tolerance, _compute_dtype(rnn)))
        if len(got) != len(ref):
            report.checks.append(Check(f"{rnn.path}: output count", float("inf"), float("inf"), tolerance,
                                       False, None, (len(got), len(ref))))
    if isinstance(model, keras.Sequential) and doc.rnns and all("/" not in r.path or r.wrapper and
                                                               r.path.count("/") == 1 for r in doc.rnns):
        _end_to_end_sequential(keras, doc, model, engine, report, feed, tolerance)


def _output_names(rnn) -> list:
    opts = rnn.options
    first = "sequence" if opts["return_sequences"] else "last output"
    if rnn.wrapper == "Bidirectional" and rnn.merge_mode is None:
        names = [f"forward {first}", f"backward {first}"]
    else:
        names = [first]
    if opts["return_state"]:
        states = ["state"] if rnn.shape.cell == "gru" else ["state h", "state c"]
        if rnn.wrapper == "Bidirectional":
            states = [f"{d} {st}" for d in ("forward", "backward") for st in states]
        names += states
    return names


def _end_to_end_sequential(keras, doc, model, engine, report, feed, tolerance):
    by_top = {r.path.split("/")[0]: r for r in doc.rnns}
    act = feed[0]
    act64 = act.astype(np.float64)
    for layer in model.layers:
        rnn = by_top.get(layer.name)
        if rnn is not None:
            ref, ref64 = _reference_rnn(rnn, act64, engine)
            act, act64 = ref[0], ref64[0]
        else:
            act = _np(keras, layer(act))  # non-recurrent layers: the converted model's own (unchanged) layers
            act64 = act.astype(np.float64)
    got = _np(keras, model(feed[0]))
    report.checks.append(_compare("end to end: model output", got, act, None, tolerance, "float32"))


# --------------------------------------------------------------------------- TF1 stacks

def _verify_stack(stack, opaque, model, engine, report, rng, tolerance, user_inputs):
    """A TF1 stack: the converted model vs the reference fed the checkpoint's own stored buffer."""
    keras = _keras()
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
    outs = [_np(keras, o) for o in (outs if isinstance(outs, (list, tuple)) else [outs])]
    y, hy, y64, hy64 = engine.run(stack, np.ascontiguousarray(x.transpose(1, 0, 2)), h0 if has_state else None,
                                  lengths, opaque=opaque, c0=c0 if has_state else None)
    cy, cy64 = engine.cy, engine.cy64
    y, y64 = y.transpose(1, 0, 2), y64.transpose(1, 0, 2)
    got = outs[0]
    if lengths is not None:  # only valid steps are defined outputs (cuDNN writes 0 past each length)
        valid = (np.arange(T)[None, :] < lengths[:, None])[:, :, None]
        got, y, y64 = (np.where(valid, a, 0) for a in (got, y, y64))
    report.checks.append(_compare(f"{stack.name}: output sequence", got, y, y64, tolerance, s.dtype))
    per = 2 if lstm else 1
    for j, o in enumerate(outs[1:]):
        i, k = divmod(j, per)
        layer, d = divmod(i, s.num_directions)
        name = f"{stack.name}: final state l{layer} {'bw' if d else 'fw'}"
        if not lstm:
            report.checks.append(_compare(name, o, hy[i], hy64[i], tolerance, s.dtype))
        elif k == 0:
            report.checks.append(_compare(f"{name} h", o, hy[i], hy64[i], tolerance, s.dtype))
        else:
            report.checks.append(_compare(f"{name} c", o, cy[i], cy64[i], tolerance, s.dtype))


# --------------------------------------------------------------------------- entry point

def _keras():
    from .formats.keras3 import keras

    return keras()


DEVICES = ("auto", "cpu", "gpu", "both")

#: Random-input size bound (batch x steps): a parity check needs a few steps, and an unbounded request
#: would allocate before anything ran (``tests/test_hostile.py``, ``verify_steps_huge``).
MAX_RANDOM_STEPS = 1_000_000


def _device_runs(device: str, report) -> list:
    """[(label, math)] of the converted-side runs asked for; GPU runs only where the backend has one.

    ``auto``: ``both`` where a GPU is usable, else ``cpu``.  Each GPU run is done twice: strict fp32
    (counts for the verdict) and the framework's default math (informational)."""
    from .formats import keras3

    if device not in DEVICES:
        raise UsageError(f"--device must be one of {', '.join(DEVICES)}, got {device!r}")
    runs = [("cpu", None)] if device in ("auto", "cpu", "both") else []
    if device == "cpu":
        return runs
    ok, why = keras3.gpu_status()
    backend = keras3.keras().backend.backend()
    if not ok:
        if device == "gpu":
            raise ReferenceUnavailable(f"--device gpu: the {backend} backend has no usable GPU here ({why})")
        report.notes.append(f"GPU path not run: {why}")
        report.devices.append({"device": "gpu", "ran": False, "reason": why})
        return runs
    settings = keras3.MATH_SETTINGS.get(backend, {})
    for math in ("strict", "default"):
        report.devices.append({"device": f"gpu {math}", "ran": True, "reason": why,
                               "math": settings.get(math, math), "kernels": {}})
        runs.append((f"gpu {math}", math))
    return runs


def verify(input, converted=None, options: Optional[Options] = None, *, tolerance: float = 1e-5,
           reference: str = "auto", allow_tf32: bool = False, batch: int = 2, steps: int = 8, seed: int = 0,
           inputs=None, device: str = "cpu", **kw) -> VerifyReport:
    """Run the original parameters through the reference and the converted model on the CPU; compare.

    Without ``converted``, the model is built in memory by the format's
    ``to_keras`` — the same code ``convert`` saves from.  Never raises for a
    parity failure: the report says; the CLI decides.
    """
    from .formats import keras3

    opts = Options.of(options, **kw)
    input = Path(input)
    kind, reason = _choose_reference(reference)
    engine = _Engine(kind, allow_tf32)
    report = VerifyReport(
        input=str(input), converted=None if converted is None else str(converted), reference=kind,
        reference_reason=reason, tolerance=tolerance,
        math_mode=("float64" if kind == "oracle" else ("TF32 allowed (CUDNN_DEFAULT_MATH)" if allow_tf32
                                                      else "strict fp32 (CUDNN_FMA_MATH)")),
        seed=seed, batch=batch, steps=steps,
    )
    if batch * steps > MAX_RANDOM_STEPS:
        raise UsageError(f"--batch {batch} x --steps {steps} is {batch * steps} sequence steps, more than "
                         f"{MAX_RANDOM_STEPS} (a check needs a few; --inputs FILE.npz for real data)")
    user_inputs = _load_inputs(inputs) if inputs else None
    if user_inputs is not None and not user_inputs:
        raise UsageError("--inputs holds no arrays", path=inputs)
    if converted is not None and not Path(converted).is_dir():
        from .inputs import regular_file

        regular_file(converted, "a converted model (.keras or weights .h5)")
    module = readers.module(readers.detect(input))
    doc = module.read(input, opts)
    keras = _keras()
    report.environment = {"keras": keras.__version__, "backend": keras.backend.backend(), **engine.info}
    runs = _device_runs(device, report)
    for label, math in runs:
        scope = keras3.cpu() if math is None else keras3.on_gpu(math)
        first = len(report.checks)
        with warnings.catch_warnings(), scope, keras3.rnn_kernel_probe() as kernels:
            warnings.simplefilter("ignore")
            done = _run_checks(module, doc, converted, opts, engine, report,
                               np.random.default_rng(seed), tolerance, user_inputs)
        for c in report.checks[first:]:
            c.device, c.counts = label, math != "default"
        for d in report.devices:
            if d.get("device") == label:
                d["kernels"] = _kernel_summary(kernels)
        if label == "cpu" and runs[1:]:
            report.notes.append(f"CPU run: recurrent kernels {_kernel_summary(kernels) or 'none recorded'}")
        if done:
            break
    report.environment.update(engine.info)
    return report


_NO_BUFFER = "%s: no stored opaque buffer; cuDNN was fed the canonical weights packed in this cuDNN's layout"


def _kernel_summary(seen: list) -> dict:
    """{'gru': {'cudnn': 2}, ...} from :func:`gruconv.formats.keras3.rnn_kernel_probe`."""
    out: dict = {}
    for op, how in seen:
        out.setdefault(op, {}).setdefault(how, 0)
        out[op][how] += 1
    return out


def _run_checks(module, doc, converted, opts, engine, report, rng, tolerance, user_inputs) -> bool:
    """One run of every check on the current device; True when there was nothing to check.

    The reader says what to check (``nothing_to_verify``, ``verify_subjects``: bare stacks, or a
    whole model with its Keras graph) and the writers how to load what they wrote; no format is
    named here."""
    from .formats import keras3

    note = module.nothing_to_verify(doc)
    if note is not None:
        report.notes.append(note)
        report.nothing_to_convert = True
        return True
    for subject in module.verify_subjects(doc, converted, opts):
        if subject.graph is not None:
            if user_inputs:
                _check_user_inputs(keras3.keras(), subject.model, user_inputs, report.input)
            _verify_graph(subject.graph, subject.model, engine, report, rng, tolerance, user_inputs)
            continue
        if subject.opaque is None and engine.kind == "cudnn" and report.notes.count(_NO_BUFFER % subject.name) == 0:
            report.notes.append(_NO_BUFFER % subject.name)
        _verify_stack(subject.stack, subject.opaque, subject.model, engine, report, rng, tolerance, user_inputs)
    return False


def _load_inputs(path) -> list:
    from .inputs import load_npz

    return list(load_npz(Path(path), what="verify inputs (.npz)").values())
