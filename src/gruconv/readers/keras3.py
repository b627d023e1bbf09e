"""Keras 3 files: recognised, said to need no conversion, and inspected for cuDNN eligibility.

A Keras 3 model has no cuDNN-only layer to convert (``CuDNNGRU`` and
``CuDNNLSTM`` do not exist in Keras 3: ``keras/src/layers/__init__.py``, 3.15.1), so ``convert``
writes nothing and exits 0, and ``inspect`` answers the question a Keras 3 user still has -- does
each recurrent layer run on cuDNN on TensorFlow, JAX and torch, and if not, why
(:mod:`gruconv.eligibility`).  Three shapes of file, all from Keras 3's own writers:

* ``.keras`` -- a zip (``keras/src/saving/saving_lib.py`` ``_save_model_to_fileobj``) with members
  ``metadata.json``, ``config.json``, ``model.weights.h5`` (``fixtures/keras3/*.keras``).  Sniffed
  from the zip magic and the central directory's member names (the directory's size and entry
  count bounded first, from the end record, before :mod:`zipfile` parses it:
  :func:`gruconv.files.zips.zip_directory`); only ``config.json``
  and ``metadata.json`` are ever inflated, in memory, with their declared sizes and ratio bounded
  (:func:`gruconv.files.zips.read_keras_zip`); nothing is extracted.
* ``.weights.h5`` -- ``Model.save_weights`` (``keras/src/saving/saving_lib.py`` ``H5IOStore``):
  groups ``layers/<snake class>/.../vars`` with datasets ``0, 1, ...`` and a root ``vars`` group,
  no root attributes (``fixtures/keras3/eligible.weights.h5``).  No architecture: eligibility needs
  ``--config`` (``model.to_json()`` or a ``.keras`` ``config.json``), which is checked against the
  file's recurrent cells (kind and units, from the recurrent kernels' shapes) before it is believed.
* ``.h5`` full model written by Keras 3 (``keras/src/legacy/saving/legacy_h5_format.py``): the
  legacy layout with root attribute ``keras_version`` ``3.x`` and a Keras 3 ``model_config``
  (``fixtures/keras3/mixed.keras3.h5``).  A file that names ``CuDNNGRU``/``CuDNNLSTM`` is left to
  :mod:`gruconv.readers.keras_h5` whatever its version attribute says.

Registry verbs as in :mod:`gruconv.readers`; no TensorFlow, Keras, JAX or torch is imported here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .. import eligibility
from ..files import hdf5 as h5safe, inputs, zips
from ..errors import GruconvError, InputError, UsageError, about, first_line
from ..model.canonical import Document, InputFacts
from ..options import Options

FORMAT = "keras3"
#: What this reader reads, for messages.
DESCRIPTION = "a Keras 3 file"
#: ``--config``: the architecture of a ``.weights.h5`` (refused for files that carry their own).
OPTIONS = frozenset({"config"})
#: What its documents hold (:data:`gruconv.model.canonical.CONTENTS`): already Keras 3, nothing to convert.
CONTENTS = ("final",)
#: Input name endings (batch mode's output naming; nothing is ever written for these inputs).
SUFFIXES = (".keras", ".weights.h5")

#: The one line ``convert`` and ``inspect`` say.
#: Never holds anything to convert: batch does not count a Keras 3 file as a convertible input when it
#: decides whether a run found nothing to convert (exit 3, never green on nothing).
CONVERTS = False
NOTHING = "already a Keras 3 file, nothing to convert"
#: HDF5 objects visited while matching a ``.weights.h5`` against ``--config``.
MAX_H5_OBJECTS = 50_000

_ZIP_MAGIC = b"PK\x03\x04"


@dataclass
class Keras3File:
    """What was read: the kind of file, its config (None for weights without ``--config``), and
    the eligibility report when there is a config."""

    path: Path
    kind: str                                   # "keras" | "weights" | "model-h5"
    keras_version: Optional[str] = None
    config: Optional[dict] = None
    config_source: Optional[str] = None         # the --config path, for weights
    cells: list = field(default_factory=list)   # weights: [(path, "GRU"|"LSTM", units)]
    eligibility: Optional[dict] = None

    #: what the document holds (:data:`gruconv.model.canonical.CONTENTS`)
    content = "final"

    def document(self) -> Document:
        """Nothing to convert (``--force`` included: copying a Keras 3 file is not a conversion)."""
        return Document(source=str(self.path), reader=FORMAT, stacks=[], inputs=[Path(self.path)], nothing=True,
                        reason=NOTHING)


# --------------------------------------------------------------------------- zip structure


def _zip_names(path) -> list:
    """Member names of a zip, its directory bounded first (:func:`zip_directory`)."""
    import zipfile

    with inputs.open_regular(path, "a .keras file") as f:
        zips.zip_directory(f, os.fstat(f.fileno()).st_size, path)
        f.seek(0)
        try:
            with zipfile.ZipFile(f) as zf:
                return zf.namelist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
            raise InputError(f"not a readable .keras zip ({e})", path=path) from None


def _is_keras_zip(path: Path) -> bool:
    """Zip magic, and Keras's own members: ``config.json`` with ``model.weights.h5`` (or
    ``metadata.json``).  A zip named ``*.keras`` is claimed whatever it holds, so a damaged or
    hostile one is refused with its reason rather than called "not a model"; an ``.npz`` (also a
    zip) is never claimed."""
    try:
        if inputs.head(path, 4) != _ZIP_MAGIC:
            return False
        if path.name.lower().endswith(".keras"):
            return True
        names = set(_zip_names(path))
    except (GruconvError, OSError):
        return False
    return "config.json" in names and bool(names & {"model.weights.h5", "model.weights.npz", "metadata.json"})


# --------------------------------------------------------------------------- HDF5 structure


def _h5_kind(path: Path) -> Optional[str]:
    """``"weights"`` (Keras 3 ``save_weights``), ``"model-h5"`` (Keras 3 legacy-format ``save``) or
    None (anything else: a legacy Keras file for :mod:`gruconv.readers.keras_h5`).  A damaged file
    is an InputError (h5py raises OSError, RuntimeError, KeyError, ... from a corrupt header)."""
    try:
        return _h5_kind_of(path)
    except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"not a readable HDF5 file ({first_line(e, 200)})", path=path) from None


def _h5_kind_of(path: Path) -> Optional[str]:
    import h5py

    with h5safe.open_hdf5(path, "a Keras HDF5 file") as f:
        if "model_config" in f.attrs:
            version = h5safe.read_attr(f, "keras_version")
            if not (isinstance(version, str) and version.startswith("3.")):
                return None
            raw = h5safe.read_attr(f, "model_config")
            text = raw if isinstance(raw, str) else str(raw)
            if any(c in text for c in eligibility.LEGACY_CUDNN):
                return None
            return "model-h5"
        if "layer_names" in f.attrs or len(f.attrs):
            return None
        top = set(f.keys())
        # the model's own ``vars`` group is always written (saving_lib._save_state: every object with
        # save_own_variables gets ``<path>/vars``, the model's path being the root)
        if top and top <= {"layers", "vars", "optimizer", "_layer_checkpoint_dependencies", "metrics"} \
                and f.get("vars", getclass=True) is h5py.Group:
            return "weights"
    return None


def sniff(path: Path) -> bool:
    """A Keras 3 ``.keras`` zip, ``.weights.h5`` or Keras-3-written full-model ``.h5``; never raises."""
    try:
        if not inputs.is_regular(path):
            return False
        if _is_keras_zip(path):
            return True
        return h5safe.is_hdf5(path) and _h5_kind(path) is not None
    except (GruconvError, OSError, RecursionError):  # _h5_kind turns h5py's own errors into InputError
        return False


def _recurrent_cells(path: Path) -> list:
    """``[(group path, "GRU"|"LSTM", units)]`` for every recurrent cell of a Keras 3 weights file:
    a ``.../cell/vars`` group whose dataset ``1`` (the recurrent kernel, ``GRUCell.build`` /
    ``LSTMCell.build``) is ``(units, 3*units)`` or ``(units, 4*units)``.  Shapes only: no data is read."""
    import h5py

    out, seen = [], [0]

    def visit(name, obj):
        seen[0] += 1
        if seen[0] > MAX_H5_OBJECTS:
            raise InputError(f"weights file holds more than {MAX_H5_OBJECTS} HDF5 objects; refused", path=path)
        if not (isinstance(obj, h5py.Group) and (name == "cell/vars" or name.endswith("/cell/vars"))):
            return None
        rk = obj.get("1", getclass=True)
        if rk is not h5py.Dataset:
            return None
        shape = obj["1"].shape
        if len(shape) == 2 and shape[0] and shape[1] in (3 * shape[0], 4 * shape[0]):
            out.append((name[: -len("/cell/vars")] if "/" in name else "", "GRU" if shape[1] == 3 * shape[0]
                        else "LSTM", int(shape[0])))
        return None

    with h5safe.open_hdf5(path, "a Keras 3 weights file") as f:
        try:
            f.visititems(visit)
        except (OSError, RuntimeError, KeyError, ValueError, TypeError) as e:
            raise InputError(f"weights file cannot be walked ({e})", path=path) from None
    return out


def _config_cells(report: dict) -> Optional[list]:
    """``["GRU(8)", ...]`` for the recurrent layers of an eligibility report, in a comparable form;
    None when the config holds something whose cells cannot be told (a stacked or custom cell)."""
    out = []
    for e in report["layers"]:
        cls = e["class"]
        if cls == "RNN":
            return None
        out.append(f"{eligibility.LEGACY_CUDNN.get(cls, cls)}({e.get('units')})")
    return sorted(out)


# --------------------------------------------------------------------------- registry verbs


def read(path, options: Optional[Options] = None, **kw) -> Keras3File:
    """Read what the file says about its model: the config (never the weights' values)."""
    path = Path(path)
    opts = Options.of(options, **kw)
    if _is_keras_zip(path):
        if opts.config is not None:
            raise UsageError("--config does not apply to a .keras file: it carries its own config.json", path=path)
        config, meta = zips.read_keras_zip(path)
        if eligibility.legacy_keras_zip(config, meta):  # tf_keras's zip: gruconv.readers.tf_keras_zip's
            raise InputError("a tf_keras .keras file (Keras 2 config), not a Keras 3 one", path=path)
        doc = Keras3File(path=path, kind="keras", keras_version=_text(meta.get("keras_version")), config=config)
        doc.eligibility = _evaluate(doc, ".keras", str(path))
        return doc
    kind = _h5_kind(path) if h5safe.is_hdf5(path) else None
    if kind is None:
        raise InputError("not a Keras 3 file (.keras zip, .weights.h5, or Keras 3 .h5 model)", path=path)
    if kind == "model-h5":
        if opts.config is not None:
            raise UsageError("--config does not apply to a full-model .h5: it carries its own model_config",
                             path=path)
        with h5safe.open_hdf5(path, "a Keras HDF5 file") as f:
            config = h5safe.read_json_attr(f, "model_config", path)
            version = _text(h5safe.read_attr(f, "keras_version"))
        doc = Keras3File(path=path, kind=kind, keras_version=version, config=config)
        doc.eligibility = _evaluate(doc, "Keras 3 HDF5 model", str(path))
        return doc
    doc = Keras3File(path=path, kind="weights", cells=_recurrent_cells(path))
    if opts.config is None:
        return doc
    if isinstance(opts.config, dict):
        doc.config, doc.config_source = opts.config, "--config"
    else:
        doc.config = inputs.load_json(Path(opts.config), "an architecture JSON (--config)")
        doc.config_source = str(opts.config)
    rep = _evaluate(doc, "weights + config", f"{path} + {doc.config_source}")
    want = _config_cells(rep)
    have = sorted(f"{k}({u})" for _, k, u in doc.cells)
    if want is not None and want != have:
        raise UsageError(f"--config does not describe this weights file: the config's recurrent layers are "
                         f"{', '.join(want) or 'none'}, the file's cells are {', '.join(have) or 'none'}", path=path)
    doc.eligibility = rep
    return doc


def _text(value) -> Optional[str]:
    return value if isinstance(value, str) else (None if value is None else str(value))


def _evaluate(doc: Keras3File, fmt: str, source: str) -> dict:
    try:
        with about(doc.path):
            rep = eligibility.evaluate(doc.config, legacy=False, source=source)
    except RecursionError:
        raise InputError("model config is nested too deeply", path=doc.path) from None
    rep["format"] = fmt
    if doc.keras_version:
        rep["saved_by_keras"] = doc.keras_version
    return rep


_WHAT = {"keras": "Keras 3 .keras model", "weights": "Keras 3 weights (.weights.h5) without architecture",
         "model-h5": "Keras 3 HDF5 model"}


def inspect(doc: Keras3File) -> dict:
    """The one inspect schema, no cuDNN-only RNNs (``rnns`` empty), plus ``cudnn_eligibility``."""
    ver = f"keras {doc.keras_version}" if doc.keras_version else "Keras version not recorded"
    details = []
    if doc.kind == "weights":
        cells = ", ".join(f"{p or '/'} {k}({u})" for p, k, u in doc.cells) or "none"
        details.append(f"recurrent cells by weight shape: {cells}")
        if doc.config is None:
            details.append("cuDNN eligibility needs the architecture: pass --config (model.to_json() or the "
                           ".keras config.json)")
    return {
        "file": str(doc.path), "format": FORMAT, "kind": doc.kind,
        "summary": f"{_WHAT[doc.kind]} ({ver}): {NOTHING}",
        "rnns": [], "details": details, "keras_version": doc.keras_version,
        "nothing_to_convert": True, "cudnn_eligibility": doc.eligibility,
    }


def input_facts(path: Path, opts: Options) -> InputFacts:
    """Already a Keras 3 file (:class:`~gruconv.model.canonical.InputFacts`): nothing converts."""
    return InputFacts("final")


def input_files(path: Path) -> list:
    return [Path(path)]
