"""The ``keras`` writer: a Keras 3 ``.keras`` model (a zip of ``config.json``, ``metadata.json``
and ``model.weights.h5``; ``keras/src/saving/saving_lib.py``), saved through the Keras boundary
(:mod:`gruconv.formats.keras3`) and loaded back before it is placed (``check_reload``).

A bare stack becomes the model :func:`gruconv.formats.keras3.build_stack_model` builds, with the
model-interface options (initial states, final states, a mask input); a document carrying a Keras
graph keeps its own interface, so those options do not apply to it.
"""

from __future__ import annotations

FORMAT = "keras"
SUFFIX = ".keras"
CLAIMS = (".keras",)
MANY = True          # a checkpoint with several stacks: one .keras per stack in a directory

#: Options a bare stack's model reads (its inputs and outputs); see :func:`options`.
INTERFACE_OPTIONS = frozenset({"initial_state", "return_state", "mask_input"})


def options(graph: bool) -> frozenset:
    """The options this writer reads: the interface options for bare stacks, none for a Keras graph."""
    return frozenset() if graph else INTERFACE_OPTIONS


def write_stack(document, entry, target, options, name: str) -> None:
    """One stack's Keras 3 model into ``target``: built one layer at a time from the stack's params
    (``document.drop()`` after each array), saved, and loaded back (digests compared)."""
    from ..formats import keras3

    model = keras3.build_stack_model(entry.stack, initial_state=options.initial_state,
                                     return_state=options.return_state, mask_input=options.mask_input,
                                     name=name, layer_weights=keras3.released_weights(entry.stack, document.drop))
    document.drop()
    digests = keras3.save(model, target)
    del model  # the load-back check holds Keras's copy; never two at once
    keras3.check_reload(target, digests)


def load(path, rebuild):
    """What this writer wrote, as a Keras 3 model (for ``verify``): ``keras.saving.load_model``."""
    from ..formats import keras3

    return keras3.load(path)
