"""The Keras architecture of a tf.keras 2.x SavedModel, from its ``keras_metadata.pb``.

Why: tf.keras's ``model.save(dir)`` (TF 2.0-2.15's default, tf_keras's ``save_format="tf"``) writes the
whole model config beside the variables, so such a SavedModel converts with no ``--config``: this is the
``to_json()`` a user would otherwise have to find.

Where (tf_keras 2.21, ``saving/legacy/saved_model/save.py`` writes ``keras_metadata.pb``, ``constants.py``
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

TF 2.0-2.4 kept the same JSON in the SavedModel's object graph instead (``SavedUserObject.metadata``);
such a SavedModel has no ``keras_metadata.pb`` and still needs ``--config``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ...errors import InputError

#: The metadata file (tf_keras ``saving/legacy/saved_model/constants.py`` ``SAVED_METADATA_PATH``).
KERAS_METADATA = "keras_metadata.pb"
#: Identifiers of a whole model (tf_keras ``saving/legacy/saved_model/constants.py``).
MODEL_IDENTIFIERS = frozenset({"_tf_keras_model", "_tf_keras_sequential", "_tf_keras_network"})
#: ``json_utils.Encoder``'s wrappers whose ``items`` stand for a list.
_SEQUENCES = frozenset({"__tuple__", "TensorShape"})


def metadata_file(path) -> Optional[Path]:
    """``DIR/keras_metadata.pb`` when ``path`` is a directory holding it, else None."""
    from ...files.inputs import is_regular

    p = Path(path)
    try:
        return p / KERAS_METADATA if p.is_dir() and is_regular(p / KERAS_METADATA) else None
    except (OSError, ValueError):
        return None


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


def model_config(path: Path) -> dict:
    """The ``model_config`` (``{"class_name", "config"}``) of ``keras_metadata.pb`` at ``path``; every problem
    one :class:`InputError`."""
    from ...files.inputs import parse_json, read_bytes
    from ..tfbundle import Malformed
    from ..tfgraph import protos

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
    meta = decoded(parse_json(root[1].encode("utf-8"), "the root object's metadata", path=path))
    config = meta.get("model_config") if isinstance(meta, dict) else None
    if not (isinstance(config, dict) and isinstance(config.get("class_name"), str)):
        raise InputError("holds no model_config for the root model (a subclassed model has none); pass "
                         "--config ARCH.json (the model's to_json())", path=path)
    return config
