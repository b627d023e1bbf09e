"""tf_keras ``.keras`` zips (tf.keras 2.13-2.15, tf_keras 2.16+ ``model.save("m.keras")``): read as the
legacy models they are, converted like their HDF5 twins.

Such a file is a zip like Keras 3's (``metadata.json``, ``config.json``, ``model.weights.h5``), but
``metadata.json`` says ``keras_version`` ``2.x`` and ``config.json`` is a Keras 2 model config that may
hold ``CuDNNGRU``/``CuDNNLSTM``, which Keras 3 cannot load.  The decision is
:func:`gruconv.eligibility.legacy_keras_zip`; this reader is registered before
:mod:`gruconv.readers.keras3`, which otherwise claims every ``.keras`` zip.

Layout (tf_keras ``src/saving/saving_lib.py`` ``_save_state`` / ``_save_container_state``, checked on
files written by tf_keras 2.21 in the project venv, ``fixtures/make_tf_keras_zip_fixtures.py``):
``model.weights.h5`` holds ``layers/<snake class name>[_<n>]/vars/0..n`` per layer, numbered per
container in ``model.layers`` order (a Sequential's ``InputLayer`` is not one of its layers); a
``Bidirectional``'s halves at ``.../forward_layer/vars`` and ``.../backward_layer/vars``; a
``TimeDistributed``'s layer at ``.../layer/vars``; a nested model's layers at ``.../layers/...``; a
Keras RNN's cell at ``.../cell/vars``; a ``CuDNNGRU``/``CuDNNLSTM`` has no cell: its ``kernel``,
``recurrent_kernel``, ``bias`` are its own ``vars/0..2``, stored exactly as in the HDF5 twin (same
shapes, dtypes, values).  The optimizer's state is ``optimizer/vars/0..n`` (dropped, as for HDF5); the
compile arguments are ``config.json``'s ``compile_config`` (optimizer as a name or a serialized object).
Keras 3's own object paths follow the same rule (:func:`gruconv.keras3.config.saveable_plan`), so the
two pair up layer by layer (:func:`gruconv.keras3.config.tf_keras_sources`).

The document is a :class:`gruconv.readers.keras_h5.KerasH5Model` whose weights are in this layout
(``layout = "v3"``): everything else -- the config translation, the CuDNN gate transform
(:func:`gruconv.keras3.archive.cudnn_direction`), inspect's schema, the notes -- is the legacy reader's.
The zip passes the same guards as a Keras 3 one (:func:`gruconv.files.zips.read_keras_zip`); the
weights member is read in place, never extracted (:func:`gruconv.files.hdf5.open_hdf5_member`).
Outputs: the Keras 3 ``.keras`` model and Keras 3 ``.weights.h5`` (the streamed writer, or the
Keras-built route built from it), and torch ``.safetensors`` (the other weights under this layout's
names); not legacy ``.h5`` weights, whose writer copies the legacy layout's groups.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .. import eligibility
from ..errors import GruconvError, InputError, UnsupportedError, UsageError, about
from ..files import hdf5 as h5safe, inputs, zips
from ..model.canonical import Document, InputFacts
from ..model.keras_layout import WEIGHT_ROLES
from ..options import Options
from . import keras_h5
from .keras_h5.store import H5Weight

FORMAT = "tf-keras-zip"
DESCRIPTION = "a tf_keras .keras file"
#: No ``--config``: the file carries its own config.json.
OPTIONS = frozenset()
#: What its documents hold (:data:`gruconv.model.canonical.CONTENTS`): a Keras model.
CONTENTS = ("graph",)
SUFFIXES = (".keras",)
WEIGHTS = "model.weights.h5"
#: The writers that need the legacy HDF5 layout itself (:mod:`gruconv.writers.legacy_graph`: the legacy ``.h5``
#: weights writer copies its groups); every other writer reads the document.
LEGACY_ONLY = ("h5-weights",)
#: Most HDF5 objects visited while listing the stored weights.
MAX_H5_OBJECTS = 50_000
#: Keras's optimizer names (``keras.optimizers.get``) -> class, for a ``compile_config`` that names one.
_OPTIMIZER_NAMES = {"adam": "Adam", "adamw": "AdamW", "rmsprop": "RMSprop", "sgd": "SGD", "adagrad": "Adagrad",
                    "adadelta": "Adadelta", "adamax": "Adamax", "nadam": "Nadam", "ftrl": "Ftrl",
                    "lion": "Lion", "adafactor": "Adafactor"}


@dataclass
class TfKerasZipModel(keras_h5.KerasH5Model):
    """A tf_keras ``.keras`` model: the legacy document, its weights in the zip's ``model.weights.h5``."""

    member: tuple = (0, 0)         # (local header offset, size) of the stored weights member
    layout = "v3"

    @property
    def store(self) -> "V3Store":
        """The stored weights (:class:`V3Store`: the zip's ``model.weights.h5``, read in place)."""
        return V3Store(self)

    def document(self) -> Document:
        d = keras_h5.plan_facts(self, Document(source=str(self.path), reader=FORMAT, stacks=list(self.rnns),
                                               graph=self))
        d.refused = {fmt: UnsupportedError(
            f"a tf_keras .keras input does not convert to legacy .h5 weights (--format {fmt}): "
            "write a Keras 3 .keras, .weights.h5, or a .safetensors file", path=self.path) for fmt in LEGACY_ONLY}
        return d

    @contextlib.contextmanager
    def other_weights(self):
        """Every stored weight that belongs to no cuDNN layer, as ``[("<object path>/vars/<i>", WeightRef)]``
        (the names of this layout; the HDF5 twin names them ``<layer>/<weight name>``), valid inside the block."""
        ours = {ds.lstrip("/") for rnn in self.rnns for roles in rnn.datasets for ds in roles.values()}
        with _open_member(self) as f:
            refs = []
            for name in stored_layer_weights(f, self.path):
                if name not in ours:
                    ref = H5Weight(h5safe.resolve(f, name, self.path, "dataset"), self.path)
                    ref.check(numeric=False)
                    refs.append((name, ref))
            yield refs


# --------------------------------------------------------------------------- weights


def _open_member(doc: TfKerasZipModel):
    """The zip's ``model.weights.h5``, opened in place through every guard."""
    return h5safe.open_hdf5_member(doc.path, *doc.member, "a tf_keras .keras weights file")


class V3Store:
    """The :class:`gruconv.model.weights.WeightStore` of a tf_keras ``.keras`` zip: ``model.weights.h5``'s
    ``layers/<object path>/vars/<i>`` datasets (the module docstring's layout)."""

    def __init__(self, doc: TfKerasZipModel):
        self.doc, self.path = doc, doc.path

    @contextlib.contextmanager
    def open(self):
        with _open_member(self.doc) as f:
            yield OpenV3Store(self.doc, f)


class OpenV3Store:
    """A :class:`V3Store` opened for one pass."""

    def __init__(self, doc: TfKerasZipModel, f):
        self._doc, self._f, self.path = doc, f, doc.path

    def layer_weights(self, layer: str) -> list:
        raise UnsupportedError(f"layer {layer!r}: a tf_keras .keras file stores its weights by object path, "
                               "not per top-level layer")

    def weight(self, layer: str, name: str):
        return self.layer_weights(layer)  # refused: no per-layer groups in this layout

    def rnn(self, rnn, direction: int) -> dict:
        return {role: H5Weight(h5safe.resolve(self._f, name, self.path, "dataset"), self.path)
                for role, name in rnn.datasets[direction].items()}

    def fill(self, tops: list, config: dict):
        """Each Keras 3 slot filled from the group object paths pair with it
        (:func:`gruconv.keras3.config.tf_keras_sources`: ``<group>/<slot index>``).  Every stored layer
        weight must land in a slot: one left over is refused, named (a weight Keras 3 would silently
        drop)."""
        from ..keras3 import config as keras3_config

        doc = self._doc
        try:
            sources = keras3_config.tf_keras_sources(doc.model_config, config)
        except InputError as e:
            raise InputError(e.message, path=doc.path) from None
        plan = []
        for top in tops:
            entries = []
            for slot in top.legacy_order:
                group = sources.get(slot.group)
                if group is None:
                    raise InputError(f"layer {top.name!r}: no stored weights for Keras 3's {slot.group}",
                                     path=doc.path)
                entries.append((slot, f"{group}/{slot.index}"))
            plan.append((top, entries))
        wanted = {name for _, entries in plan for _, name in entries}
        left = [n for n in stored_layer_weights(self._f, doc.path) if n not in wanted]
        if left:
            raise InputError(f"weight {left[0]} ({len(left)} in all) has no place in the converted Keras 3 model; "
                             "refused", path=doc.path)
        for top, entries in plan:
            yield top, ((slot, name, H5Weight(h5safe.resolve(self._f, name, doc.path, "dataset"), doc.path))
                        for slot, name in entries)


def stored_layer_weights(f, path) -> list:
    """Every dataset under ``layers/`` and the root ``vars`` of an open ``model.weights.h5`` (the model's
    weights; ``optimizer/`` is not), as ``group/index`` paths without the leading slash."""
    import h5py

    out, seen = [], [0]

    def visit(name, obj):
        seen[0] += 1
        if seen[0] > MAX_H5_OBJECTS:
            raise InputError(f"{WEIGHTS} holds more than {MAX_H5_OBJECTS} HDF5 objects; refused", path=path)
        if isinstance(obj, h5py.Dataset):
            out.append(name if not prefix else f"{prefix}/{name}")

    for prefix in ("layers", "vars"):
        if not h5safe.child_exists(f, prefix, path):
            continue
        group = h5safe.child(f, prefix, path, "group")
        try:
            group.visititems(visit)
        except (OSError, RuntimeError, KeyError, ValueError, TypeError) as e:
            raise InputError(f"{WEIGHTS} cannot be walked ({e})", path=path) from None
    return out


def _count_optimizer(f, path) -> int:
    if not h5safe.child_exists(f, "optimizer", path):
        return 0
    group = h5safe.child(f, "optimizer", path, "group")
    if not h5safe.child_exists(group, "vars", path):
        return 0
    return len(h5safe.child(group, "vars", path, "group"))


def training_config(compile_config) -> Optional[str]:
    """tf_keras's ``compile_config`` (``Model.get_compile_config``) in the legacy ``training_config`` form
    the HDF5 twin carries (``optimizer_config``, ``loss``, ``metrics``, ``weighted_metrics``,
    ``loss_weights``), for :func:`gruconv.keras3.config.compile_config`.  An optimizer given by name
    (``compile(optimizer="adam")``) becomes its class with no arguments: Keras 3's defaults, where the
    HDF5 twin records tf_keras's (the same values, the learning rate rounded to float32 there)."""
    if not isinstance(compile_config, dict) or not compile_config:
        return None
    opt = compile_config.get("optimizer")
    if isinstance(opt, str):
        opt = {"class_name": _OPTIMIZER_NAMES.get(opt.lower(), opt), "config": {}}
    tc = {k: compile_config.get(k) for k in ("loss", "metrics", "weighted_metrics", "loss_weights")}
    tc["optimizer_config"] = opt
    return json.dumps(tc)


# --------------------------------------------------------------------------- registry verbs


def sniff(path: Path) -> bool:
    """A ``.keras`` zip that :func:`gruconv.eligibility.legacy_keras_zip` calls Keras 2's; never raises
    (a damaged zip is left to :mod:`gruconv.readers.keras3`, which says what is wrong)."""
    try:
        if not inputs.is_regular(path) or inputs.head(path, 4) != b"PK\x03\x04":
            return False
        config, meta = zips.read_keras_zip(path)
        return eligibility.legacy_keras_zip(config, meta)
    except (GruconvError, OSError, RecursionError):
        return False


def read(path, options: Optional[Options] = None, **kw) -> TfKerasZipModel:
    """The file's config and the metadata of its weights (shapes, dtypes; values later, on demand)."""
    path = Path(path)
    opts = Options.of(options, **kw)
    if opts.config is not None:
        raise UsageError("--config does not apply to a .keras file: it carries its own config.json", path=path)
    try:
        with about(path):
            return _read(path)
    except RecursionError:
        raise InputError("config.json is nested too deeply", path=path) from None


def _read(path: Path) -> TfKerasZipModel:
    config, meta = zips.read_keras_zip(path)
    if not eligibility.legacy_keras_zip(config, meta):
        raise InputError("not a tf_keras .keras file (metadata.json says Keras 3, and no Keras-2-only layer)")
    if not (isinstance(config, dict) and keras_h5.class_name_of(config)):
        raise InputError("config.json is not a Keras model (no class_name)")
    keras_h5.check_layer_counts(config, path)
    model_config = {k: v for k, v in config.items() if k not in ("compile_config", "build_config")}
    from ..keras3 import config as keras3_config

    cls = keras_h5.class_name_of(model_config)
    if cls not in ("Sequential", "Functional", "Model"):
        raise UnsupportedError(f"top-level {cls}: only Sequential and Functional models are read")
    layers = keras_h5.config_of(model_config).get("layers")
    if not isinstance(layers, list):
        raise InputError("config.json: the model has no layer list")
    tops = [keras_h5.name_of(layer) for layer in layers if isinstance(layer, dict)
            and not (cls == "Sequential" and keras_h5.class_name_of(layer) == "InputLayer")]
    version = meta.get("keras_version")
    doc = TfKerasZipModel(path=path, kind="model", keras_version=version if isinstance(version, str) else None,
                          backend=None, model_config=model_config,
                          training_config=training_config(config.get("compile_config")), layer_names=tops,
                          member=zips.keras_zip_member(path, WEIGHTS))
    where = keras3_config.tf_keras_object_paths(model_config)

    def find(layer, rpath, top, wrapper):
        wrapped = wrapper is not None and keras_h5.class_name_of(wrapper) == "Bidirectional"
        owners = [where[rpath]] + ([where[rpath.rsplit("/", 1)[0] + "/~backward_layer"]] if wrapped else [])
        return [{role: H5Weight(h5safe.resolve(f, f"{owner}/vars/{i}", path, "dataset"), path)
                 for i, role in enumerate(WEIGHT_ROLES)} for owner in owners]

    with _open_member(doc) as f:
        doc.optimizer_weight_count = _count_optimizer(f, path)
        keras_h5.scan_layers(doc, find)
    store = doc.store
    for rnn in doc.rnns:
        rnn.store = store
    return doc


def inspect(doc: TfKerasZipModel) -> dict:
    """The legacy reader's inspect document, saying what this file is."""
    info = keras_h5.inspect(doc)
    ver = f"keras {doc.keras_version}" if doc.keras_version else "keras version unknown"
    info.update(format=FORMAT, summary=f"tf_keras .keras model ({ver}), {len(doc.layer_names)} top-level layer(s)")
    report = eligibility.for_document(doc)
    if report is not None:
        report["format"] = "tf_keras .keras model"
        info["cudnn_eligibility"] = report
    return info


def input_facts(path: Path, opts: Options) -> InputFacts:
    """A tf_keras ``.keras`` zip always holds a model (:class:`~gruconv.model.canonical.InputFacts`)."""
    return InputFacts("graph")


def input_files(path: Path) -> list:
    return [Path(path)]
