"""Who claims a SavedModel directory: the one answer both SavedModel readers ask (names from
:mod:`gruconv.model.saved_model`; no TensorFlow, bounded reads).

A tf.keras 2.x ``model.save(dir)`` -- its ``keras_metadata.pb`` (TF 2.5+), or the model's metadata at the root of
the object graph in its ``saved_model.pb`` (TF 2.0-2.4; the facts: :mod:`gruconv.readers.tf2.metadata`) -- is the
``tf2-checkpoint`` reader's when its variables are there (the architecture is in it, whatever its graph holds), and
the graph reader's, to be refused in one line, when they are missing (:func:`keras_claims`).  Any other SavedModel
is the graph reader's when its graph holds cuDNN nodes (:mod:`gruconv.readers.tfgraph`).

Why its own module: the two readers each asked the other (``readers/tfgraph`` imported ``readers/tf2.metadata``,
``readers/tf2`` imported ``readers/tfgraph``): a cycle of packages.  Now both import this, and only ``tf2``
imports the graph reader (to scan a served graph for verify).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ..model.saved_model import GRAPH_FILES, KERAS_METADATA, VARIABLES_PREFIX

#: Identifiers of a whole model (tf_keras ``saving/legacy/saved_model/constants.py``).
MODEL_IDENTIFIERS = frozenset({"_tf_keras_model", "_tf_keras_sequential", "_tf_keras_network"})
#: Bytes every one of :data:`MODEL_IDENTIFIERS` starts with (``_tf_keras_``).
_MODEL_MARKER = os.path.commonprefix(sorted(MODEL_IDENTIFIERS)).encode()


def metadata_file(path) -> Optional[Path]:
    """``DIR/keras_metadata.pb`` when ``path`` is a directory holding it, else None."""
    from ..files.inputs import is_regular

    p = Path(path)
    try:
        return p / KERAS_METADATA if p.is_dir() and is_regular(p / KERAS_METADATA) else None
    except (OSError, ValueError):
        return None


def object_graph_file(path) -> Optional[Path]:
    """The ``saved_model.pb[txt]`` of SavedModel directory ``path`` when the root of its object graph is a
    tf.keras model with metadata (TF 2.0-2.4's place for it), else None; never raises.  A root whose fields
    cannot be read past its Keras identifier counts (:func:`gruconv.readers.tf2.metadata.model_config` then says what is wrong, in one
    line); a graph that cannot be read up to it does not."""
    from ..errors import GruconvError
    from ..files.inputs import contains, is_regular, once

    try:
        p = Path(path)
        gf = next((p / name for name, _ in GRAPH_FILES if p.is_dir() and is_regular(p / name)), None)
        # every model identifier holds the marker: a graph without it is not read into memory (a sniff of a
        # large TF1 SavedModel stays a look into a read-only map of it)
        if gf is None:
            return None

        def root():
            if not contains(gf, _MODEL_MARKER, "a SavedModel graph",
                            kind="graph-text" if dict(GRAPH_FILES)[gf.name] else "graph"):
                return None
            return object_graph_root(gf)

        found = once(gf, "saved_models.object_graph_root", root)  # the sniff's look is the reader's
        if found is None:
            return None
        identifier, meta, error = found
    except (GruconvError, OSError, ValueError, RecursionError):
        return None
    return gf if identifier in MODEL_IDENTIFIERS and (meta or error is not None) else None


def object_graph_root(gf: Path) -> tuple:
    """``(identifier, metadata, error)`` of the root object (``meta_graphs[0].object_graph_def.nodes[0]
    .user_object``) of SavedModel graph file ``gf``: ``""``/``None`` for what is not there; ``error`` the
    :class:`~gruconv.readers.tfbundle.Malformed` that stopped the walk (or None)."""
    from ..files.inputs import read_bytes
    from . import protos
    from .tfbundle import Malformed

    text = dict(GRAPH_FILES).get(gf.name)
    data = read_bytes(gf, "a SavedModel graph", kind="graph-text" if text else "graph")
    identifier, meta = "", None
    try:
        top = protos.parse(data, "SavedModel", f"SavedModel {gf.name}", text=text, path=gf)
        meta_graph = next(top.each("meta_graphs"), None)
        graph = None if meta_graph is None else meta_graph.get("object_graph_def")
        root = None if graph is None else next(graph.each("nodes"), None)
        user = None if root is None else root.get("user_object")
        if user is not None:
            for name, value in user.fields("identifier", "metadata"):
                if name == "identifier":
                    identifier = value
                else:
                    meta = value
    except Malformed as e:
        return identifier, meta, e
    return identifier, meta, None


def variables_prefix(directory) -> Optional[Path]:
    """The variables bundle prefix of a SavedModel directory, when its index is there."""
    from ..files.inputs import is_regular

    prefix = Path(directory) / VARIABLES_PREFIX
    return prefix if is_regular(str(prefix) + ".index") else None


def keras_saved_model(directory) -> bool:
    """Whether a SavedModel directory is tf.keras 2.x's ``model.save(dir)``: its ``keras_metadata.pb`` (TF 2.5+),
    or the model's metadata in its object graph (TF 2.0-2.4, :func:`object_graph_file`)."""
    return (Path(directory) / KERAS_METADATA).exists() or object_graph_file(directory) is not None


def keras_claims(directory) -> Optional[str]:
    """Which reader a tf.keras SavedModel directory is: ``tf2-checkpoint`` with its variables, ``tf-graph`` (a
    one-line refusal) without them; None when it is no tf.keras SavedModel (the graph reader decides by its
    cuDNN nodes)."""
    if not keras_saved_model(directory):
        return None
    return "tf2-checkpoint" if variables_prefix(directory) is not None else "tf-graph"
