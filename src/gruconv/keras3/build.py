"""Keras models built from a Keras 3 config dict and the streamed writer's weight stream (one
translation, one description, one stream).  The Keras-built route, ``verify`` without a converted file
and the bare-stack models all go through here: :func:`gruconv.keras3.runtime.from_config` of the one
config (:func:`gruconv.keras3.config.translate` / :func:`~gruconv.keras3.config.stack_model_config`),
then :func:`assign` of the array stream :mod:`gruconv.keras3.archive` writes.

Keras itself is imported by :mod:`gruconv.keras3.runtime` only; this module holds Keras objects it is
given.  It sits above both (runtime <- build -> archive): :mod:`~gruconv.keras3.archive` calls the runtime
for ``--check-load``, so the runtime cannot call the archive.
"""

from __future__ import annotations

from typing import Callable, Optional

from ..errors import InputError
from ..model.canonical import RNNStack
from . import archive, runtime
from .archive import assembled
from .config import Slot, TopLayer, saveable_plan


def layer_tops(model) -> list:
    """One :class:`gruconv.keras3.config.TopLayer` per top-level layer of a Keras model, its slots the
    layer's variables in the order Keras's legacy HDF5 loader matches a layer's stored weights
    (``legacy_h5_format._legacy_weights``: ``trainable_weights + non_trainable_weights``), each slot keyed
    ``(layer name, i)``: the plan :func:`gruconv.keras3.archive.weight_arrays` streams a stored model's
    weights against for :func:`assign` (every layer Keras builds, one outside the streamed writer's
    vocabulary included)."""
    tops = []
    for layer in model.layers:
        variables = list(layer.trainable_weights) + list(layer.non_trainable_weights)
        tops.append(TopLayer(layer.name, [Slot(layer.name, i, True, v.path) for i, v in enumerate(variables)]))
    return tops


def assign(model, tops: list, arrays, *, source=None) -> None:
    """Put an array stream (``(group, index, array)`` for the slots of ``tops``: :func:`layer_tops`, or
    :func:`gruconv.keras3.config.saveable_plan`'s for an in-vocabulary model) into ``model``'s variables:
    each top's slots, in legacy order, are its layer's ``trainable_weights + non_trainable_weights``.
    One array in memory at a time (a :class:`gruconv.keras3.archive.Pieces` assembled first).  A count or
    shape that does not fit is one :class:`InputError` naming layer and weight."""
    by_name = {layer.name: layer for layer in model.layers}
    where = {}
    for top in tops:
        order = top.legacy_order
        if not order:
            continue
        layer = by_name.get(top.name)
        variables = [] if layer is None else list(layer.trainable_weights) + list(layer.non_trainable_weights)
        if len(variables) != len(order):
            raise InputError(f"layer {top.name!r}: {len(order)} weight(s) to load, the Keras 3 layer has "
                             f"{len(variables)}", path=source)
        for slot, var in zip(order, variables):
            where[slot.group, slot.index] = var
    for group, index, value in arrays:
        var = where.pop((group, index))
        a = assembled(value)
        del value
        if tuple(a.shape) != tuple(var.shape):
            raise InputError(f"weight {var.path!r}: stored shape {tuple(a.shape)}, the Keras 3 layer needs "
                             f"{tuple(var.shape)}", path=source)
        var.assign(a)
        del a
    if where:
        raise InputError(f"weight {next(iter(where.values())).path!r} ({len(where)} in all) got no stored value",
                         path=source)


def build_stack_model(stack: RNNStack, config: dict, *, layer_weights: Optional[Callable] = None,
                      release: Optional[Callable] = None):
    """A Keras 3 model computing the cuDNN stack: :func:`gruconv.keras3.runtime.from_config` of ``config``, the one description of
    a stack model (:func:`gruconv.keras3.config.stack_model_config`, what the ``keras`` writer streams),
    built with zero initializers and given the stream the streamed writer writes
    (:func:`gruconv.keras3.archive.stack_arrays`, ``release`` called after each pseudo-layer) through
    :func:`assign`.  ``layer_weights(layer, direction, i)``: the ``i``-th Keras array (0 ``kernel``, 1
    ``recurrent_kernel``, 2 ``bias``) of a pseudo-layer instead (weights read back from a converted file)."""
    model = runtime.from_config(config)
    _groups, tops = saveable_plan(config)
    if layer_weights is None:
        arrays = archive.stack_arrays(stack, tops, release)
    else:
        def given():
            rnn_tops = [t for t in tops if t.slots]
            for layer, top in enumerate(rnn_tops):
                for d in range(stack.shape.num_directions):
                    for i, slot in enumerate(top.slots[3 * d:3 * d + 3]):
                        yield slot.group, slot.index, layer_weights(layer, d, i)
        arrays = given()
    assign(model, tops, arrays)
    return model
