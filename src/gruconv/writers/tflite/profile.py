"""The ``.tflite`` profiles, decided before any TensorFlow is imported: what a fixed-shape copy of a Keras 3
config is (:func:`fixed_config`), which requests are refused and why (:func:`check_graph`, :func:`settings`),
the calibration file's layout (:func:`calibration`) and the metadata a written file carries
(:data:`METADATA_NAME`).  Pure JSON and NumPy; the TensorFlow / LiteRT / TFLM calls are all in
:mod:`gruconv.writers.tflite.litert`.

Why fixed shapes (measured, ``shared/DESIGN.md`` "Edge targets", TF 2.21): with a dynamic batch every
builtin-ops route fails (``'tf.TensorListReserve' op requires element_shape to be static``); with the batch
fixed and the time axis left dynamic ``TFLiteConverter.from_keras_model`` converts a GRU to a ``WHILE`` loop.
TFLM runs a ``WHILE`` model returning sequences silently wrong, cannot load a masked model (``SELECT``) nor
prepare a dynamic size (``FILL``), and int8 conversion of a ``WHILE`` model segfaults the converter: the
micro profile and every int8 file are therefore unrolled over a fixed number of steps.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ...errors import InputError, UnsupportedError, UsageError

#: The name of the metadata entry each written file carries (a JSON object: profile, int8, batch,
#: timesteps, stateful, the model's input names); verify reads it to know what the file was meant for.
METADATA_NAME = "gruconv"

#: Keras 3 recurrent layer classes whose config takes ``unroll``.
RNN_CLASSES = frozenset({"GRU", "LSTM", "SimpleRNN", "RNN", "ConvLSTM1D"})

#: The extra that installs what this writer needs.
EXTRA = "pip install 'gruconv[tflite]'"


@dataclass(frozen=True)
class Settings:
    """One conversion's profile: ``micro`` (TFLM: unrolled, every size fixed), ``batch`` (None: the model's
    own fixed batch, else 1), ``timesteps`` (None: left dynamic), ``int8`` (the calibration ``.npz``)."""

    micro: bool = False
    batch: Optional[int] = None
    timesteps: Optional[int] = None
    int8: Optional[Path] = None

    @property
    def unroll(self) -> bool:
        """Unrolled over ``timesteps``: micro, and every int8 file (never ``WHILE`` + int8)."""
        return self.micro or self.int8 is not None

    @property
    def profile(self) -> str:
        return "micro" if self.micro else "mobile"


def settings(options) -> Settings:
    """The profile the options ask for, or the usage line (exit 2): ``--micro`` and ``--int8`` need
    ``--timesteps`` (an unrolled file has a fixed number of steps)."""
    micro = bool(getattr(options, "micro", False))
    steps = getattr(options, "timesteps", None)
    int8 = getattr(options, "int8", None)
    batch = getattr(options, "batch_size", None)
    if micro and steps is None:
        raise UsageError("--micro needs --timesteps T: a TFLM file has every size fixed (the recurrent layers are "
                         "unrolled over T steps)")
    if int8 is not None and steps is None:
        raise UsageError("--int8 needs --timesteps T: full-integer files are unrolled over T steps (int8 conversion "
                         "of a WHILE loop crashes the TensorFlow Lite converter)")
    for flag, v in (("--timesteps", steps), ("--batch-size", batch)):
        if v is not None and (not isinstance(v, int) or v < 1):
            raise UsageError(f"{flag} must be a positive integer, got {v!r}")
    return Settings(micro=micro, batch=batch, timesteps=steps, int8=None if int8 is None else Path(int8))


def _walk(node, visit) -> None:
    if isinstance(node, dict):
        visit(node)
        for v in node.values():
            _walk(v, visit)
    elif isinstance(node, list):
        for v in node:
            _walk(v, visit)


def declared_batch(config: dict) -> Optional[int]:
    """The batch size a model config fixes on its inputs (a stateful model's), or None."""
    found = []

    def visit(node):
        if node.get("class_name") == "InputLayer":
            conf = node.get("config")
            shape = conf.get("batch_shape") if isinstance(conf, dict) else None
            if isinstance(shape, (list, tuple)) and shape and isinstance(shape[0], int) and not isinstance(shape[0], bool):
                found.append(int(shape[0]))
    _walk(config, visit)
    return found[0] if found else None


def is_stateful(config: dict) -> bool:
    found = []
    _walk(config, lambda n: found.append(True)
          if isinstance(n.get("config"), dict) and n["config"].get("stateful") is True else None)
    return bool(found)


def fixed_config(config: dict, batch: int, timesteps: Optional[int], unroll: bool) -> dict:
    """A copy of a Keras 3 model config with every input's batch fixed to ``batch`` (and its time axis to
    ``timesteps`` when given) and, with ``unroll``, every recurrent layer (wrapped ones too) unrolled."""
    out = copy.deepcopy(config)

    def visit(node):
        cls, cfg = node.get("class_name"), node.get("config")
        if not isinstance(cfg, dict):
            return
        if cls == "InputLayer" and isinstance(cfg.get("batch_shape"), (list, tuple)):
            shape = list(cfg["batch_shape"])
            shape[0] = batch
            if timesteps is not None and len(shape) >= 2:
                if shape[1] is not None and shape[1] != timesteps:
                    raise UsageError(f"input {cfg.get('name')!r} of the model fixes {shape[1]} time steps: pass "
                                     f"--timesteps {shape[1]}")
                shape[1] = timesteps
            cfg["batch_shape"] = shape
        if cls in RNN_CLASSES and unroll:
            cfg["unroll"] = True
    _walk(out, visit)
    return out


def input_shapes(config: dict) -> list:
    """The ``batch_shape`` of every input layer of a model config, in config order."""
    shapes = []
    _walk(config, lambda n: shapes.append(list(n["config"]["batch_shape"]))
          if n.get("class_name") == "InputLayer" and isinstance(n.get("config"), dict)
          and isinstance(n["config"].get("batch_shape"), (list, tuple))
          else None)
    return shapes


def check_micro(config: dict, masked: list, timesteps: int) -> None:
    """What TFLM cannot run, refused in one line (exit 3) saying why and what to change: a mask (its ``SELECT``
    has no TFLM kernel), a size other than batch and time left open (``FILL`` fails to prepare)."""
    if masked:
        raise UnsupportedError(f"the micro profile cannot keep the mask of {', '.join(masked)}: TFLM has no kernel "
                               "for the SELECT op a mask becomes; remove the Masking layer / mask_zero (pad inputs "
                               "to exactly --timesteps steps instead), or write the mobile profile (no --micro)")
    for shape in input_shapes(config):
        rest = shape[2:] if len(shape) > 2 else []
        if any(d is None for d in rest):
            raise UnsupportedError(f"the micro profile needs every input size fixed; an input is {shape} with "
                                   "a feature size left open (None): give the model a fixed input width")


def calibration(path: Path, n_inputs: int, batch: int, timesteps: int) -> list:
    """The representative inputs of ``--int8 CALIB.npz``: one array per model input, in the model's input order
    (``np.savez(CALIB, x)`` stores ``arr_0``; named arrays are taken in the order they were saved), each shaped
    ``(samples, timesteps, features...)`` with the same number of samples; returns
    ``[[array per input] per batch of ``batch`` samples]`` (a last partial batch is dropped)."""
    from ...files.inputs import load_npz

    arrays = list(load_npz(Path(path), what="--int8 calibration inputs (.npz)").values())
    if len(arrays) != n_inputs:
        raise InputError(f"holds {len(arrays)} array(s); the model has {n_inputs} input(s): one array per model "
                         "input, in input order, shaped (samples, timesteps, features)", path=path)
    n = {int(a.shape[0]) if a.ndim else 0 for a in arrays}
    if len(n) != 1 or 0 in n:
        raise InputError(f"arrays hold {sorted(n)} samples; every input needs the same number (>= 1)", path=path)
    for a in arrays:
        if a.ndim >= 2 and a.shape[1] != timesteps:
            raise InputError(f"an array is {a.shape}: its time axis (axis 1) must be --timesteps {timesteps}",
                             path=path)
    samples = n.pop()
    if samples < batch:
        raise InputError(f"holds {samples} sample(s), fewer than one batch of --batch-size {batch}", path=path)
    return [[a[i:i + batch] for a in arrays] for i in range(0, samples - batch + 1, batch)]


def profiles(document) -> dict:
    """``inspect``: for each profile (``mobile``, ``micro``, ``int8``) whether this input can take it and, if
    not, why and what to change (read from the document alone: no TensorFlow)."""
    from ...keras3.archive import mask_producers

    if document.tf_graph is not None:
        text = ("its cuDNN nodes' stacks alone, one .tflite each (the graph's other ops are not written; "
                "whole graphs are not a .tflite input yet)")
        return {"mobile": f"yes: {text}", "micro": f"yes (--micro --timesteps T): {text}",
                "int8": f"yes (--int8 CALIB.npz --timesteps T): {text}"}
    graph = document.graph
    if graph is None:
        if not document.stacks:
            return {}
        return {"mobile": "yes: each stack's model, builtin ops, batch fixed (--batch-size), time dynamic (WHILE)",
                "micro": "yes: --micro --timesteps T (unrolled; without --mask-input)",
                "int8": "yes: --int8 CALIB.npz --timesteps T (unrolled; its error reported)"}
    config = graph.model_config
    if not isinstance(config, dict):
        why = "no: a weights-only file needs --config ARCH.json (the architecture) to become a model"
        return {"mobile": why, "micro": why, "int8": why}
    if graph.lambdas:
        why = f"no: Lambda layer(s) {', '.join(graph.lambdas)} hold Python code gruconv never runs"
        return {"mobile": why, "micro": why, "int8": why}
    out = {"mobile": "yes: builtin ops, batch fixed (--batch-size), time dynamic (a WHILE loop per RNN)"}
    masked = mask_producers(config)
    try:
        check_micro(config, masked, 1)
        out["micro"] = "yes: --micro --timesteps T (every size fixed, unrolled)"
    except UnsupportedError as e:
        out["micro"] = f"no: {e.message}"
    out["int8"] = "yes: --int8 CALIB.npz --timesteps T (unrolled; the error against the float model reported)"
    return out
