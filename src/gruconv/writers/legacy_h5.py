"""The ``h5-weights`` writer: Keras weights in the legacy HDF5 layout (what tf_keras's
``model.save_weights("x.h5")`` writes), with h5py alone (no Keras, no TensorFlow).

Layout (tf_keras ``saving/legacy/hdf5_format.py``): root attrs ``layer_names``, ``backend``,
``keras_version``; one group per layer with attr ``weight_names`` and datasets under those names.
tf_keras's and Keras 3's ``load_weights`` read it into the converted architecture (they match
layers by order).  A Keras graph (a Keras HDF5 input's) writes itself in this layout
(:func:`gruconv.writers.legacy_graph.write`: the other layers' weights are copied as they are).
"""

from __future__ import annotations

import numpy as np

from ..model.keras_layout import WEIGHT_ROLES
from ..model.names import identifier


FORMAT = "h5-weights"
SUFFIX = ".h5"
CLAIMS = (".h5", ".hdf5")
#: A bare stack's weights, or a Keras graph's (its other layers' weights copied as they are).
KINDS = ("stack", "graph")
WRITES = "weights"
#: Writes the layers' weights under their own names: no architecture needed, none rebuilt.
NEEDS_ARCHITECTURE = False
EVERY_MODEL = False
MANY = False


def options(kind: str) -> frozenset:
    """Weights carry no model interface: no option of their own."""
    return frozenset()


def _write_graph(document, target, options, warnings: list, *, final) -> dict:
    """A Keras graph's weights in the legacy layout (the other layers' copied as they are, the
    cuDNN layers' transformed); the architecture is not written.  Returns NaN/Inf counts per layer."""
    graph = document.graph
    from .legacy_graph import write as write_legacy

    notes: list = []
    nonfinite = write_legacy(graph, target, include_model=False, notes=notes)
    if graph.model_config is not None:
        who = "Keras 3" if notes else "Keras 3 and tf_keras"  # rescaled weights are Keras 3's (keras3/dialects.py)
        warnings.append(
            f"{final.name} holds the converted weights only, in the legacy layout ({who} "
            "load_weights into the same architecture with GRU in place of CuDNNGRU); the architecture is "
            "not written: name the output .keras for the whole model")
    warnings.extend(notes)
    return nonfinite


def _layer_weight_names(stack, lname: str) -> list:
    """The ``weight_names`` tf_keras's ``save_weights`` gives layer ``lname`` of the stack: a
    ``GRU``/``LSTM`` or its ``Bidirectional`` wrapper (forward weights, then backward)."""
    cell = stack.shape.cell
    if not stack.shape.bidirectional:
        return [f"{lname}/{cell}_cell/{r}:0" for r in WEIGHT_ROLES]
    return [f"{lname}/{side}_{cell}/{cell}_cell/{r}:0" for side in ("forward", "backward") for r in WEIGHT_ROLES]


def _write_stack(document, entry, target, options, name: str) -> None:
    """The stack's Keras weights, one group per layer of the model
    :func:`gruconv.keras3.build.build_stack_model` builds (its names; the input layer with no
    weights), one direction's arrays at a time (``document.drop()`` after each)."""
    from ..model.keras_layout import to_keras as keras_arrays
    from ..files.outputs import hdf5_file

    stack = entry.stack
    s = stack.shape
    base = identifier(name, "gru_stack")  # the stack model's layer names (keras3.config.stack_model_config)
    layer_names = ["inputs"] + [f"{base}_l{layer}" for layer in range(s.num_layers)]
    f = hdf5_file(target)  # not h5py's own file driver: it segfaults closing after a full disk
    with f:
        f.attrs["layer_names"] = np.array([n.encode("utf-8") for n in layer_names])
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.x"
        f.create_group("inputs").attrs["weight_names"] = np.array([], dtype="S1")
        for layer in range(s.num_layers):
            lname = layer_names[layer + 1]
            g = f.create_group(lname)
            wnames = _layer_weight_names(stack, lname)
            g.attrs["weight_names"] = np.array([w.encode("utf-8") for w in wnames])
            for d in range(s.num_directions):
                arrays = keras_arrays(stack.params[s.pseudo_layer(layer, d)], s.cell, s.layer_input_size(layer))
                document.drop()
                for wname, arr in zip(wnames[3 * d:3 * d + 3], arrays):
                    g.create_dataset(wname, data=np.asarray(arr))
                del arrays


def write(document, target, options) -> dict:
    """A bare stack's weights (kind ``stack``) or a Keras graph's (kind ``graph``), legacy layout."""
    if target.kind == "graph":
        return _write_graph(document, target.tmp, options, target.warnings, final=target.path)
    _write_stack(document, document.stacks[target.stack], target.tmp, options, target.name)
    return {}


def load(path, rebuild):
    """What this writer wrote, loaded into ``rebuild()`` (the converted architecture; Keras 3's
    ``load_weights`` reads the legacy layout by layer order)."""
    from ..keras3 import runtime as keras3

    model = rebuild()
    keras3.load_weights(model, path)
    return model
