"""Pure Keras 2 / tf.keras config walking, shared by the readers and the Keras 3 side without either
importing the other: the accessors of a layer config (class name, config object, inner layers, name) and
the class sets they are read against.  No I/O, no framework: JSON in, values out.

Format facts (Keras 2 ``keras/engine/sequential.py`` / ``functional.py`` ``get_config``; tf_keras the
same): a layer entry is ``{"class_name": ..., "config": {...}}``; a container (``Sequential``, ``Model``,
``Functional``) lists its layers in ``config["layers"]``, or, for Keras 2.0-2.2.2's ``Sequential``, as
``config`` itself.
"""

from __future__ import annotations

from typing import Optional

from .keras_layout import CELL_OF_CUDNN_CLASS, KERAS3_CLASS

#: The Keras 2 / tf.keras / tf_keras cuDNN-only layer classes and the cell each holds, and per cell the
#: Keras 3 layer class it becomes (``model/keras_layout.py``'s tables under this module's names).
CUDNN_CLASSES = CELL_OF_CUDNN_CLASS
TARGET_CLASS = KERAS3_CLASS
CONTAINER_CLASSES = {"Sequential", "Model", "Functional"}


def class_name_of(cfg) -> Optional[str]:
    name = cfg.get("class_name") if isinstance(cfg, dict) else None
    return name if isinstance(name, str) else None


def config_of(cfg) -> dict:
    """A layer's ``config`` object, or ``{}`` when it is missing or not an object."""
    c = cfg.get("config") if isinstance(cfg, dict) else None
    return c if isinstance(c, dict) else {}


def layers_of(cfg: dict) -> list:
    inner = cfg.get("config")
    if isinstance(inner, list):  # Keras 2.0–2.2.2 Sequential: config is the layer list
        return inner
    if isinstance(inner, dict) and isinstance(inner.get("layers"), list):
        return inner["layers"]
    return []


#: Layers that wrap one inner layer (``config["layer"]``, a ``Bidirectional``'s ``backward_layer`` too).
WRAPPER_CLASSES = {"Bidirectional", "TimeDistributed"}


def walk_layers(cfg: dict, top: Optional[str] = None, prefix: str = ""):
    """Yield (layer_cfg, path, top_level_layer, wrapper_cfg) for every layer in a model config (the one walk
    the readers, the Keras 3 side and verify share)."""
    from ..errors import InputError

    for layer in layers_of(cfg):
        if not isinstance(layer, dict):
            raise InputError(f"model_config has a layer entry that is not an object: {layer!r:.80}")
        name = name_of(layer)
        path = f"{prefix}{name}"
        this_top = top or name
        yield layer, path, this_top, None
        cls = class_name_of(layer)
        if cls in CONTAINER_CLASSES or layers_of(layer):
            yield from walk_layers(layer, this_top, path + "/")
        elif isinstance(layer.get("config"), dict) and (cls in WRAPPER_CLASSES or "layer" in layer["config"]):
            inner_cfg = layer["config"]
            for key in ("layer", "backward_layer"):
                inner = inner_cfg.get(key)
                if isinstance(inner, dict):
                    yield inner, f"{path}/{name_of(inner)}", this_top, layer


def name_of(cfg: dict) -> str:
    c = cfg.get("config")
    name = (c.get("name") if isinstance(c, dict) else None) or cfg.get("name")
    return str(name) if name is not None else "?"


#: Layers that compute the identity at inference (``training=False``: Keras's ``Dropout``, noise and
#: regularization layers return their input), so a value crosses them unchanged.
IDENTITY_AT_INFERENCE = frozenset({"Dropout", "SpatialDropout1D", "GaussianNoise", "GaussianDropout",
                                   "AlphaDropout", "ActivityRegularization"})


def makes_mask(class_name: Optional[str], config: dict) -> bool:
    """Whether a layer of ``class_name`` with ``config`` attaches a Keras mask to its output: ``Masking``,
    and ``Embedding`` with ``mask_zero`` (Keras 2 and 3 ``compute_mask``)."""
    return class_name == "Masking" or (class_name == "Embedding" and bool(config.get("mask_zero")))


# --------------------------------------------------------------------------- the shape of a config

#: Wrapper classes whose ``config["layer"]`` (and Bidirectional's ``backward_layer``) is one layer entry
#: (Keras 2 ``layers/wrappers.py`` ``Wrapper.get_config``).
WRAPPER_CLASSES = frozenset({"Bidirectional", "TimeDistributed"})


def _ref_ok(ref, kwargs_ok: bool) -> bool:
    """One tensor reference as Keras 2 wrote it: ``[layer name, node index, tensor index(, call kwargs)]``
    (``engine/node.py`` ``serialize``; the kwargs dict from tf.keras 2.x on)."""
    if not isinstance(ref, list) or len(ref) not in ((3, 4) if kwargs_ok else (3,)):
        return False
    ok = isinstance(ref[0], str) and all(isinstance(i, int) and not isinstance(i, bool) for i in ref[1:3])
    return ok and (len(ref) == 3 or isinstance(ref[3], dict))


def malformed(cfg) -> Optional[str]:
    """Where and how a legacy (Keras 2 / tf.keras) model config breaks the shape every Keras 2 writer gave
    it, or None: each layer entry an object with a string ``class_name``, an object ``config`` (a list for a
    Keras 2.0-2.2.2 ``Sequential``), a string name; a wrapper's ``layer`` one such entry; a Functional's
    ``input_layers``/``output_layers`` lists of ``[name, node, tensor]`` (or one such triple) and each
    layer's ``inbound_nodes`` a list of nodes, each a list of references (or a Keras 3 call object).

    Why one check before any walk: the translation, the input-features check and the writers index into
    these values; a damaged file (``make fuzz`` splices random JSON anywhere) gave each of them its own
    ``TypeError``/``KeyError`` and convert an exit 4.  The file is what is wrong: the caller refuses it
    (exit 3) naming the place.  Only shape, never values (those are :mod:`gruconv.keras3.validate`'s).
    Iterative: a deeply nested config cannot exhaust the stack."""
    if not isinstance(cfg, dict) or class_name_of(cfg) is None:
        return "the model config is not a layer object with a class_name"
    todo = [(cfg, "", False)]
    while todo:
        entry, path, functional = todo.pop()
        if not isinstance(entry, dict):
            return f"{path or 'the model'}: a layer entry is not an object ({type(entry).__name__})"
        cls = class_name_of(entry)
        if cls is None:
            return f"{path or 'the model'}: a layer's class_name is not a string"
        conf = entry.get("config")
        name = conf.get("name") if isinstance(conf, dict) else None
        name = entry.get("name") if name is None else name
        if name is not None and not isinstance(name, str):
            return f"{path or 'the model'}: the {cls} layer's name is not a string"
        here = f"{path}/{name}" if path and name else (name or path or cls)
        if cls in CONTAINER_CLASSES:
            if isinstance(conf, list) and cls == "Sequential":
                todo.extend((l, here, False) for l in reversed(conf))
            elif isinstance(conf, dict) and isinstance(conf.get("layers"), list):
                inner_functional = cls != "Sequential"
                todo.extend((l, here, inner_functional) for l in reversed(conf["layers"]))
                if inner_functional:
                    for key in ("input_layers", "output_layers"):
                        refs = conf.get(key)
                        if refs is None:
                            continue
                        if not (_ref_ok(refs, False) or (isinstance(refs, list)
                                                        and all(_ref_ok(r, False) for r in refs))):
                            return f"{here}: {key} is not a list of [layer, node, tensor] references"
            else:
                return f"{here}: a {cls} without a layer list"
        elif not isinstance(conf, dict):
            return f"{here}: the {cls} layer's config is not an object"
        elif cls in WRAPPER_CLASSES:
            if not isinstance(conf.get("layer"), dict):
                return f"{here}: a {cls} without a wrapped layer object"
            todo.append((conf["layer"], here, False))
            if conf.get("backward_layer") is not None:
                todo.append((conf["backward_layer"], here, False))
        if functional and "inbound_nodes" in entry:
            nodes = entry["inbound_nodes"]
            if not isinstance(nodes, list) or not all(
                    isinstance(n, dict) or (isinstance(n, list) and all(_ref_ok(r, True) for r in n))
                    for n in nodes):
                return f"{here}: inbound_nodes is not a list of nodes of [layer, node, tensor] references"
    return None


# --------------------------------------------------------------------------- code in a config

#: Layer classes whose config makes building the model run a computation gruconv cannot see, and what it
#: is (the one list: readers, the Keras 3 translation and verify's reference read it).  ``Lambda``: Python
#: code, marshalled bytecode (Keras 2 ``function: [code, defaults, closure]`` with ``function_type:
#: "lambda"``, ``keras/layers/core.py`` 2.x) or a function named by module and name; ``TFSMLayer``: a
#: SavedModel loaded from its ``filepath``, a path outside the input (``keras/src/export/tfsm_layer.py``).
#: Keras 3 refuses both in safe mode (``Lambda.from_config``, ``TFSMLayer.from_config``, 3.15.1); gruconv
#: refuses them before any Keras is imported, wherever they sit.
CODE_CLASSES = {"Lambda": "Python code", "TFSMLayer": "a SavedModel loaded from its filepath"}
#: Keras 3's serialized lambda (``keras/src/saving/serialization_lib.py`` ``serialize_keras_object`` of a
#: lambda: ``{"class_name": "__lambda__", "config": {"code": <base64 marshal>, ...}}``).
LAMBDA_OBJECT = "__lambda__"
#: Keys of Keras 2's ``Lambda`` config whose value ``"lambda"`` says the matching entry is marshalled
#: bytecode (``Lambda.get_config``, Keras 2.x / tf_keras ``core/lambda_layer.py``).
_CODE_TYPE_KEYS = ("function_type", "output_shape_type")


def code_in(cfg, path: str = "") -> list:
    """``[(path, what)]``: every place in a model or layer config (any JSON value) that holds code a build
    would run (:data:`CODE_CLASSES`, :data:`LAMBDA_OBJECT`, a Keras 2 ``function_type: "lambda"``),
    searched through the whole value -- layers, wrapped layers, nested models, and the configs of layers
    gruconv carries over as they are (a custom layer's, or a class named after a function of Keras's
    namespace such as ``deserialize``, whose config could hold a whole layer).  Each ``path`` is ``path``
    (that of ``cfg`` itself) followed by the layer names down to the find (``walk_layers``'s paths:
    ``outer/inner``); ``what`` a class of :data:`CODE_CLASSES` or ``"Python code"``.  What is found is not
    searched further.  A class name counts by its last part (``Package>Lambda``, ``keras.layers.Lambda``).

    Why everywhere, not only at layer positions: Keras deserializes a nested ``{"class_name": ...,
    "config": ...}`` wherever a layer's ``from_config`` hands it on, and which keys a class hands on is
    its code, not the config's shape.  Iterative, so a deeply nested config cannot exhaust the stack."""
    found = []
    todo = [(cfg, path, True)]
    while todo:
        node, path, top = todo.pop()
        if isinstance(node, list):
            todo.extend((v, path, False) for v in reversed(node))
            continue
        if not isinstance(node, dict):
            continue
        cls = class_name_of(node)
        name = config_of(node).get("name") if cls is not None else None
        here = path if top or not isinstance(name, str) else (f"{path}/{name}" if path else name)
        bare = cls.split(">")[-1].split(".")[-1] if cls is not None else None
        if bare in CODE_CLASSES:
            found.append((here or (name if isinstance(name, str) else bare), bare))
            continue
        if bare == LAMBDA_OBJECT or any(node.get(k) == "lambda" for k in _CODE_TYPE_KEYS):
            found.append((here or "the model", "Python code"))
            continue
        todo.extend((v, here, False) for v in reversed(list(node.values())))
    return found


def code_label(path: str, what: str) -> str:
    """One :func:`code_in` entry for a message: a ``Lambda`` layer by its path (as ever), anything else
    with what it holds."""
    if what == "Lambda":
        return path
    return f"{path} ({what}: {CODE_CLASSES[what]})" if what in CODE_CLASSES else f"{path} ({what})"


def code_phrase(labels: list) -> str:
    """:func:`code_label` entries in a message: "Lambda layer(s) a, b holding Python code" when each is a
    Lambda layer (the wording of earlier releases), else the general one."""
    names = ", ".join(str(l) for l in labels)
    if all(" (" not in str(l) for l in labels):
        return f"Lambda layer(s) {names} holding Python code"
    return f"layer(s) holding code or loading it from outside the file: {names}"
