"""The Keras architecture of a tf.keras 2.x SavedModel: from its ``keras_metadata.pb`` (TF 2.5+), else from the
object graph inside its ``saved_model.pb`` (TF 2.0-2.4).

Why: tf.keras's ``model.save(dir)`` (TF 2.0-2.15's default, tf_keras's ``save_format="tf"``) writes the
whole model config beside the variables, so such a SavedModel converts with no ``--config``: this is the
``to_json()`` a user would otherwise have to find.

Where, TF 2.5+ (tf_keras 2.21, ``saving/legacy/saved_model/save.py`` writes ``keras_metadata.pb``, ``constants.py``
``SAVED_METADATA_PATH``; ``protobuf/saved_metadata.proto``): a ``SavedMetadata`` message, ``repeated
SavedObject nodes = 1``, each ``node_id = 2``, ``node_path = 3`` (``"root"`` for the model itself),
``identifier = 4`` (``_tf_keras_model`` / ``_tf_keras_sequential`` / ``_tf_keras_network`` for a model,
``constants.py``), ``metadata = 5`` (a JSON text).  A model's metadata JSON (``model_serialization.py``
``ModelSavedModelSaver._python_properties_internal``, ``saving_utils.model_metadata``) holds
``model_config`` (``{"class_name", "config"}``, what ``to_json()`` gives), ``keras_version``, ``backend``
and ``training_config``.  It is encoded by ``json_utils.Encoder``, which writes every tuple as
``{"class_name": "__tuple__", "items": [...]}`` and a ``TensorShape`` as ``{"class_name": "TensorShape",
"items": [...]}``; tf_keras's loader (``json_utils.decode`` ``_decode_helper``) turns them back, and so does
:func:`decoded` (into lists, what ``to_json()`` writes for a tuple).  ``shared_object_id`` entries stay:
:func:`gruconv.keras3.config.translate` drops them.

Where, TF 2.0-2.4 (no ``keras_metadata.pb``): the same JSON string, in the object graph.  Facts, from
TensorFlow's sources of that era:

* ``tensorflow/python/keras/saving/saved_model/save.py`` (TF 2.4: ``save(model, filepath, ..., save_traces)``)
  calls ``save_lib.save(model, filepath, signatures, options)`` and writes no other file;
* ``tensorflow/python/saved_model/save.py`` ``_write_object_proto`` gives every object with no registered
  type ``SavedUserObject(identifier=obj._object_identifier, version=VersionDef(producer=1, min_consumer=1),
  metadata=obj._tracking_metadata)``, into ``MetaGraphDef.object_graph_def.nodes[i].user_object``, the
  nodes in the order of the saveable view, the root (the model) first;
* a Keras layer's ``_tracking_metadata`` is its saver's ``tracking_metadata``:
  ``json_utils.Encoder().encode(self.python_properties)``
  (``tensorflow/python/keras/saving/saved_model/base_serialization.py``), for a model the same
  ``ModelSavedModelSaver._python_properties_internal`` dict as above (``model_serialization.py``);
* field numbers (``tensorflow/core/protobuf/meta_graph.proto``, ``saved_object_graph.proto``):
  ``MetaGraphDef.object_graph_def = 7``, ``SavedObjectGraph.nodes = 1``, ``SavedObject.user_object = 4``
  (a ``oneof kind``), ``SavedUserObject.identifier = 1``, ``version = 2``, ``metadata = 3`` (marked
  ``deprecated`` in TF 2.21's proto; :data:`gruconv.readers.protos.SCHEMA`, checked against the
  generated descriptors).

Both places, for a while: TF 2.5's Keras (``tensorflow/python/keras/saving/saved_model/save.py``
``generate_keras_metadata``, after ``save_lib.save_and_return_nodes``) wrote ``keras_metadata.pb`` from the same
``node._tracking_metadata`` string the core writer still put into the object graph (TF 2.5's Keras ``load.py``
reads ``keras_metadata.pb`` when it exists, else ``_read_legacy_metadata``, and still decodes
``proto.user_object.metadata`` from the object graph for ``build_input_shape`` in
``_add_children_recreated_from_config``).  A later ``tensorflow/python/saved_model/save.py`` stopped writing
``metadata`` (its ``SavedUserObject`` has ``identifier`` and ``version`` only; TF 2.21 writes none, checked on
``fixtures/graphs``), and the loader's ``_read_legacy_metadata`` then refused a Keras object with empty
metadata ("created with ``tf.saved_model.save``").  So a SavedModel that has both holds the same text twice;
where both are there, ``keras_metadata.pb`` is read, exactly as tf_keras's loader decides (tf_keras 2.21
``saving/legacy/saved_model/load.py`` ``load``: the file when it exists, else ``_read_legacy_metadata`` over
the object graph, whose root is ``nodes[0]``, path ``"root"``, of ``meta_graphs[0]``).  A root with a Keras model identifier and
empty metadata is what ``tf.saved_model.save`` of a Keras model writes on TF 2.5+: no architecture
(tf_keras refuses to load it as Keras), so it is not taken for one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ...errors import InputError
from ...model.saved_model import GRAPH_FILES, KERAS_METADATA  # noqa: F401 (the metadata file, the graph files)
# "is this a tf.keras SavedModel" is one module both SavedModel readers ask (this one and the graph reader)
from ..saved_models import (MODEL_IDENTIFIERS, metadata_file, object_graph_file,  # noqa: F401
                            object_graph_root as _object_graph_root)
#: Where TF 2.0-2.4 kept it, in words (``inspect``), for the graph file's name.
OBJECT_GRAPH = "{}'s object graph (TF 2.0-2.4)"
#: ``json_utils.Encoder``'s wrappers whose ``items`` stand for a list.
_SEQUENCES = frozenset({"__tuple__", "TensorShape"})


def decoded(obj):
    """``obj`` with ``json_utils.Encoder``'s tuple and shape wrappers turned into lists and ``__bytes__``
    into its text (depth already bounded by :func:`gruconv.files.inputs.parse_json`)."""
    if isinstance(obj, list):
        return [decoded(v) for v in obj]
    if not isinstance(obj, dict):
        return obj
    cls = obj.get("class_name")
    if cls in _SEQUENCES and set(obj) == {"class_name", "items"}:
        return None if obj["items"] is None else [decoded(v) for v in obj["items"]]
    if cls == "__bytes__" and set(obj) == {"class_name", "value"}:
        return obj["value"]
    return {k: decoded(v) for k, v in obj.items()}


def model_source(path) -> Optional[Path]:
    """The file a SavedModel directory's Keras config is read from: ``keras_metadata.pb`` when it is there, else
    its ``saved_model.pb[txt]`` when the object graph holds the model's metadata (:func:`object_graph_file`),
    else None; never raises."""
    meta = metadata_file(path)
    if meta is not None:
        return meta
    return object_graph_file(path)


def described(source: Path) -> str:
    """Where :func:`model_source` found the config, in words: ``keras_metadata.pb`` or :data:`OBJECT_GRAPH`."""
    name = Path(source).name
    return KERAS_METADATA if name == KERAS_METADATA else OBJECT_GRAPH.format(name)


def model_config(path: Path) -> dict:
    """The ``model_config`` (``{"class_name", "config"}``) of the root model, read from ``path``: a
    ``keras_metadata.pb``, or a SavedModel's graph file whose object graph holds it (:func:`model_source`);
    every problem one :class:`InputError`."""
    path = Path(path)
    if path.name == KERAS_METADATA:
        return _from_keras_metadata(path)
    from .. import protos

    what = "SavedModel graph"
    if path.name not in dict(GRAPH_FILES):
        raise InputError("is not a SavedModel graph file (saved_model.pb)", path=path)
    identifier, meta, error = _object_graph_root(path)
    if error is not None:
        raise protos.malformed(error, what, path) from None
    if identifier not in MODEL_IDENTIFIERS:
        raise InputError(f"has no tf.keras model at the root of its object graph (found "
                         f"{identifier or 'no user object'}; expected {', '.join(sorted(MODEL_IDENTIFIERS))})",
                         path=path)
    if not meta:
        raise InputError("holds a tf.keras model without its metadata (saved by tf.saved_model.save, not "
                         "model.save): pass --config ARCH.json (the model's to_json())", path=path)
    return _root_config(meta, "the object graph root's metadata", path)


def _from_keras_metadata(path: Path) -> dict:
    from ...files.inputs import read_bytes
    from ..tfbundle import Malformed
    from .. import protos

    what = "tf.keras metadata file (keras_metadata.pb)"
    data = read_bytes(path, "a " + what, kind="graph")
    try:
        nodes = [(n.get("node_path", ""), n.get("identifier", ""), n.get("metadata", ""))
                 for n in protos.parse_binary(data, "SavedMetadata", "SavedMetadata").each("nodes")]
    except Malformed as e:
        raise protos.malformed(e, what, path) from None
    root = next(((ident, meta) for node_path, ident, meta in nodes if node_path == "root"), None)
    if root is None:
        raise InputError("holds no root object (node_path 'root'): not the metadata of a tf.keras model", path=path)
    if root[0] not in MODEL_IDENTIFIERS:
        raise InputError(f"describes a {root[0] or 'nameless object'}, not a tf.keras model "
                         f"({', '.join(sorted(MODEL_IDENTIFIERS))})", path=path)
    return _root_config(root[1], "the root object's metadata", path)


def _root_config(meta: str, what: str, path: Path) -> dict:
    """The ``model_config`` of a model's metadata JSON (either place)."""
    from ...files.inputs import parse_json

    meta = decoded(parse_json(meta.encode("utf-8"), what, path=path))
    if not isinstance(meta, dict):
        raise InputError(f"{what} is a JSON {type(meta).__name__}, not an object: not a tf.keras model's metadata",
                         path=path)
    config = meta.get("model_config")
    if not (isinstance(config, dict) and isinstance(config.get("class_name"), str)):
        raise InputError("holds no model_config for the root model (a subclassed model has none); pass "
                         "--config ARCH.json (the model's to_json())", path=path)
    return config
