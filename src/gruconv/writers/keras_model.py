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
#: Writes a whole model (config and weights): a Keras graph's layers are rebuilt and saved with it.
SAVES_MODEL = True
#: Needs the architecture (a weights-only Keras file needs ``--config``) to write anything.
NEEDS_ARCHITECTURE = True
MANY = True          # a checkpoint with several stacks: one .keras per stack in a directory

#: Options a bare stack's model reads (its inputs and outputs); see :func:`options`.
INTERFACE_OPTIONS = frozenset({"initial_state", "return_state", "mask_input"})


def options(graph: bool) -> frozenset:
    """The options this writer reads: the interface options for bare stacks, none for a Keras graph."""
    return frozenset() if graph else INTERFACE_OPTIONS


def write_graph(document, target, options, warnings: list, *, final) -> dict:
    """A Keras graph as a ``.keras`` model: built (``graph.build_model()``), compiled from the
    original training config where Keras 3 can, saved, loaded back (digests compared); a compiled
    model that does not load back is saved again uncompiled, with a warning.  Returns NaN/Inf
    counts per layer."""
    from ..errors import UnsupportedError
    from ..formats import keras3

    graph = document.graph
    model, nonfinite = graph.build_model()
    half = [r.path for r in graph.rnns if r.shape.dtype in ("float16", "bfloat16")]
    if half:
        warnings.append(keras3.LOW_PRECISION_NOTE.format(layers=", ".join(half)))
    producers = keras3.mask_producers(model)
    if producers:
        warnings.append(
            f"mask-producing layer(s) {', '.join(producers)}: the cuDNN layers never used a mask, the "
            "converted Keras 3 layers apply one that reaches them, so outputs on padded steps can differ "
            "(`gruconv verify` feeds padded inputs and shows whether they do)")
    if graph.training_config:
        warnings.extend(keras3.compile_from_training_config(model, graph.training_config))
    digests = keras3.save(model, target)
    del model  # the load-back check below holds Keras's copy; never two at once
    try:
        keras3.check_reload(target, digests)
    except UnsupportedError as e:
        if not graph.training_config:
            raise
        # the compiled file does not load back: save the model without its training setup
        model, _ = graph.build_model()
        digests = keras3.save(model, target)
        del model
        keras3.check_reload(target, digests)
        warnings.append(f"training config dropped: the compiled model did not load back "
                        f"({e.message}); model written uncompiled")
    return nonfinite


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
