"""Keras 2 semantics, written down once: what a legacy file means to the Keras that wrote it, where a
literal Keras 3 reading of its JSON would mean something else (``docs/legacy-dialects.md`` is the table
with every source).  Used by the one translation (:mod:`gruconv.keras3.config`, :mod:`gruconv.keras3.legacy`)
and by the weight stream every Keras route writes from (:func:`rescaled`).

Three kinds of rows:

* **dropped** -- a key a version wrote that Keras 2 ignored and Keras 3 refuses:
  :data:`DROPPED_OBJECT_KEYS` (``dtype`` in initializer / regularizer / constraint configs, written by
  tf.keras of TF 1.13-1.14, ``keras_version`` "2.2.4-tf": ``tensorflow/python/ops/init_ops.py``
  ``get_config`` returned ``{"dtype": self.dtype.name, ...}``; Keras 2's layers hand the initializer only
  the variable's shape and dtype, so the stored one never mattered);
* **defaults of keys an old version did not write** -- :data:`MISSING_DEFAULTS`: ``GRU.reset_after`` is
  absent from configs Keras <= 2.1.x wrote (the argument arrived later, default ``False``: Keras 2.x
  ``keras/layers/recurrent.py`` ``GRU.__init__(..., reset_after=False)``), while Keras 3's default is ``True``,
  a different function with a different bias shape;
* **meaningful** -- same name, other function: :data:`RESCALED` (``hard_sigmoid``).

``hard_sigmoid``.  Keras 2 (2.0.9-2.3.1, ``keras/backend/tensorflow_backend.py``) and every tf.keras /
tf_keras (``backend.hard_sigmoid``: ``x * 0.2 + 0.5`` clipped to ``[0, 1]``) compute
``clip(0.2 x + 0.5, 0, 1)``; Keras 3 (``keras/src/activations/activations.py`` ``hard_sigmoid`` ->
``ops.hard_sigmoid``, ``relu6(x + 3) / 6``) computes ``clip(x / 6 + 0.5, 0, 1)``.  So
``k2(x) == k3(1.2 x)`` exactly (both clip at ``x = +-2.5``), and a layer whose function is applied to an
affine pre-activation computes the original's once the weights and biases feeding that function are scaled
by :data:`HARD_SIGMOID_SCALE` (:data:`RESCALED`: which columns of which weight).  It was the default
``recurrent_activation`` of GRU and LSTM through Keras 2.2.4.  Where the function's input is no affine map
of weights the file holds (an ``Activation`` layer; an LSTM's ``activation``, applied to its cell state too)
the conversion is refused (:func:`check_functions`): no Keras 3 built-in computes Keras 2's curve.

No framework import: JSON and NumPy.
"""

from __future__ import annotations

from typing import Iterable, Optional

from ..errors import InputError, UnsupportedError

#: Keys of an initializer / regularizer / constraint config that Keras 2 ignored and Keras 3 refuses.
DROPPED_OBJECT_KEYS = ("dtype",)

#: (layer class, key) -> the value Keras 2 meant when the key is absent (a config older than the argument).
MISSING_DEFAULTS = {("GRU", "reset_after"): False}

#: Keras 2's ``hard_sigmoid(x)`` is Keras 3's ``hard_sigmoid(HARD_SIGMOID_SCALE * x)``.
HARD_SIGMOID_SCALE = 1.2
#: The legacy function names whose Keras 3 function differs, and the scale that makes them equal.
CHANGED_FUNCTIONS = {"hard_sigmoid": HARD_SIGMOID_SCALE}

#: Keras gate blocks (the column blocks of a recurrent layer's kernel, recurrent kernel and bias, in Keras
#: order) per class; ``None``: the whole weight (a plain affine layer).
_GATE_BLOCKS = {"GRU": ("z", "r", "h"), "LSTM": ("i", "f", "c", "o"), "SimpleRNN": ("h",)}
#: (class, argument) -> the gate blocks whose pre-activation the argument's function receives (None: every
#: column), for the layers whose weights feed that function linearly: Keras 3 ``gru.py`` (z, r take
#: ``recurrent_activation``, the candidate ``activation``: ``activation(x_h + r * (h W_h + b))`` scales
#: with both), ``lstm.py`` (i, f, o take ``recurrent_activation``), ``simple_rnn.py``, ``dense.py``,
#: ``conv1d.py``.  Not here, so refused: ``LSTM.activation`` (also applied to the cell state, which no
#: weight scales), ``Activation`` and every other class.
RESCALED = {
    ("Dense", "activation"): None,
    ("Conv1D", "activation"): None,
    ("SimpleRNN", "activation"): None,
    ("GRU", "activation"): ("h",),
    ("GRU", "recurrent_activation"): ("z", "r"),
    ("LSTM", "recurrent_activation"): ("i", "f", "o"),
}
#: The weights of those layers that feed the function (roles as :func:`gruconv.keras3.config.saveable_plan`
#: names them).
RESCALED_ROLES = ("kernel", "recurrent_kernel", "bias")


def function_name(value) -> Optional[str]:
    """The function a config's activation value names: a string, or a serialized function
    (``{"class_name": "function", "config": "hard_sigmoid", ...}``, tf.keras 2.13+ / Keras 3 style), else None."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in ("config", "registered_name", "class_name"):
            if isinstance(value.get(key), str) and value[key] not in ("function", ""):
                return value[key]
    return None


def _function_keys(cfg: dict) -> list:
    return [k for k in cfg if k == "activation" or k.endswith("_activation")]


def changed_functions(cls: str, cfg: dict) -> list:
    """``[(key, legacy function name)]`` of a layer config's functions whose Keras 3 meaning differs."""
    return [(k, function_name(cfg[k])) for k in _function_keys(cfg) if function_name(cfg[k]) in CHANGED_FUNCTIONS]


def mentions_changed_function(obj) -> bool:
    """Whether any layer config below ``obj`` (a legacy model config) names a function of
    :data:`CHANGED_FUNCTIONS`: a cheap test before a translation is run for its rescales alone."""
    if isinstance(obj, dict):
        if any(function_name(obj[k]) in CHANGED_FUNCTIONS for k in _function_keys(obj)):
            return True
        return any(mentions_changed_function(v) for v in obj.values() if isinstance(v, (dict, list)))
    if isinstance(obj, list):
        return any(mentions_changed_function(v) for v in obj)
    return False


def check_functions(cls: str, cfg: dict, where: str) -> None:
    """Refuse (one line) a Keras 2 function Keras 3 computes differently where no weight can make it equal:
    :class:`InputError`, final (not the streaming writer's limit, so no route would write it)."""
    for key, name in changed_functions(cls, cfg):
        if (cls, key) not in RESCALED:
            raise InputError(
                f"{where}: {key}={name!r} is Keras 2's {name} (clip(0.2*x + 0.5, 0, 1)); Keras 3's {name} is "
                f"another function (relu6(x + 3) / 6) and no Keras 3 built-in computes Keras 2's, and this "
                f"{cls}'s input to it is not an affine map of its own weights that gruconv could rescale")


def slot_scale(cls: str, cfg: dict, role: str) -> Optional[tuple]:
    """Per Keras gate block of one weight (``role``) of a layer: the factor its columns are multiplied by
    so that Keras 3 computes what Keras 2 did (:data:`RESCALED`), or None when nothing changes."""
    if role not in RESCALED_ROLES:
        return None
    blocks = _GATE_BLOCKS.get(cls, ("all",))
    factors = [1.0] * len(blocks)
    for key, name in changed_functions(cls, cfg):
        if (cls, key) not in RESCALED:
            continue  # check_functions refuses it first
        gates = RESCALED[(cls, key)]
        for i, gate in enumerate(blocks):
            if gates is None or gate in gates:
                factors[i] *= CHANGED_FUNCTIONS[name]
    return tuple(factors) if any(f != 1.0 for f in factors) else None


def scale_block(block, factors: tuple, shape: tuple, rows=slice(None)):
    """One block of a weight of ``shape`` (its leading-axis ``rows``; the whole weight by default) with the
    column blocks of the weight's last axis multiplied by ``factors``, in the block's own dtype (one
    rounding per element; the product is taken in float64).  A 1-D weight's rows are its columns."""
    import numpy as np

    block = np.asarray(block)
    n = shape[-1] if len(shape) else 1
    if n % len(factors):
        raise UnsupportedError(f"a weight of shape {tuple(shape)} does not split into {len(factors)} gate blocks")
    f = np.repeat(np.asarray(factors, dtype=np.float64), n // len(factors))
    if len(shape) == 1:
        f = f[rows]
    return (block.astype(np.float64) * f).astype(block.dtype)


def scale_value(value, factors: tuple):
    """``value`` (an array, or :class:`gruconv.keras3.archive.Pieces` of leading-axis rows) rescaled by
    :func:`scale_block`."""
    import numpy as np

    pieces = getattr(value, "pieces", None)
    if pieces is None:
        return scale_block(value, factors, np.shape(value))
    # the same kind of value (archive.Pieces: leading-axis row blocks), each block scaled as it streams
    return type(value)(value.shape, value.dtype,
                       lambda: ((where, scale_block(block, factors, value.shape, where)) for where, block in pieces()))


def scales(plan_tops: list) -> dict:
    """``{(top-level layer name, position in its legacy order): factors}`` of the weights to rescale, from
    :func:`gruconv.keras3.config.saveable_plan`'s tops (the translated config's)."""
    return {(t.name, i): s.scale for t in plan_tops for i, s in enumerate(t.legacy_order)
            if getattr(s, "scale", None)}


def rescale_notes(plan_tops: list) -> list:
    """One line per top-level layer whose weights :func:`rescaled` changes, for the conversion's output."""
    out = []
    for t in plan_tops:
        roles = [s.role for s in t.legacy_order if getattr(s, "scale", None)]
        if roles:
            out.append(f"layer {t.name!r}: Keras 2's hard_sigmoid (clip(0.2*x + 0.5, 0, 1)) is Keras 3's "
                       f"hard_sigmoid(1.2*x): the {', '.join(dict.fromkeys(roles))} columns that feed it are "
                       f"scaled by {HARD_SIGMOID_SCALE}, so the converted layer computes what the original did")
    return out


def stored_counts_agree(plan_tops: list, counts: dict) -> None:
    """Refuse a rescale whose positions cannot be trusted: a top-level layer holding a weight to rescale
    whose stored (or built) weight count is not the translated config's (a layer the plan does not know
    the variables of sits beside it)."""
    for t in plan_tops:
        if any(getattr(s, "scale", None) for s in t.slots) and counts.get(t.name, len(t.slots)) != len(t.slots):
            raise UnsupportedError(f"layer {t.name!r}: its weights feed Keras 2's hard_sigmoid, and its "
                                   f"{counts[t.name]} weights cannot be matched to the {len(t.slots)} the "
                                   "translated config names, so they cannot be rescaled")


def rescaled(arrays: Iterable, tops: list, plan_tops: list) -> Iterable:
    """The weight stream ``arrays`` (``(group, index, value)`` for the slots of ``tops``) with the weights
    :func:`scales` names rescaled (``plan_tops``: the translated config's
    :func:`gruconv.keras3.config.saveable_plan`, which ``tops`` may be, or the built model's layers with the
    same names and weight order): every Keras route writes from it (the streamed archive, the Keras-built
    model)."""
    by_position = scales(plan_tops)
    if not by_position:
        yield from arrays
        return
    stored_counts_agree(plan_tops, {t.name: len(t.slots) for t in tops})
    wanted = {}
    for t in tops:
        for i, s in enumerate(t.legacy_order):
            if (t.name, i) in by_position:
                wanted[s.group, s.index] = by_position[t.name, i]
    for group, index, value in arrays:
        factors = wanted.get((group, index))
        yield group, index, (value if factors is None else scale_value(value, factors))
