"""The ``keras-weights`` writer: Keras 3's own weights file (``model.save_weights``; Keras 3 requires
the name to end in ``.weights.h5``), for ``model.load_weights`` into the converted architecture.
Written through the Keras boundary (:func:`gruconv.formats.keras3.save_weights`)."""

from __future__ import annotations

FORMAT = "keras-weights"
SUFFIX = ".weights.h5"
CLAIMS = (".weights.h5",)
#: Writes a whole model (config and weights): a Keras graph's layers are rebuilt and saved with it.
SAVES_MODEL = False
#: Needs the architecture (a weights-only Keras file needs ``--config``) to write anything.
NEEDS_ARCHITECTURE = True
MANY = False


def options(graph: bool) -> frozenset:
    """Weights carry no model interface: no option of their own."""
    return frozenset()


def write_graph(document, target, options, warnings: list, *, final) -> dict:
    """A Keras graph's converted model's weights (``model.save_weights``)."""
    from ..formats import keras3

    model, nonfinite = document.graph.build_model()
    keras3.save_weights(model, target)
    return nonfinite


def write_stack(document, entry, target, options, name: str) -> None:
    """One stack's weights, from the model the ``keras`` writer would build (its layer names)."""
    from ..formats import keras3

    model = keras3.build_stack_model(entry.stack, initial_state=options.initial_state,
                                     return_state=options.return_state, mask_input=options.mask_input,
                                     name=name, layer_weights=keras3.released_weights(entry.stack, document.drop))
    document.drop()
    keras3.save_weights(model, target)


def load(path, rebuild):
    """What this writer wrote, loaded into ``rebuild()`` (the converted architecture)."""
    from ..formats import keras3

    model = rebuild()
    keras3.load_weights(model, path)
    return model
