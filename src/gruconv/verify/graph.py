"""Graph checks: a converted model that keeps a Keras graph (a Keras HDF5 model's), checked layer by
layer (each converted recurrent layer fed exactly the activations that reach it in the converted
model; every output compared) and end to end for a Sequential model.  Driving the Keras graph
itself is the Keras boundary's (:mod:`gruconv.keras3.runtime`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from ..model.canonical import RNNStack, StackShape
from ..model.cudnn_layout import unpack
from ..errors import InputError, UsageError
from ..progress import step
from ..keras3 import runtime as keras3
from ..keras3.runtime import to_numpy
from ..model.keras_layout import cudnn_opaque, to_cudnn
from .engines import Engine
from .verdicts import Check, ReferenceVariants, floor_cache, judge, measure_floors


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


def _reference_rnn(rnn, x_bt: np.ndarray, engine: Engine, initial_state=None) -> tuple:
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

    per_dir = len(s.cell_spec.states)
    init = initial_state or []

    def one(params, reverse_input, d=0):
        # The buffer the ORIGINAL layer gave cuDNN: stored arrays (to_cudnn, the exact inverse of the
        # reader) packed as CuDNNGRU/CuDNNLSTM packs them (cudnn_opaque), read back by the golden-tested layout.
        xi = x[:, ::-1] if reverse_input else x
        if engine.uses_buffer:
            buf, uni = _original_buffer(rnn, params)
        else:  # a perturbed floor run: the same canonical values without the round trip (floor.PerturbedEngine)
            buf, uni = None, RNNStack(rnn.path, _direction_shape(rnn), [params])
        given = init[d * per_dir:(d + 1) * per_dir]
        h0 = given[0][None] if given else None
        c0 = given[1][None] if len(given) > 1 else None
        y, hy, y64, hy64 = engine.run(uni, np.ascontiguousarray(xi.transpose(1, 0, 2)), h0, opaque=buf,
                                      **({"c0": c0} if c0 is not None else {}))
        states = [hy[0], engine.cy[0] if per_dir > 1 else None][:per_dir]  # h (and an LSTM's c)
        states64 = [hy64[0], engine.cy64[0] if per_dir > 1 else None][:per_dir]
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


#: The last two directions' buffers of :func:`_original_buffer`: a check group runs the same direction(s)
#: once for the reference and once per floor seed (and cuDNN algorithm), each run packing the buffer again
#: (47 M weights copied three times per run on the bench's large model, ``docs/benchmarks.md``).  Two:
#: a Bidirectional layer alternates its directions; the entries hold ``params`` so the id stays theirs.
_BUFFERS: list = []
#: Larger buffers are packed again per run: holding two directions of the bench's large model raised its
#: verify's peak RSS by 50-70 MiB (``bench/compare.py``) for ~5% of its time.
_BUFFER_CACHE_BYTES = 8 << 20


def _original_buffer(rnn, params) -> tuple:
    """``(buffer, unidirectional stack read back from it)`` of one direction's original parameters:
    :func:`gruconv.model.keras_layout.to_cudnn` then ``cudnn_opaque`` (the buffer the original layer
    gave cuDNN) and ``unpack`` (the golden-tested layout), computed once per direction and reused by
    the next runs of the same check group (same arrays: the same buffer)."""
    s = rnn.stack.shape
    for held, name, buf, uni in _BUFFERS:
        if held is params and name == rnn.path:
            return buf, uni
    shape = _direction_shape(rnn)
    buf = cudnn_opaque(*to_cudnn(params, s.cell), s.cell)
    uni = RNNStack(rnn.path, shape, unpack(buf, shape))
    if buf.nbytes <= _BUFFER_CACHE_BYTES:
        _BUFFERS.append((params, rnn.path, buf, uni))
        del _BUFFERS[:-2]
    return buf, uni


def _direction_shape(rnn) -> StackShape:
    """One direction of the layer as a one-layer unidirectional stack: what each reference run is."""
    s = rnn.stack.shape
    return StackShape(s.input_size, s.units, 1, False, "linear", s.dtype, s.cell)


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


def check_user_inputs(keras, model, feed: list, where) -> None:
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


def verify_graph(doc, model, engine, report, rng, user_inputs, whole=None):
    """Every converted recurrent layer of ``model`` against the reference, and the model end to end.  ``whole``:
    a converted file run whole by its own runtime(s) (a ``.tflite``: :func:`file_checks`), made from ``model``;
    its outputs are then the converted side of the end-to-end rows."""
    keras = keras3.keras()
    if whole is not None and not user_inputs:  # the sizes the file fixes
        report.batch, report.steps = whole.feed_size(report.batch, report.steps)
    if user_inputs:
        feed = [np.asarray(a).astype(str(t.dtype)) for a, t in zip(user_inputs, model.inputs)]
        report.batch = int(feed[0].shape[0])
        report.steps = int(feed[0].shape[1]) if feed[0].ndim > 1 else 0
    else:
        feed = _random_inputs(keras, model, report.batch, report.steps, rng)
    from ..keras3.runtime import compiled_calls, mask_producers, record_calls

    targets = []
    for rnn in doc.rnns:
        parts = rnn.path.split("/")
        if rnn.wrapper is not None:
            parts = parts[:-1]
        layer = _checked_layer(model, parts)
        inner = getattr(layer, "layer", None)
        if getattr(layer, "stateful", False) or getattr(inner, "stateful", False):
            for l in (layer, inner):  # each checked from a zero state, as the reference runs it
                if hasattr(l, "reset_states"):
                    l.reset_states()
        targets.append(layer)
    # ONE run of the model: every checked layer's inputs, mask and outputs, and the model's outputs
    # (compiled where a model of this config was run before: a batch's models; else eager)
    calls, model_outputs = compiled_calls(model, targets, feed) or record_calls(model, targets, feed)
    if whole is not None:
        file_outputs = file_checks(whole, model, feed, model_outputs, report)
        if not whole.int8:  # a float file stands for the converted model in the end-to-end rows
            model_outputs = file_outputs
    masked = bool(mask_producers(model))
    end_to_end = isinstance(model, keras.Sequential) and doc.rnns and all(
        "/" not in r.path or r.wrapper and r.path.count("/") == 1 for r in doc.rnns)
    names = [(id(layer), layer.name) for layer in targets]
    for rec in calls.values():
        rec.layer = None
    del targets
    if not end_to_end:  # everything of the converted model is recorded: its weights go before the
        del model       # reference and floor runs (the large model's peak memory)
        keras3.release_memory()
    for n, (rnn, (key, name)) in enumerate(zip(doc.rnns, names), 1):
        step("verify", n, len(doc.rnns), rnn.path)
        bad = rnn.stack.nonfinite_count()
        if bad:
            report.notes.append(f"{rnn.path}: {bad} NaN/Inf weight value(s) in the original; NaN outputs "
                                "at the same places on both sides count as equal")
        rec = calls.get(key)
        if rec is None:
            raise InputError(f"converted model: layer {name!r} is not reachable from the model inputs")
        args, kwargs = rec.args, rec.kwargs
        mask = rec.mask if masked else None
        if mask is not None:
            report.notes.append(f"{rnn.path}: the converted layer receives a mask ({int((~mask).sum())} padded "
                                "step(s) in the inputs); the original cuDNN layer ignored masks")
        got = rec.outputs
        x = np.asarray(args[0])
        states = kwargs.get("initial_state")
        states = None if states is None else [np.asarray(a, dtype=np.float64) for a in
                                              (states if isinstance(states, (list, tuple)) else [states])]
        if states is not None:
            report.notes.append(f"{rnn.path}: fed its initial state from the model, as in the original")
        x64 = x.astype(np.float64)
        ref, ref64 = _reference_rnn(rnn, x64, engine, states)
        alts = ReferenceVariants(engine, lambda e: _reference_rnn(rnn, x64, e, states)[0])
        fl = measure_floors(report, lambda e: _reference_rnn(rnn, x64, e, states)[0], ref64,
                            key=(rnn.path, x64, *(states or [])), cache=floor_cache(engine))
        names = _output_names(rnn)
        for i, (name, g, r, r64, f) in enumerate(zip(names, got, ref, ref64, fl)):
            report.checks.append(judge(report, f"{rnn.path}: {name}", g, r, r64, _compute_dtype(rnn), f,
                                       alts.at(i)))
        if len(got) != len(ref):
            report.checks.append(Check(f"{rnn.path}: output count", float("inf"), float("inf"), report.bounds.tolerance,
                                       False, None, (len(got), len(ref)), bound="none",
                                       reason=f"{len(got)} outputs where the reference has {len(ref)}"))
        if not end_to_end:  # its original weights are read again only if asked for (the reader reads them on
            rnn.release()   # demand): one layer's in memory at a time (the large model's peak RSS)
    if end_to_end:
        _end_to_end_sequential(keras, doc, model, engine, report, feed, model_outputs[0])
        del model
    keras2_end_to_end(doc, engine, report, feed, model_outputs)


def file_checks(whole, model, feed, model_outputs, report) -> list:
    """A converted file run whole by each of its runtimes (``whole.runtimes()``: LiteRT; TFLM too for a micro
    ``.tflite``), every output against ``model`` -- the converted Keras 3 model the file was made from, whose
    layers the other rows check against the reference -- on the same inputs.  A stateful file is invoked twice
    from a zero state and the second call is compared too (against the model's second call).  A float file is
    judged by the report's bounds; an int8 one by ``report.int8_tolerance`` (absolute; its measured error shown).
    Returns LiteRT's first-call outputs (the end-to-end rows' converted side)."""
    from ..options import Bounds
    from .verdicts import INT8_TOLERANCE, compare

    refs = [[to_numpy(o) for o in model_outputs]]
    if whole.stateful:
        for layer in _all_layers(keras3.keras(), model):
            if getattr(layer, "stateful", False) and hasattr(layer, "reset_states"):
                layer.reset_states()
        refs = []
        for _ in range(2):
            out = model(feed if len(feed) > 1 else feed[0])
            refs.append([to_numpy(o) for o in (out if isinstance(out, (list, tuple)) else [out])])
    calls = len(refs)
    first = None
    engines = report.environment.setdefault("converted_by", [])
    for name, rt in whole.runtimes():
        where = getattr(whole, "engine", None) or f"{name} (CPU)"  # a runner may say more (version, precision)
        if where not in engines:
            engines.append(where)
        outs = whole.run(rt, feed, calls)
        first = outs[0] if first is None else first
        for c, (got, ref) in enumerate(zip(outs, refs)):
            which = " (second call)" if c else ""
            if len(got) != len(ref):
                report.checks.append(Check(f"{name}: output count{which}", float("inf"), float("inf"),
                                           report.bounds.tolerance, False, None, (len(got), len(ref)), bound="none",
                                           reason=f"{len(got)} outputs where the converted model has {len(ref)}"))
                continue
            for i, (g, r) in enumerate(zip(got, ref)):
                label = f"{name}{' int8' if whole.int8 else ''}: model output" + (f" {i}" if len(ref) > 1 else "") + which
                if whole.int8:  # against the float model, within --int8-tolerance (absolute)
                    tol = INT8_TOLERANCE if report.int8_tolerance is None else report.int8_tolerance
                    row = compare(label, g, r, None, Bounds(tol, 0.0, 0.0), "float32", None)
                else:
                    row = judge(report, label, g, r, None, "float32", None)
                report.checks.append(row)
    if whole.stateful:
        for layer in _all_layers(keras3.keras(), model):
            if getattr(layer, "stateful", False) and hasattr(layer, "reset_states"):
                layer.reset_states()
    return first


#: The note when the Keras 2 reference could not run (:func:`keras2_end_to_end`).
KERAS2_NOT_RUN = ("end to end against the original as Keras 2 computes it (tf_keras): not checked, {why}; the "
                  "layers around the cuDNN ones were checked only as gruconv translated them")


@dataclass(frozen=True)
class Original:
    """One end-to-end reference that is not gruconv's translation: its module (``build(doc)`` -> a model with
    ``__call__(feed)``, ``perturbed(rng, perturb)``, ``restore()``; ``Unavailable``; ``NOT_NEEDED``, the reason
    given silently or with ``quiet_note``), the rows' label, the report's environment key and the note
    template when it could not run."""

    module: str
    label: str
    env_key: str
    where: str
    not_run: str
    quiet_note: bool = False


#: The originals every Keras-graph verify runs beside the converted model (tf_keras; a
#: tf.keras 2.x SavedModel served by TensorFlow).
ORIGINALS = (
    Original("keras2", "end to end (tf_keras)", "keras2_reference", "tf_keras, CPU", KERAS2_NOT_RUN),
    Original("saved_model", "end to end (SavedModel)", "saved_model_reference", "TensorFlow serving_default, CPU",
             "end to end against the original SavedModel served by TensorFlow: not checked, {why}",
             quiet_note=True),
)


def keras2_end_to_end(doc, engine, report, feed, got) -> None:
    """Every model output of the converted model against each :data:`ORIGINALS` reference: the ORIGINAL model
    run by tf_keras (:mod:`gruconv.verify.reference.keras2`: the file's own config and weights, each CuDNN layer
    as its CPU twin) and, for a tf.keras 2.x SavedModel TensorFlow serves on a CPU, its own serving function
    (:mod:`gruconv.verify.reference.saved_model`), on the same inputs: the checks a translation error of the
    layers around the cuDNN ones fails (the others feed both sides from the converted model).  Their floor:
    the same run with every weight and float input moved by one float32 ulp
    (:func:`gruconv.verify.floor.perturb`), over :data:`gruconv.verify.floor.DEFAULT_SEEDS` seeds.  A
    reference's outputs are computed once per verify run (kept on ``engine`` for the other device runs);
    where one cannot run, a note says why."""
    for original in ORIGINALS:
        _original_end_to_end(original, doc, engine, report, feed, got)


def _original_end_to_end(original: Original, doc, engine, report, feed, got) -> None:
    import hashlib
    import importlib

    from .floor import runs

    ref_mod = importlib.import_module(f".reference.{original.module}", __package__)
    cache = engine.__dict__.setdefault(f"{original.module}_cache", {})
    digest = hashlib.sha1()
    for a in feed:
        a = np.ascontiguousarray(a)
        digest.update(str((a.dtype, a.shape)).encode())
        digest.update(a.tobytes())
    key = (id(doc), digest.hexdigest())
    if key not in cache:
        try:
            ref_model = ref_mod.build(doc)
            cache[key] = (ref_model, ref_model(feed), None)
        except ref_mod.Unavailable as e:
            cache[key] = (None, None, str(e))
    ref_model, ref, why = cache[key]
    if why == ref_mod.NOT_NEEDED and original.quiet_note:
        return
    report.environment[original.env_key] = original.where if why is None else f"not run: {why}"
    laid_out = original.module == "keras2" and why is None and getattr(doc, "laid_out", False)
    if laid_out:
        note = ("end to end (tf_keras): the original's weights given to tf_keras's legacy loader as laid out from "
                "the checkpoint (its weights as gruconv mapped them): the row checks the config's translation")
        if note not in report.notes:
            report.notes.append(note)
    if why is not None:
        note = (original.not_run.format(why=why) if why != ref_mod.NOT_NEEDED
                else f"end to end against the original as Keras 2 computes it (tf_keras): {why}")
        if note not in report.notes:
            report.notes.append(note)
        return
    floors_of = cache.setdefault(("floors",) + key, [])

    def floors() -> list:
        if not floors_of:
            import time

            t0 = time.perf_counter()
            worst = [0.0] * len(ref)
            moved_runs = ref_model.floor_runs(feed) if hasattr(ref_model, "floor_runs") else runs(ref_model, feed)
            for outs in moved_runs:
                worst = [max(w, float(np.max(np.abs(np.asarray(o, np.float64) - np.asarray(r, np.float64)))))
                         for w, o, r in zip(worst, outs, ref)]
            floors_of.extend(worst)
            report.floor_seconds += time.perf_counter() - t0
        return floors_of

    if len(got) != len(ref):
        report.checks.append(Check(f"{original.label}: output count", float("inf"), float("inf"),
                                   report.bounds.tolerance, False, None, (len(got), len(ref)), bound="none",
                                   reason=f"{len(got)} outputs where the original has {len(ref)}"))
        return
    for i, (g, r) in enumerate(zip(got, ref)):
        name = f"{original.label}: model output" + (f" {i}" if len(ref) > 1 else "")
        half = any(_compute_dtype(rnn) == "float16" for rnn in doc.rnns)  # a float16 / mixed model's floor
        dtype = "float16" if half or np.float16 in (np.asarray(g).dtype, np.asarray(r).dtype) else "float32"
        report.checks.append(judge(report, name, g, r, None, dtype, floors()[i]))


def _checked_layer(model, parts: list):
    """The layer at ``parts`` (nested model names first), or the one-line error the layer lookup gives."""
    from ..keras3.runtime import find_layer

    layer = find_layer(model, parts)
    if layer is None:
        for i in range(1, len(parts) + 1):
            if find_layer(model, parts[:i]) is None:
                raise InputError(f"converted model has no layer {'/'.join(parts[:i])!r}")
    return layer


def _output_names(rnn) -> list:
    opts = rnn.options
    first = "sequence" if opts["return_sequences"] else "last output"
    if rnn.wrapper == "Bidirectional" and rnn.merge_mode is None:
        names = [f"forward {first}", f"backward {first}"]
    else:
        names = [first]
    if opts["return_state"]:
        cell_states = rnn.shape.cell_spec.states
        states = ["state"] if len(cell_states) == 1 else [f"state {st}" for st in cell_states]
        if rnn.wrapper == "Bidirectional":
            states = [f"{d} {st}" for d in ("forward", "backward") for st in states]
        names += states
    return names


def _end_to_end_sequential(keras, doc, model, engine, report, feed, got):
    """The Sequential model's output vs the reference: each original recurrent layer run by the
    reference, every other layer by the converted model's own (unchanged) layers.  Its floor: the
    same chain with the recurrent layers run by :class:`gruconv.verify.floor.PerturbedEngine`."""
    by_top = {r.path.split("/")[0]: r for r in doc.rnns}

    def chain(eng):
        act = feed[0]
        for layer in model.layers:
            rnn = by_top.get(layer.name)
            if rnn is not None:
                act = _reference_rnn(rnn, np.asarray(act, dtype=np.float64), eng)[0][0]
            else:
                act = to_numpy(layer(act))
        return act

    ref = chain(engine)
    alts = ReferenceVariants(engine, lambda e: [chain(e)])
    fl = measure_floors(report, lambda e: [chain(e)], [ref], key=("end to end", *feed), cache=floor_cache(engine))
    report.checks.append(judge(report, "end to end: model output", got, ref, None, "float32", fl[0],
                               alts.at(0)))


# --------------------------------------------------------------------------- weights-only files

@dataclass
class _AloneView:
    """The reference's view of a cuDNN layer checked alone: the original weights (``stack``) with
    the options the converted layer was built with (sequence and every final state returned,
    forward in time, Bidirectional directions kept apart)."""

    stack: RNNStack
    path: str
    wrapper: Optional[str]
    merge_mode: Optional[str] = None
    options: dict = field(default_factory=lambda: {"return_sequences": True, "return_state": True,
                                                   "go_backwards": False, "stateful": False})

    @property
    def shape(self):
        return self.stack.shape


def _converted_weights(converted, rnn) -> list:
    """The arrays ``convert`` wrote for ``rnn`` in the converted legacy-layout weights file: the
    layer's group (``rnn.path``'s first part) in its ``weight_names`` order (forward direction's
    kernel, recurrent kernel, bias, then the backward's: the order Keras 3's ``GRU``/``LSTM`` and
    ``Bidirectional`` list their weights, ``keras/src/layers/rnn/bidirectional.py``)."""
    from ..files.hdf5 import child_exists, open_hdf5, read_attr, read_dataset, resolve

    from ..files.hdf5 import is_hdf5

    top = rnn.path.split("/")[0]
    if not Path(converted).is_file() or not is_hdf5(converted):
        raise UsageError("a weights-only input is checked layer by layer from the legacy-layout weights .h5 "
                         "convert writes; this converted file is not one (pass --config ARCH.json to check "
                         "another output format against the whole model)", path=converted)
    with open_hdf5(converted, "the converted weights file") as f:
        root = f["model_weights"] if child_exists(f, "model_weights", converted) else f
        if not child_exists(root, top, converted):
            raise UsageError(f"the converted file has no layer group {top!r}: a weights-only input is checked "
                             "layer by layer from the legacy-layout weights file convert writes (for another "
                             "output format pass --config ARCH.json)", path=converted)
        group = root[top]
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in read_attr(group, "weight_names", [])]
        return [read_dataset(resolve(group, n, converted, "dataset"), converted) for n in names]


def alone_layer(keras, rnn, converted=None, arrays=None):
    """The converted layer of a weights-only file's cuDNN layer, built ALONE (no architecture is
    known): Keras 3 ``GRU(reset_after=True)`` / ``LSTM`` with cuDNN's activations
    (:data:`gruconv.model.keras_layout.CUDNN_COMPATIBLE_GRU`), ``return_sequences`` and ``return_state``,
    wrapped in ``Bidirectional(merge_mode=None)`` for a bidirectional one so each direction is
    compared apart.  Weights: what ``convert`` writes (:func:`gruconv.model.keras_layout.to_keras`) or, with
    ``converted``, the arrays read from that file, or ``arrays`` themselves (read by the caller from a
    Keras 3 weights file: :mod:`gruconv.verify.partial`).  Returns ``(layer, reference view)``; measured on
    the trained fixtures before wiring (``docs/verdicts.md``, "weights-only")."""
    from ..model.keras_layout import to_keras

    s = rnn.stack.shape
    bidir = rnn.wrapper == "Bidirectional"
    layer = _alone_shell(keras, s, bidir)
    if converted is None and arrays is None:
        subs = [layer.forward_layer, layer.backward_layer] if bidir else [layer]
        for sub, p in zip(subs, rnn.stack.params):
            sub.set_weights(to_keras(p, s.cell, s.input_size))
    else:
        arrays = _converted_weights(converted, rnn) if arrays is None else arrays
        want = [tuple(w.shape) for w in layer.weights]
        if [tuple(a.shape) for a in arrays] != want:
            raise UsageError(f"the converted file's weights of {rnn.path.split('/')[0]!r} have shapes "
                             f"{[tuple(a.shape) for a in arrays]}, the converted layer takes {want}", path=converted)
        layer.set_weights(arrays)
    return layer, _AloneView(rnn.stack, rnn.path, "Bidirectional" if bidir else None)


#: Built layers of :func:`_alone_shell` by architecture, reused within a process (a batch worker verifies
#: many files of few architectures; building a layer costs ~10x its forward pass on a small model,
#: ``docs/benchmarks.md``).  Every use assigns all of the layer's weights, so nothing of an earlier
#: model survives.  Only layers below :data:`_SHELL_CACHE_PARAMS` are kept, at most :data:`_SHELL_CACHE_SIZE`.
_SHELLS: dict = {}
_SHELL_CACHE_PARAMS = 1_000_000
_SHELL_CACHE_SIZE = 16


def _alone_shell(keras, s: StackShape, bidir: bool):
    """The built Keras 3 layer of a cuDNN layer checked alone, its weights still to be assigned.

    Built with zeros initializers: Keras's default ``Orthogonal`` recurrent initializer needs a QR
    in the layer's dtype, which JAX (``Unsupported dtype float16``) and torch (``"geqrf_cpu" not
    implemented for 'Half'``) lack for float16, so a float16 weights-only file (DeepZip's
    ``*_16bit.hdf5``, ``fixtures/float16_weights``) could not be verified there; every weight is
    assigned afterwards, so the initializers decide nothing (and a QR costs seconds at 1024 units)."""
    from ..model.canonical import CELLS
    from ..model.keras_layout import CUDNN_COMPATIBLE
    from .run import CURRENT_RUN  # the device run in progress: a layer's variables live on its device

    key = (keras.backend.backend(), CURRENT_RUN.get(), s.cell, s.units, s.input_size, s.dtype, bidir)
    layer = _SHELLS.get(key)
    if layer is not None:
        return layer
    kw = dict(CUDNN_COMPATIBLE[s.cell], return_sequences=True, return_state=True, dtype=s.dtype,
              kernel_initializer="zeros", recurrent_initializer="zeros", bias_initializer="zeros")
    cls = getattr(keras.layers, CELLS[s.cell].title)  # GRU / LSTM: the cell table's name is Keras's class

    def make():
        return cls(s.units, **kw)
    layer = keras.layers.Bidirectional(make(), merge_mode=None) if bidir else make()
    layer.build((None, None, s.input_size))
    if sum(int(np.prod(w.shape)) for w in layer.weights) <= _SHELL_CACHE_PARAMS:
        if len(_SHELLS) >= _SHELL_CACHE_SIZE:
            _SHELLS.pop(next(iter(_SHELLS)))
        _SHELLS[key] = layer
    return layer


def verify_alone(doc, converted, engine, report, rng, user_inputs):
    """A weights-only file (no ``--config``): each cuDNN layer checked alone (:func:`alone_layer`), fed
    uniform(-1, 1) inputs of its own width, every output (sequence(s) and each final state, an LSTM's
    ``c`` included) compared against the reference run with the original weights."""
    keras = keras3.keras()
    if user_inputs:
        raise UsageError("--inputs needs --config ARCH.json for a weights-only file (without the architecture "
                         "each layer is checked alone, fed random inputs of its own width)", path=report.input)
    report.notes.append("weights-only file: each cuDNN layer checked alone (no architecture: built as Keras 3 "
                        "GRU/LSTM returning its sequence and final states, fed random inputs of its own width)")
    for n, rnn in enumerate(doc.rnns, 1):
        step("verify", n, len(doc.rnns), rnn.path)
        s = rnn.stack.shape
        bad = rnn.stack.nonfinite_count()
        if bad:
            report.notes.append(f"{rnn.path}: {bad} NaN/Inf weight value(s) in the original; NaN outputs "
                                "at the same places on both sides count as equal")
        layer, view = alone_layer(keras, rnn, converted)
        x = rng.uniform(-1, 1, (report.batch, report.steps, s.input_size)).astype(s.dtype)
        check_alone(rnn, layer, view, x, engine, report)


def check_alone(rnn, layer, view, x, engine, report) -> list:
    """One cuDNN layer built alone (:func:`alone_layer`) run on ``x`` and judged against the reference
    run of the original weights on the same ``x``: every output (sequence(s), each final state).  Returns
    the converted layer's outputs."""
    s = rnn.stack.shape
    got = layer(x)
    got = [to_numpy(g) for g in (got if isinstance(got, (list, tuple)) else [got])]
    x64 = x.astype(np.float64)
    ref, ref64 = _reference_rnn(view, x64, engine)
    alts = ReferenceVariants(engine, lambda e: _reference_rnn(view, x64, e)[0])
    fl = measure_floors(report, lambda e: _reference_rnn(view, x64, e)[0], ref64, key=("alone", rnn.path, x64),
                        cache=floor_cache(engine))
    for i, (name, g, r, r64, f) in enumerate(zip(_output_names(view), got, ref, ref64, fl)):
        report.checks.append(judge(report, f"{rnn.path}: {name}", g, r, r64, s.dtype, f,
                                   alts.at(i)))
    if len(got) != len(ref):
        report.checks.append(Check(f"{rnn.path}: output count", float("inf"), float("inf"), report.bounds.tolerance,
                                   False, None, (len(got), len(ref)), bound="none",
                                   reason=f"{len(got)} outputs where the reference has {len(ref)}"))
    return got
