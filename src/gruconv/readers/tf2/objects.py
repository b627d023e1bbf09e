"""TensorFlow 2 object-based checkpoints of Keras models, mapped to the legacy Keras weights layout.

``model.save_weights("ckpt")`` (no ``.h5``) in TF 2.x and ``tf.train.Checkpoint(model=...)`` write a
TensorBundle whose keys follow the object graph, not layer names (checked on
``fixtures/tf2/ckpt_*``, written by tf_keras 2.21 and TF 2.21)::

    _CHECKPOINTABLE_OBJECT_GRAPH
    layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE               (CuDNNGRU, on the layer)
    layer_with_weights-1/forward_layer/bias/.ATTRIBUTES/VARIABLE_VALUE   (Bidirectional)
    layer_with_weights-2/layer/kernel/.ATTRIBUTES/VARIABLE_VALUE         (TimeDistributed)
    model/layer_with_weights-0/layer_with_weights-0/...                  (tf.train.Checkpoint, nested model)
    optimizer/_variables/3/.ATTRIBUTES/VARIABLE_VALUE                    (slots: cuDNN shapes, no roles)

``layer_with_weights-N`` is the N-th layer *that has weights* of its model, in ``model.layers`` order
(tf_keras ``engine/functional.py`` / ``training.py``, ``_trackable_children``); plain ``GRU``/``LSTM``
keep their variables on ``cell/``.  This module maps such a checkpoint to the legacy Keras HDF5
weights layout's terms (layer groups, per-layer weight names) that :mod:`gruconv.readers.keras_h5`
scans and :mod:`gruconv.readers.tf2.store` reads the bundle in: with an architecture (``--config``, the model's ``to_json()``) every layer gets its real name
and weight order; without one, each top-level object becomes a group named after its object path and
cuDNN layers are found by shape (:mod:`gruconv.readers.keras_h5.by_shape`).  Shapes are checked against the config
for every weight; anything that does not map one-to-one is refused with the layer it concerns.
"""

from __future__ import annotations

import re
from typing import Optional

from ..keras_h5.by_shape import classify
from ...model.keras_config import class_name_of, config_of
from ...errors import InputError, UnsupportedError
from ...model.keras_layout import CUDNN_KERAS_CLASS, KERAS3_CLASS, WEIGHT_ROLES

GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
_LWW = re.compile(r"^layer_with_weights-(\d+)$")

#: Weight order of the layer classes a tf.keras model's layers may have (what ``layer.weights``
#: returns: trainable first, then non-trainable), keyed by class name.  ``None`` = no weights.
#: Sources: tf_keras ``layers/core/dense.py``, ``core/embedding.py``, ``convolutional/base_conv.py``,
#: ``normalization/batch_normalization.py``, ``layer_normalization.py``, ``rnn/*``.
WEIGHT_ORDER = {
    **{c: ("kernel", "bias") for c in ("Dense", "Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose",
                                         "Conv2DTranspose", "Conv3DTranspose")},
    "Embedding": ("embeddings",),
    "BatchNormalization": ("gamma", "beta", "moving_mean", "moving_variance"),
    "LayerNormalization": ("gamma", "beta"),
    **{c: WEIGHT_ROLES for c in (*KERAS3_CLASS.values(), "SimpleRNN", *CUDNN_KERAS_CLASS.values())},
    **{c: None for c in (
        "InputLayer", "Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D", "GaussianNoise",
        "GaussianDropout", "AlphaDropout", "ActivityRegularization", "Activation", "ReLU", "Softmax",
        "LeakyReLU", "ELU", "ThresholdedReLU", "Flatten", "Reshape", "Permute", "RepeatVector", "Masking",
        "Concatenate", "Add", "Subtract", "Multiply", "Average", "Maximum", "Minimum", "Dot",
        "MaxPooling1D", "MaxPooling2D", "MaxPooling3D", "AveragePooling1D", "AveragePooling2D",
        "AveragePooling3D", "GlobalMaxPooling1D", "GlobalMaxPooling2D", "GlobalMaxPooling3D",
        "GlobalAveragePooling1D", "GlobalAveragePooling2D", "GlobalAveragePooling3D", "Cropping1D",
        "Cropping2D", "Cropping3D", "ZeroPadding1D", "ZeroPadding2D", "ZeroPadding3D", "UpSampling1D",
        "UpSampling2D", "UpSampling3D", "Lambda")},
}
_MODELS = ("Sequential", "Functional", "Model")


def is_object_checkpoint(keys) -> bool:
    """True for a TF2 object-based checkpoint (TF1 name-based ones have no object graph)."""
    keys = set(keys)
    return GRAPH_KEY in keys and any(k.endswith(_SUFFIX) for k in keys)


def variables(keys) -> dict:
    """``{owner object path (tuple): {attribute: bundle key}}`` for every variable of the object graph.

    Optimizer slot variables (``.../.OPTIMIZER_SLOT/...``) and non-variable entries are left out: they
    are other tensors, copied as they are."""
    out: dict = {}
    for key in keys:
        if not key.endswith(_SUFFIX) or "/.OPTIMIZER_SLOT/" in key:
            continue
        parts = key[: -len(_SUFFIX)].split("/")
        if len(parts) < 2:
            continue
        out.setdefault(tuple(parts[:-1]), {})[parts[-1]] = key
    return out


#: Object-graph edges that alias variables or layers already reachable by their structural path: a
#: Keras layer's ``variables``/``trainable_variables``/``non_trainable_variables`` lists, ``keras_api`` and
#: the ``layer-N`` twin of ``layer_with_weights-N`` (tf_keras ``engine/base_layer.py`` /
#: ``engine/training.py`` ``_trackable_children``; ``saving/legacy/saved_model/serialized_attributes.py``).
_ALIAS_EDGE = re.compile(r"^(variables|trainable_variables|non_trainable_variables|keras_api|layer-\d+)$")
#: Most object-graph nodes walked: a Keras model has a few per weight.
_MAX_GRAPH_NODES = 1_000_000


def structural_variables(bundle) -> dict:
    """:func:`variables` of ``bundle``, with every variable stored under a list alias given the path its
    layers give it.

    Why: a checkpoint key is the variable's first path in a breadth-first walk of the object graph
    (``tensorflow/python/checkpoint/graph_view.py``), and a SavedModel's object graph has more edges than
    a ``save_weights`` checkpoint's: tf_keras ``model.save(dir)`` stores the variables of a
    ``Bidirectional`` layer as ``variables/3/...`` (the model's ``variables`` list reaches them in two steps,
    ``layer_with_weights-1/forward_layer/kernel`` in three; seen with tf_keras 2.21).  The object graph
    (``_CHECKPOINTABLE_OBJECT_GRAPH``, :mod:`gruconv.readers.protos`) has every edge: a walk that
    skips :data:`_ALIAS_EDGE` finds the layer path of each such variable."""
    from ..tfbundle import Malformed
    from .. import protos

    owners = variables(bundle.keys())
    aliased = {key for path, attrs in owners.items() if any(_ALIAS_EDGE.match(p) for p in path)
               for key in attrs.values()}
    if not aliased or GRAPH_KEY not in bundle:
        return owners
    try:
        raw = bundle.read(GRAPH_KEY)
        data = raw.item() if hasattr(raw, "item") else raw
        graph = protos.parse_binary(bytes(data), "TrackableObjectGraph", "object graph")
        nodes = list(graph.each("nodes"))
        if len(nodes) > _MAX_GRAPH_NODES:
            raise InputError(f"the checkpoint's object graph has {len(nodes)} objects, more than {_MAX_GRAPH_NODES}")
        paths: dict = {0: ()}
        queue = [0]
        for node_id in queue:  # breadth first, each node once
            for child in nodes[node_id].each("children"):
                target, name = child.get("node_id", 0), child.get("local_name", "")
                if _ALIAS_EDGE.match(name) or target in paths or not 0 <= target < len(nodes):
                    continue
                paths[target] = paths[node_id] + (name,)
                queue.append(target)
        found = {}
        for node_id, path in paths.items():
            for attr in nodes[node_id].each("attributes"):
                key = attr.get("checkpoint_key", "")
                if key in aliased and path and any(_LWW.match(p) for p in path):
                    found[key] = path
    except Malformed as e:
        raise InputError(f"the checkpoint's object graph is damaged or too large ({e})") from None
    out: dict = {}
    for path, attrs in owners.items():
        for attr, key in attrs.items():
            where = found.get(key)
            owner, name = (where[:-1], where[-1]) if where else (path, attr)
            out.setdefault(owner, {})[name] = key
    return out


def _model_roots(owners: dict) -> list:
    """Object paths under which ``layer_with_weights-N`` children hang (the Keras models), outermost first."""
    roots = set()
    for path in owners:
        for i, seg in enumerate(path):
            if _LWW.match(seg):
                roots.add(path[:i])
                break
    return sorted(roots, key=len)


# --------------------------------------------------------------------------- with an architecture

_class, _conf = class_name_of, config_of  # the legacy config accessors (keras3/legacy.py), one place


def _layers(cfg) -> list:
    c = cfg.get("config") if isinstance(cfg, dict) else None
    if isinstance(c, list):
        return c
    layers = c.get("layers") if isinstance(c, dict) else None
    return layers if isinstance(layers, list) else []


def _lname(cfg) -> str:
    return str(_conf(cfg).get("name") or (cfg.get("name") if isinstance(cfg, dict) else None) or "?")


def _has_weights(cfg) -> bool:
    cls = _class(cfg)
    if cls in _MODELS or (_layers(cfg) and cls not in WEIGHT_ORDER):
        return any(_has_weights(c) for c in _layers(cfg))
    if cls in ("Bidirectional", "TimeDistributed"):
        return _has_weights(_conf(cfg).get("layer"))
    if cls not in WEIGHT_ORDER:
        raise UnsupportedError(f"layer {_lname(cfg)!r} of class {cls}: gruconv does not know its weights, so "
                               "it cannot map the checkpoint to this architecture; convert without --config "
                               "for weights outputs")
    return WEIGHT_ORDER[cls] is not None


def _order(cfg, attrs: dict, where: str) -> list:
    """The attribute names of one leaf layer, in its weight order, all present in ``attrs``."""
    cls = _class(cfg)
    conf = _conf(cfg)
    order = [a for a in WEIGHT_ORDER[cls]
             if not (a == "bias" and conf.get("use_bias") is False)
             and not (a == "gamma" and conf.get("scale") is False)
             and not (a == "beta" and conf.get("center") is False)]
    if sorted(order) != sorted(attrs):
        raise InputError(f"{where} ({cls}): the checkpoint holds {sorted(attrs)}, the architecture expects "
                         f"{order}")
    return order


def _leaf_weights(owners: dict, path: tuple, cfg: dict, where: str) -> list:
    """[(attribute, key)] of one leaf layer: on the layer itself, or on its ``cell`` (plain RNNs)."""
    attrs = owners.get(path) or owners.get(path + ("cell",))
    if not attrs:
        raise InputError(f"{where}: the checkpoint has no variables at {'/'.join(path)}")
    return [(a, attrs[a]) for a in _order(cfg, attrs, where)]


def _model_weights(owners: dict, root: tuple, model_cfg: dict, where: str) -> list:
    """``[(layer name, [(weight name, key)])]`` for every layer of one model config, in layer order.

    Weight names are the ones tf_keras's legacy HDF5 writer gives (``layer/kernel:0``; a Bidirectional's
    ``forward_<inner>/...``; a TimeDistributed's inner weights under the wrapper's name; a nested model's
    layers flattened under its own group), so the Keras HDF5 reader and Keras's legacy loader take them
    as if tf_keras had written the file."""
    out = []
    n = 0
    for layer in _layers(model_cfg):
        if not isinstance(layer, dict):
            raise InputError(f"{where}: a layer entry is not an object")
        name = _lname(layer)
        if not _has_weights(layer):
            out.append((name, []))
            continue
        obj = root + (f"layer_with_weights-{n}",)
        n += 1
        out.append((name, _layer_weights(owners, obj, layer, f"{where}/{name}" if where else name)))
    extra = [p for p in owners if len(p) > len(root) and p[: len(root)] == root
             and _LWW.match(p[len(root)]) and int(_LWW.match(p[len(root)]).group(1)) >= n]
    if extra:
        raise InputError(f"{where or 'model'}: the checkpoint has weights at {'/'.join(min(extra)[: len(root) + 1])}, "
                         f"beyond the "
                         f"{n} layer(s) with weights the architecture has")
    return out


def _layer_weights(owners: dict, obj: tuple, layer: dict, where: str) -> list:
    cls = _class(layer)
    name = _lname(layer)
    if cls in _MODELS or (_layers(layer) and cls not in WEIGHT_ORDER):
        flat = []
        for _inner, ws in _model_weights(owners, obj, layer, where):
            flat += ws
        return flat
    if cls == "Bidirectional":
        conf = _conf(layer)
        fw_cfg = conf.get("layer")
        bw_cfg = conf.get("backward_layer") or fw_cfg
        inner = _lname(fw_cfg)
        ws = [(f"forward_{inner}/{a}:0", k) for a, k in
              _leaf_weights(owners, obj + ("forward_layer",), fw_cfg, f"{where} (forward)")]
        ws += [(f"backward_{inner}/{a}:0", k) for a, k in
               _leaf_weights(owners, obj + ("backward_layer",), bw_cfg, f"{where} (backward)")]
        return ws
    if cls == "TimeDistributed":
        return [(f"{name}/{a}:0", k) for a, k in
                _leaf_weights(owners, obj + ("layer",), _conf(layer).get("layer"), where)]
    return [(f"{name}/{a}:0", k) for a, k in _leaf_weights(owners, obj, layer, where)]


# --------------------------------------------------------------------------- without an architecture

def _generic_groups(owners: dict, shapes: dict) -> list:
    """``[(group name, [(weight name, key)])]`` without an architecture: one group per top-level object
    that holds a recurrent triple, named by its object path; Bidirectional halves keep TF's
    ``forward_layer``/``backward_layer`` owner names.  Only recurrent triples are kept: the other
    variables have no layer to be loaded into and stay "other tensors"."""
    roots = _model_roots(owners)
    groups: dict = {}
    # forward before backward: the order tf_keras's Bidirectional lists its weights in
    for path, attrs in sorted(owners.items(), key=lambda kv: tuple(s.replace("forward_", "0").replace(
            "backward_", "1") for s in kv[0])):
        if not all(r in attrs for r in WEIGHT_ROLES):
            continue
        v = classify({r: shapes[attrs[r]] for r in WEIGHT_ROLES})
        if v.cls is None and v.cell is not None:
            # looks recurrent but fits no layer: refused with the shape table's reason, never dropped
            raise InputError(f"weights at {'/'.join(path)} look recurrent but fit no known layer: {v.reason}")
        if not v.is_cudnn:
            continue
        root = next((r for r in reversed(roots) if path[: len(r)] == r and len(path) > len(r)), ())
        top = path[: len(root) + 1]
        owner = "/".join(path[len(top):]) or path[-1]
        group = "/".join(top).replace("/", ".")
        groups.setdefault(group, []).extend(
            (f"{owner}/{r}:0", attrs[r]) for r in WEIGHT_ROLES)
    return sorted(groups.items())


# --------------------------------------------------------------------------- the legacy layout's groups

def weight_groups(bundle, config: Optional[dict] = None) -> list:
    """``[(group, [(weight name, bundle key)])]``: ``bundle``'s Keras variables in the legacy Keras weights
    layout's terms (one group per top-level layer, weights in its order and under tf_keras's legacy names),
    the layout :class:`gruconv.readers.tf2.store.BundleStore` reads them in.  Raises
    :class:`InputError`/:class:`UnsupportedError` naming the layer when the checkpoint and ``config`` do not
    map one-to-one."""
    owners = structural_variables(bundle)
    shapes = {info.key: tuple(info.shape) for info in bundle}
    if config is not None:
        roots = _model_roots(owners)
        if not roots:
            raise InputError("the checkpoint holds no Keras model (no layer_with_weights-N objects)")
        if len(roots) > 1 and len({len(r) for r in roots}) == len(roots) and roots[0] == ():
            roots = roots[:1]
        outer = [r for r in roots if not any(r[: len(o)] == o and r != o for o in roots)]
        if len(outer) != 1:
            raise InputError("the checkpoint holds several Keras models ("
                             + ", ".join("/".join(r) or "(root)" for r in outer) + "); --config describes one")
        groups = _model_weights(owners, outer[0], config, "")
    else:
        groups = _generic_groups(owners, shapes)
    names = [g for g, _ in groups]
    dup = next((g for i, g in enumerate(names) if g in names[:i]), None)
    if dup is not None:
        raise InputError(f"the architecture names layer {dup!r} twice: the checkpoint cannot be mapped to it")
    return groups
