"""The ``keras-weights`` writer: Keras 3's own weights file (what ``model.save_weights`` writes; Keras 3
requires the name to end in ``.weights.h5``), for ``model.load_weights`` into the converted architecture.

Streamed like the ``keras`` writer (:mod:`gruconv.writers.keras_model`): the object paths come from the
generated Keras 3 config (:func:`gruconv.keras3.config.saveable_plan`), the weights are written one
layer at a time with h5py (:func:`gruconv.keras3.archive.write_weights`), no Keras imported;
``tests/writers/test_streaming_writer.py`` compares the file bit for bit with Keras's ``save_weights``.  Outside
the vocabulary, the Keras-built route (``model.save_weights``) when Keras is installed, said in one line.
"""

from __future__ import annotations

FORMAT = "keras-weights"
SUFFIX = ".weights.h5"
CLAIMS = (".weights.h5",)
#: A bare stack's weights, or a Keras graph's converted model's weights.
KINDS = ("stack", "graph")
WRITES = "weights"
#: Needs the architecture (a weights-only Keras file needs ``--config``) to write anything.
NEEDS_ARCHITECTURE = True
EVERY_MODEL = False
MANY = False


def options(kind: str) -> frozenset:
    """By target kind: ``--check-load`` loads the weights into the converted architecture (a graph's with the
    classes of ``--custom-objects``); a bare stack's weights are named by the model interface the ``keras``
    writer would give it (``--initial-state`` & co. change the object paths)."""
    return {"graph": frozenset({"check_load", "custom_objects"}),
            "stack": frozenset({"check_load", "initial_state", "return_state", "mask_input"})}.get(kind, frozenset())


def _write_graph(document, target, options, warnings: list) -> dict:
    """A Keras graph's converted model's weights, streamed; Keras's ``save_weights`` outside the
    streaming writer's vocabulary when Keras is installed."""
    from ..keras3 import archive as keras_archive
    from .keras_route import Fallback, custom_notes, load_custom, streamed, with_keras

    graph = document.graph
    nonfinite, info = {}, {}
    manifest = streamed(
        graph, warnings, lambda: keras_archive.write_keras_h5_doc(graph, target, weights_only=True,
                                                                  nonfinite=nonfinite, info=info))
    if isinstance(manifest, Fallback):  # the Keras-built route (its warning line is written)
        return with_keras(manifest, lambda: _graph_with_keras(document, target, options, warnings))
    custom = custom_notes(info["config"], warnings, weights_only=True)
    objects = load_custom(options, custom, warnings) if getattr(options, "check_load", False) else None
    if objects is not None:
        keras_archive.check_load(target, manifest, config=info["config"], custom_objects=objects)
    return nonfinite


def _graph_with_keras(document, target, options, warnings: list) -> dict:
    """The Keras-built route: the converted model built by Keras from the one translated config
    (:func:`gruconv.writers.keras_route.built`), ``model.save_weights`` (checked by loading it back into
    the same model)."""
    from ..keras3 import runtime as keras3
    from .keras_route import built

    model, nonfinite = built(document.graph, notes=warnings)
    keras3.save_weights(model, target)
    return nonfinite


def _write_stack(document, entry, target, options, name: str) -> None:
    """One stack's weights, under the object paths of the model the ``keras`` writer writes, streamed
    one pseudo-layer at a time (``document.drop()`` after each)."""
    from ..keras3 import archive as keras_archive

    info = {}
    manifest = keras_archive.write_stack(entry.stack, target, name=name, initial_state=options.initial_state,
                                         return_state=options.return_state, mask_input=options.mask_input,
                                         weights_only=True, release=document.drop, info=info)
    document.drop()
    if getattr(options, "check_load", False):
        keras_archive.check_load(target, manifest, config=info["config"])


def _stack_with_keras(document, entry, target, options, name: str) -> None:
    """The Keras-built route for one stack's weights (kept for comparison): the model of the one stack
    description, built by Keras (:func:`gruconv.keras3.build.build_stack_model`)."""
    from ..keras3 import runtime as keras3
    from ..keras3.build import build_stack_model
    from ..keras3.config import stack_model_config

    config = stack_model_config(entry.stack.shape, name, initial_state=options.initial_state,
                                return_state=options.return_state, mask_input=options.mask_input)
    model = build_stack_model(entry.stack, config, release=document.drop)
    document.drop()
    keras3.save_weights(model, target)


def write(document, target, options) -> dict:
    """A bare stack's weights (kind ``stack``) or a Keras graph's (kind ``graph``), streamed."""
    if target.kind == "graph":
        return _write_graph(document, target.tmp, options, target.warnings)
    _write_stack(document, document.stacks[target.stack], target.tmp, options, target.name)
    return {}


def write_with_keras(document, target, options) -> dict:
    """``write`` through Keras (``model.save_weights``)."""
    if target.kind == "graph":
        return _graph_with_keras(document, target.tmp, options, target.warnings)
    _stack_with_keras(document, document.stacks[target.stack], target.tmp, options, target.name)
    return {}


def load(path, rebuild):
    """What this writer wrote, loaded into ``rebuild()`` (the converted architecture)."""
    from ..keras3 import runtime as keras3

    model = rebuild()
    keras3.load_weights(model, path)
    return model
