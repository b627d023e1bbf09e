"""The ``tflite`` writer: a TensorFlow Lite / LiteRT flatbuffer of the converted model (``docs/edge.md``).

Two profiles (:mod:`gruconv.writers.tflite.profile`): **mobile** (default) -- builtin ops only (never
Select-TF/Flex: the PyPI LiteRT cannot run it), the batch fixed (``--batch-size N``, default 1, a stateful
model's own batch), the time axis left dynamic (a GRU/LSTM becomes a ``WHILE`` loop), a stateful model's state in
resource variables; **micro** (``--micro --timesteps T``) -- every size fixed, every recurrent layer unrolled, so
TensorFlow Lite Micro runs it (TFLM runs a ``WHILE`` model returning sequences silently wrong).  ``--int8
CALIB.npz`` (with ``--timesteps``): full-integer ops, unrolled, calibrated on the file's arrays; the error against
the float model is reported per output.

What is converted is the model ``convert`` would write as ``.keras``, built in memory from the one translation
(:func:`gruconv.writers.keras_route.built` for a Keras graph; :func:`gruconv.keras3.build.build_stack_model` for a
bare stack), then copied with fixed shapes.  The output contract: the file loads and invokes in LiteRT (and, micro,
in TFLM) before it is placed.  ``verify`` runs it there (:func:`model_runner`, :func:`runners`).

All TensorFlow / LiteRT / TFLM calls are in :mod:`gruconv.writers.tflite.litert`.
"""

from __future__ import annotations

from pathlib import Path

FORMAT = "tflite"
SUFFIX = ".tflite"
CLAIMS = (".tflite",)
#: A bare stack's model (a TF1/TF2 checkpoint's), or a Keras graph's whole model.
KINDS = ("stack", "graph")
#: A whole model, rebuilt through Keras (a ``Lambda`` is refused).
WRITES = "model"
#: Needs the architecture (a weights-only Keras file needs ``--config``).
NEEDS_ARCHITECTURE = True
#: An edge file is the user's goal whatever the model holds: one with no cuDNN layer is converted too.
EVERY_MODEL = True
#: A checkpoint with several stacks: one ``.tflite`` per stack in a directory.
MANY = True

#: The profile options, read for every input (this writer's options, in one place).
PROFILE_OPTIONS = frozenset({"batch_size", "micro", "timesteps", "int8"})
#: The model-interface options a bare stack's model reads (its final states are always outputs).
INTERFACE_OPTIONS = frozenset({"initial_state", "mask_input"})

#: Calibration batches the int8 error is measured on (the first ones of ``CALIB.npz``).
INT8_ERROR_BATCHES = 16


def options(kind: str) -> frozenset:
    """By target kind: the profile options for a Keras graph, plus the interface options for a bare stack."""
    return {"graph": PROFILE_OPTIONS, "stack": PROFILE_OPTIONS | INTERFACE_OPTIONS}.get(kind, frozenset())


def _keras_tf():
    """Keras 3 on its TensorFlow backend (the converter traces TensorFlow functions), or the one line."""
    from ...errors import UnsupportedError
    from ...keras3 import runtime as keras3
    from .litert import available

    missing = available()
    if missing:
        raise UnsupportedError(missing)
    k = keras3.keras()
    if k.backend.backend() != "tensorflow":
        raise UnsupportedError(f"a .tflite is converted by TensorFlow, and Keras runs on {k.backend.backend()} "
                               "here: set KERAS_BACKEND=tensorflow")
    return k


def _write_graph(document, target, options) -> dict:
    """A Keras graph's model (:func:`gruconv.writers.keras_route.built`) as a ``.tflite``."""
    from ...keras3.archive import mask_producers
    from .profile import check_micro, settings
    from ..keras_route import built

    s = settings(options)
    graph = document.graph
    if s.micro:
        check_micro(graph.model_config if isinstance(graph.model_config, dict) else {}, 
                    mask_producers(graph.model_config), s.timesteps)
    _keras_tf()
    model, nonfinite = built(graph, notes=target.warnings)
    _finish(model, target, s, {"kind": "graph"})
    return nonfinite


def _write_stack(document, entry, target, options) -> None:
    """One bare stack's model (the ``.keras`` stack model, final states always returned) as a ``.tflite``."""
    from ...errors import UnsupportedError
    from ...keras3.build import build_stack_model
    from ...keras3.config import stack_model_config
    from .profile import settings

    s = settings(options)
    if s.micro and options.mask_input:
        raise UnsupportedError("the micro profile cannot take --mask-input: TFLM has no kernel for the SELECT op a "
                               "mask becomes; pad every sequence to exactly --timesteps steps instead")
    _keras_tf()
    shape = entry.stack.shape
    config = stack_model_config(shape, target.name, initial_state=options.initial_state, return_state=True,
                                mask_input=options.mask_input)
    model = build_stack_model(entry.stack, config, release=document.drop)
    document.drop()
    import dataclasses

    _finish(model, target, s, {"kind": "stack", "name": entry.stack.name or target.name,
                               "shape": dataclasses.asdict(shape), "initial_state": bool(options.initial_state),
                               "mask_input": bool(options.mask_input)})


def _finish(model, target, s, meta: dict) -> None:
    """Fixed shapes, converted, checked (ops, the output contract), metadata added, written to ``target.tmp``;
    int8: its error against the float model measured on the calibration batches and reported."""
    import numpy as np

    from ...errors import UnsupportedError
    from . import litert
    from .profile import calibration, declared_batch, is_stateful

    config = model.get_config()
    batch = s.batch or declared_batch(config) or 1
    stateful = is_stateful(config)
    fixed = litert.fixed_model(model, batch, s.timesteps, s.unroll, micro=s.micro)
    del model
    batches = calibration(s.int8, len(fixed.inputs), batch, s.timesteps) if s.int8 is not None else None
    data = litert.convert(fixed, int8_batches=batches)
    ops = litert.describe_file(data)["ops"]
    flex = [o for o in ops if o.startswith("CUSTOM")]
    if flex:
        raise UnsupportedError(f"the converted file needs custom/Flex ops ({', '.join(flex)}), which LiteRT and TFLM "
                               "cannot run")
    if s.unroll and "WHILE" in ops:
        raise UnsupportedError("the converted file still holds a WHILE loop after unrolling; the micro profile and "
                               "int8 need every recurrent layer unrolled")
    meta = dict(meta, profile=s.profile, int8=s.int8 is not None, batch=batch, timesteps=s.timesteps,
                stateful=stateful, ops=ops, inputs=[t.name for t in fixed.inputs])
    data = litert.with_metadata(data, meta)
    litert.smoke(data, s.micro)
    if batches is None:  # a float file computes what the model computes (int8: its error is measured below)
        if stateful:
            _reset(fixed)
        litert.same_as_model(data, fixed)
        if stateful:
            _reset(fixed)
    target.warnings.append(f"{s.profile} profile: batch {batch}, "
                           + (f"{s.timesteps} steps, unrolled" if s.unroll else
                              ("time steps left dynamic" if s.timesteps is None else f"{s.timesteps} steps"))
                           + f"; ops {', '.join(ops)}" + ("; state in resource variables" if stateful else ""))
    if batches is not None:
        rt = litert.LiteRT(data, meta["inputs"])
        worst: list = []
        import warnings

        for feed in batches[:INT8_ERROR_BATCHES]:
            with warnings.catch_warnings():  # Keras's "structure of `inputs`" note for a one-input Functional
                warnings.simplefilter("ignore")
                ref = fixed(feed if len(feed) > 1 else feed[0])
            ref = [np.asarray(r) for r in (ref if isinstance(ref, (list, tuple)) else [ref])]
            if stateful:
                rt.reset()
            got = rt.run(feed)
            for i, (g, r) in enumerate(zip(got, ref)):
                if len(worst) <= i:
                    worst.append([0.0, 0.0])
                worst[i][0] = max(worst[i][0], float(np.max(np.abs(g - r))))
                worst[i][1] = max(worst[i][1], float(np.max(np.abs(r))))
        n = min(len(batches), INT8_ERROR_BATCHES)
        for i, (err, mag) in enumerate(worst):
            target.warnings.append(f"int8: output {i} max abs error {err:.3g} (relative {err / mag if mag else err:.3g} "
                                   f"of max |float| {mag:.3g}) against the float model, on {n} calibration "
                                   "batch(es), LiteRT")
    Path(target.tmp).write_bytes(data)


def _reset(model) -> None:
    """Every stateful layer of ``model`` back to its zero state."""
    for layer in model._flatten_layers() if hasattr(model, "_flatten_layers") else model.layers:
        if getattr(layer, "stateful", False) and hasattr(layer, "reset_states"):
            layer.reset_states()


def write(document, target, options) -> dict:
    """A Keras graph's model (kind ``graph``) or a bare stack's (``stack``) as a ``.tflite``."""
    if target.kind == "graph":
        return _write_graph(document, target, options)
    _write_stack(document, document.stacks[target.stack], target, options)
    return {}


def load(path, rebuild):
    """A ``.tflite`` is not a Keras model: ``verify`` runs it (:func:`model_runner`, :func:`runners`)."""
    from ...errors import UsageError

    raise UsageError("a .tflite file is run by LiteRT / TFLM, not loaded as a Keras model", path=path)


def _read(path):
    from ...files.inputs import regular_file
    from . import litert

    regular_file(path, "a .tflite file")
    data = Path(path).read_bytes()
    return data, litert.describe_file(data)


def model_runner(path):
    """The whole converted model of a ``.tflite`` written from a Keras graph, as verify drives it
    (:class:`gruconv.writers.tflite.run.FileRunner`); None for a bare stack's file (:func:`runners`)."""
    from .run import FileRunner

    data, info = _read(path)
    meta = info["meta"] or {}
    if meta.get("kind") == "stack":
        return None
    return FileRunner(data, meta)


def runners(path):
    """``{stack name: StackRunner}`` of a bare stack's ``.tflite`` run by LiteRT (a micro file: also
    ``{"<name> (TFLM)": ...}``, the same stack run by TFLM); None for a Keras graph's file (:func:`model_runner`)."""
    from .run import stack_runners

    data, info = _read(path)
    meta = info["meta"] or {}
    if meta.get("kind") != "stack":
        return None
    return stack_runners(data, meta)


def profiles(document) -> dict:
    """``inspect``: ``{profile: "yes: ..." | "no: why and what to change"}`` (:func:`.profile.profiles`)."""
    from .profile import profiles as _profiles

    return _profiles(document)


def describe(shape) -> dict:
    """``inspect``: what a stack of ``shape`` becomes (mobile: a ``WHILE`` loop per layer and direction;
    micro: unrolled plain ops)."""
    return {"target": "TFLite builtin ops: mobile WHILE loop (batch fixed), micro unrolled (--timesteps)",
            "note": "" if shape.dtype == "float32" else f"{shape.dtype} weights computed in float32"}
