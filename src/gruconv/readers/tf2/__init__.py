"""TensorFlow 2 object-based checkpoints of tf.keras models (and SavedModel variables, tf.keras SavedModels): ``tf2-checkpoint``.

What it reads: ``model.save_weights("ckpt")`` (no ``.h5``), ``tf.train.Checkpoint(model=...).save``,
and a SavedModel directory's ``variables/variables`` bundle, whenever the bundle holds
``_CHECKPOINTABLE_OBJECT_GRAPH`` and object-style keys (``.../.ATTRIBUTES/VARIABLE_VALUE``; checked on
``fixtures/tf2/ckpt_*`` and ``fixtures/tf2/saved_model``, written by TF 2.21 / tf_keras 2.21).  A
TF1 name-based bundle (``rnn/multi_rnn_cell/...``, no object graph) is the ``tf1-checkpoint`` reader's,
so this reader sits before it in :data:`gruconv.readers.READERS` and declines such bundles.

How: the bundle is read with the pure-Python :mod:`gruconv.readers.tfbundle` reader (no TensorFlow); its
Keras variables are mapped to the legacy Keras weights layout's layer groups
(:func:`gruconv.readers.tf2.objects.weight_groups`), scanned by the Keras HDF5 reader's layer scan
(:func:`gruconv.readers.keras_h5.scan_groups`) and read straight from the bundle when a writer asks
(:class:`gruconv.readers.tf2.store.BundleStore`; nothing is written).  So:

* with ``--config`` (the model's tf.keras ``to_json()``), or from a tf.keras 2.x SavedModel's own
  ``keras_metadata.pb``, or TF 2.0-2.4's copy in its object graph (``model.save(dir)``, :mod:`gruconv.readers.tf2.metadata`; ``--config`` wins when
  both are there): ``layer_with_weights-N`` maps to the config's
  N-th layer that has weights (tf_keras ``engine/functional.py`` ``_trackable_children``), every shape is
  checked against the architecture, and every writer can write the whole model (``.keras``,
  ``.weights.h5``, legacy ``.h5``);
* without it: cuDNN layers are found by the shapes of their weights (:mod:`gruconv.readers.keras_h5.by_shape`), each
  under its object path; the converted stacks go to a legacy ``.h5`` weights file (the other layers'
  weights have no architecture to be placed in, so a ``.keras`` model or Keras 3 ``.weights.h5`` —
  both need the layers' names and order — is refused with a pointer to ``--config``).  ``verify`` then
  checks each stack on its own (a Keras 3 model of that one layer against the cuDNN oracle;
  :mod:`gruconv.verify.subjects` decides so from :attr:`TF2CheckpointDoc.content`, ``weights`` as for a
  weights-only HDF5 file).

Messages name the checkpoint: the document's ``path`` is the input itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ...model.canonical import Document, InputFacts
from ...errors import GruconvError, InputError, about
from ...options import Options
from .. import keras_h5
from .metadata import described

FORMAT = "tf2-checkpoint"
#: What this reader reads, for messages.
DESCRIPTION = "a TensorFlow 2 object-based checkpoint"
#: ``--config``: the tf.keras architecture the object graph is mapped to.  Nothing else: the TF1
#: reader's ``--rnn``/``--prefer``/shape hints describe name-based cuDNN buffers, which this format has not.
OPTIONS = frozenset({"config"})
#: What its documents hold (:data:`gruconv.model.canonical.CONTENTS`): a Keras graph (the layers' weights and,
#: with --config or the SavedModel's metadata, the model), or weights without an architecture.
CONTENTS = ("graph", "weights")
#: A checkpoint is named by its prefix: no name ending to strip.
SUFFIXES = ()

from ...model.saved_model import SAVED_MODEL_FILES as _SAVED_MODEL_FILES  # noqa: E402


# --------------------------------------------------------------------------- where the bundle is

def saved_model_prefix(path) -> Optional[Path]:
    """``DIR/variables/variables`` when ``path`` is a SavedModel directory, else None
    (:func:`gruconv.readers.tfbundle.saved_model_variables`, which :func:`~gruconv.readers.tfbundle.resolve_prefix`
    follows too, so the TF1 reader reads a SavedModel of name-based variables the same way)."""
    from ..tfbundle import saved_model_variables

    try:
        return saved_model_variables(path) if Path(os.fspath(path)).is_dir() else None
    except (OSError, ValueError):
        return None


def resolve(path) -> Path:
    """The bundle prefix of ``path`` (:func:`gruconv.readers.tfbundle.resolve_prefix`: a directory, a prefix,
    one of its files, a SavedModel directory)."""
    from ..tfbundle import resolve_prefix

    return resolve_prefix(path)


def sniff(path) -> bool:
    """True when ``path`` names a TensorBundle (directory, prefix, one of its files, a SavedModel)
    whose index holds the object graph and object-style keys; no exceptions (anything unreadable is
    left to the readers after this one to describe)."""
    from .objects import is_object_checkpoint
    from ..tfbundle import open_bundle

    try:
        p = Path(os.fspath(path))
        if p.is_file():
            with open(p, "rb") as f:
                if f.read(8) == b"\x89HDF\r\n\x1a\n":
                    return False
        with open_bundle(resolve(p)) as b:
            return is_object_checkpoint(b.keys())
    except Exception:  # noqa: BLE001 - a sniff never raises: a damaged bundle is left to the TF1 reader to describe
        return False


def input_files(path) -> list:
    """Every file a conversion of ``path`` reads: the bundle's files (and the SavedModel's graph file)."""
    from ..tfbundle import checkpoint_files

    p = Path(path)
    sm = saved_model_prefix(p)
    if sm is None:
        return [Path(f) for f in checkpoint_files(p)]
    from .metadata import metadata_file

    meta = metadata_file(p)
    return ([p / n for n in _SAVED_MODEL_FILES if (p / n).is_file()] + [Path(f) for f in checkpoint_files(sm)]
            + ([meta] if meta is not None else []))


def input_prefix(path):
    """Batch mode's "what is one input here": the bundle prefix (a SavedModel's is its
    ``variables/variables``, so naming the directory or the bundle is one input, as for the TF1 reader)."""
    return resolve(path)


# --------------------------------------------------------------------------- the document

@dataclass
class TF2CheckpointDoc(keras_h5.KerasH5Model):
    """A TF2 object checkpoint as the Keras graph it holds: the legacy reader's document, its weights read
    straight from the bundle (:attr:`store`, :class:`gruconv.readers.tf2.store.BundleStore`)."""

    prefix: Path = None            # the bundle prefix
    groups: list = field(default_factory=list)  # [(group, [(weight name, bundle key)])] (objects.weight_groups)
    config_given: bool = False
    other_tensors: int = 0         # bundle entries that are not a converted layer's weight
    saved_model: bool = False
    metadata: Optional[Path] = None  # the keras_metadata.pb the architecture came from (no --config)
    owners: dict = field(default_factory=dict)  # bundle key -> its layer's object path (objects.structural_variables)
    served_by: Optional[Path] = None
    served_why: Optional[str] = None
    #: what one run of the served SavedModel may take (:class:`gruconv.options.Budget`: verify's reference of it
    #: runs in a bounded child, :mod:`gruconv.verify.reference.saved_model`)
    budget: object = None
    #: its weights are in the legacy layout as gruconv mapped the object graph to it, not as a file stores them
    laid_out = True

    @property
    def store(self):
        """The stored weights, read from the bundle for each pass (:class:`~gruconv.readers.tf2.store.BundleStore`)."""
        from .store import BundleStore

        return BundleStore(self.prefix, self.groups, self.path)

    @property
    def objects(self) -> dict:
        """``"group/weight name"`` -> bundle key, for every weight of :attr:`groups`."""
        return {f"{g}/{w}": key for g, ws in self.groups for w, key in ws}

    def document(self):
        """The legacy reader's document of this graph, said of the checkpoint: its files are the inputs,
        each layer's report names its checkpoint object."""
        d = keras_h5.plan_facts(self, Document(source=str(self.path), reader=FORMAT, stacks=list(self.rnns),
                                               graph=self))
        d.inputs = input_files(self.path) + ([self.config_file] if self.config_file is not None else [])
        if self.metadata is not None and self.metadata not in d.inputs:
            d.inputs.append(self.metadata)
        if self.metadata is not None and d.nothing:
            # Keras 3 cannot open a tf.keras 2.x SavedModel ("File format not supported"), so its translation
            # is the conversion even without a cuDNN layer
            d.nothing = False
            d.notes.append("no CuDNNGRU/CuDNNLSTM layer: converted because Keras 3 cannot open a tf.keras 2.x "
                           f"SavedModel (its config from {described(self.metadata)}, its weights from the variables)")
        if not self.config_given:
            d.needs_config = ("a TF2 checkpoint without --config ARCH.json (the model's to_json()) has no layer "
                              "names or order for a {suffix} file; pass --config, or write a .h5 weights file")
        legacy_row = d.row

        def row(i, nonfinite=None):
            entry = legacy_row(i, nonfinite)
            entry["details"] = [f"object: {self.object_path(self.rnns[i])}"] + list(entry.get("details") or [])
            return entry

        d.row = row
        if self.other_tensors:
            d.closing.append(f"{self.other_tensors} other checkpoint tensor(s) (optimizer state, counters"
                             + ("" if self.config_given else ", non-recurrent layers") + ") not carried over")
        return d

    def object_path(self, rnn) -> str:
        """The checkpoint object path(s) an RNN's weights came from, e.g.
        ``layer_with_weights-1/{forward_layer,backward_layer}``."""
        objects = self.objects
        owners = []
        for direction in rnn.datasets:
            for ds in direction.values():
                key = objects.get(ds.lstrip("/"))
                if key is not None:
                    owner = self.owners.get(key) or key.rsplit("/", 3)[0]
                    if owner not in owners:
                        owners.append(owner)
        if len(owners) == 2:
            a, b = owners
            common = os.path.commonprefix([a, b]).rsplit("/", 1)[0]
            if common and a.startswith(common + "/") and b.startswith(common + "/"):
                return f"{common}/{{{a[len(common) + 1:]},{b[len(common) + 1:]}}}"
        return ", ".join(owners)


def _metadata(path, opts: Options) -> Optional[Path]:
    """The file the architecture comes from when no ``--config`` is given: a SavedModel's ``keras_metadata.pb``,
    or its ``saved_model.pb`` whose object graph holds it (TF 2.0-2.4; :func:`.metadata.model_source`)."""
    from .metadata import model_source

    if opts.config is not None or saved_model_prefix(path) is None:
        return None
    return model_source(path)


def _served(path: Path) -> tuple:
    """``(directory, None)`` when TensorFlow serves the SavedModel's graph on a CPU (no cuDNN node, or each in a
    tf.keras GPU variant with a standard twin: :func:`gruconv.readers.tfgraph.cudnn.serves_on_cpu`), else
    ``(directory, why not)``: verify runs it as one more original (:mod:`gruconv.verify.reference.saved_model`).
    A graph this scan cannot read is not served (the conversion itself reads the variables, not the graph)."""
    from ..tfgraph import graph_file, scanned
    from ..tfgraph.cudnn import serves_on_cpu

    gf = graph_file(path)
    if gf is None:
        return path, "no saved_model.pb"
    try:
        nodes = scanned(gf).nodes
    except GruconvError as e:
        return path, f"its graph cannot be read ({e.message})"
    if nodes and not serves_on_cpu(nodes):
        ops = sorted({n.op for n in nodes if not n.cpu_twin})
        return path, (f"its graph calls {', '.join(ops)} with no CPU twin (a CuDNNGRU/CuDNNLSTM layer calls it "
                      "directly): TensorFlow cannot serve it on a CPU")
    return path, None


def read(path, options: Optional[Options] = None, **kw) -> TF2CheckpointDoc:
    """Open the bundle, map its Keras variables to the legacy layout's layer groups, scan those."""
    from .objects import is_object_checkpoint, structural_variables, weight_groups
    from .store import BundleStore, ROOT_ATTRS
    from ..tfbundle import open_bundle

    path = Path(path)
    opts = Options.of(options, **kw)
    config = keras_h5.architecture_of(opts.config)
    if config is not None and not (isinstance(config, dict) and isinstance(config.get("class_name"), str)):
        raise InputError("is not a Keras model architecture (no class_name): expected the model's to_json()",
                         path=Path(opts.config) if not isinstance(opts.config, dict) else path)
    meta = _metadata(path, opts)
    if meta is not None:
        from .metadata import model_config

        config = model_config(meta)
    prefix = resolve(path)
    with open_bundle(prefix) as bundle:
        if not is_object_checkpoint(bundle.keys()):
            raise InputError("holds no TF2 object graph (_CHECKPOINTABLE_OBJECT_GRAPH)", path=path)
        try:
            groups = weight_groups(bundle, config)
        except GruconvError as e:
            raise (type(e)(e.message, path=path) if e.path is None else e) from None
        n_keys = len([k for k in bundle.keys() if k != "_CHECKPOINTABLE_OBJECT_GRAPH"])
        owners = {key: "/".join(owner) for owner, attrs in structural_variables(bundle).items()
                  for key in attrs.values()}
    layer_names = [g for g, _ in groups]
    try:
        with about(path):
            keras_h5.check_model_config(config, path)
            keras_h5.check_layer_names(layer_names, path)
            doc = TF2CheckpointDoc(
                path=path, kind="weights", keras_version=dict(ROOT_ATTRS)["keras_version"],
                backend=dict(ROOT_ATTRS)["backend"],
                model_config=keras_h5.keras2_names(config, list(layer_names)), training_config=None,
                layer_names=layer_names, prefix=prefix, groups=groups, config_given=config is not None,
                saved_model=saved_model_prefix(path) is not None, metadata=meta, owners=owners)
            if opts.config is not None and not isinstance(opts.config, dict):
                doc.config_file = Path(opts.config)
            with BundleStore(prefix, groups, path).open() as store:
                stored = {}
                for g in layer_names:
                    stored[g] = [(w, store.weight(g, w)) for w in store.layer_weights(g)]
                    for _w, ref in stored[g]:
                        ref.check(numeric=False)  # every weight, as the HDF5 reader checks its datasets
                keras_h5.scan_groups(doc, stored)
    except RecursionError:
        raise InputError("the architecture (--config) is nested too deeply", path=path) from None
    doc.other_tensors = n_keys - len({key for _, ws in groups for _, key in ws})
    doc.served_by, doc.served_why = _served(path) if meta is not None else (None, None)
    if doc.served_by is not None:
        from ...options import Budget

        doc.budget = Budget.of(opts.graph_timeout, opts.graph_memory)
    return doc


# --------------------------------------------------------------------------- registry verbs

def inspect(doc: TF2CheckpointDoc) -> dict:
    """The one inspect schema; each RNN's details name the checkpoint object(s) its weights are at."""
    info = keras_h5.inspect(doc)
    for entry, rnn in zip(info["rnns"], doc.rnns):
        entry["details"] = [f"object: {doc.object_path(rnn)}"] + list(entry["details"])
    what = "SavedModel variables" if doc.saved_model else "TF2 object-based checkpoint"
    arch = (f"architecture from {described(doc.metadata)}" if doc.metadata is not None else "architecture from --config"
            if doc.config_given else "no architecture (layers found by shape)")
    info["file"] = str(doc.path)
    info["format"] = FORMAT
    info["kind"] = "model" if doc.config_given else "weights"
    info["prefix"] = str(doc.prefix)
    info["summary"] = f"{what}; {arch}; {len(doc.layer_names)} layer group(s)"
    info["other_tensors"] = doc.other_tensors
    if doc.other_tensors:
        info["details"].append(f"other tensors: {doc.other_tensors} (optimizer state, counters"
                               + ("" if doc.config_given else ", non-recurrent layers")
                               + "): not carried over")
    if doc.rnns and not doc.config_given:
        info["details"].append("without --config (the model's to_json()) only the converted layers' weights "
                               "can be written (legacy .h5); --config gives the whole model")
    return info


def input_facts(path, opts: Options) -> InputFacts:
    """With ``--config`` or a SavedModel's ``keras_metadata.pb`` a graph, else the converted layers' weights
    alone (:class:`~gruconv.model.canonical.InputFacts`); nothing is read."""
    graph = opts.config is not None or _metadata(path, opts) is not None
    return InputFacts("graph" if graph else "weights")
