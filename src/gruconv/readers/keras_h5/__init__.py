"""Legacy Keras HDF5 files (Keras 2.x, tf.keras 1.x/2.x, tf_keras): read, and write with GRUs.

File structure (Keras 2 ``keras/engine/saving.py``; tf_keras
``src/saving/legacy/hdf5_format.py``; observed in ``fixtures/keras``, see
``fixtures/README.md``):

* full model: root attrs ``keras_version``, ``backend``, ``model_config``
  (JSON), optional ``training_config``; group ``model_weights`` with attr
  ``layer_names``; one group per top-level layer with attr ``weight_names``
  (``cu_dnngru/kernel:0``, ``bidirectional/forward_cu_dnngru/kernel:0``, and
  for a nested model the inner layers' own names); optional
  ``optimizer_weights``.
* weights only (``save_weights``): ``layer_names`` etc. at the root, no
  ``model_config``.

Reading produces a :class:`KerasH5Model`: the file's structure plus one
:class:`KerasRNN` per ``CuDNNGRU`` or ``CuDNNLSTM``, whose weights are a canonical
:class:`~gruconv.model.canonical.RNNStack` (cell ``gru`` / ``lstm``).  Writing produces the same legacy
format with every ``CuDNNGRU`` replaced by ``GRU(reset_after=True, ...)`` and every
``CuDNNLSTM`` by ``LSTM(...)`` (:data:`CUDNN_CLASSES`), weights in Keras 3
orientation — a file Keras 3's own legacy loader
(``keras.saving.load_model`` / ``Model.load_weights``) accepts; every other
layer, weight and attribute is copied unchanged, byte for byte (``H5Ocopy``).

Code inside a model file is never executed: configs are read as JSON, and a
model with a ``Lambda`` layer (marshalled Python bytecode) is refused as a
``.keras`` target, since building it would run that code; ``--format
h5-weights`` still writes its converted weights, which carry no code.

Registry verbs (:mod:`gruconv.readers`): :func:`sniff`, :func:`read`, :func:`inspect`,
:func:`input_facts`, :func:`input_files`; what a conversion writes is planned by
:mod:`gruconv.writers.planning` from the document's plan facts (:func:`plan_facts`) and the input's
facts, what ``verify`` checks by :mod:`gruconv.verify.subjects` from ``KerasH5Model.content``.  The model read is the Keras-graph passthrough of its
:class:`~gruconv.model.canonical.Document` (:meth:`KerasH5Model.document`): writers that express a
Keras graph read it as data and through its weight store (:class:`gruconv.model.canonical.KerasGraph`:
``store``, :mod:`gruconv.readers.keras_h5.store`; ``legacy_config``, ``other_weights``); the legacy file above is
written by :mod:`gruconv.writers.legacy_graph`, and a Keras 3 model is built from
:func:`gruconv.keras3.config.translate` (:func:`gruconv.writers.keras_route.built`).  The legacy config
mends live in :mod:`gruconv.keras3.legacy`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional


from ...files import hdf5 as h5safe
from ...model.canonical import CELLS, Document, InputFacts, RNNStack, StackShape
from ...model.cudnn_layout import params_size
from ...errors import GruconvError, InputError, UnsupportedError, about, first_line
from ...model.keras_layout import CUDNN_KERAS_CLASS, KERAS3_BIAS_ROWS, WEIGHT_ROLES, describe_keras_layer, from_cudnn, keras3_bias_shape
from ...keras3.legacy import converted_config, keras2_names
from ...model.keras_config import (walk_layers, CONTAINER_CLASSES as _CONTAINER_CLASSES, CUDNN_CLASSES, TARGET_CLASS as _TARGET_CLASS,
                                   class_name_of, code_in, code_label, config_of, layers_of as _layers_of, malformed, name_of)
from ...options import Options
from .store import LegacyStore, first_duplicate, weight_groups, weight_names_of

FORMAT = "keras-h5"
#: What this reader reads, for messages.
DESCRIPTION = "a Keras HDF5 file"
#: The :class:`gruconv.options.Options` fields this reader reads (``--config``: the architecture of
#: a weights-only file); any other given one is refused unless the writer reads it.
OPTIONS = frozenset({"config"})
#: What its documents hold (:data:`gruconv.model.canonical.CONTENTS`): a Keras graph (the model's other layers
#: and config, so the writer keeps the model's own interface), or a weights-only file's layers.
CONTENTS = ("graph", "weights")
#: Input name endings (batch mode names an output after the input without them).
SUFFIXES = (".h5", ".hdf5")

#: The cuDNN class table and the config accessors live with the legacy mends (one copy each).
_class_name, _conf, _name = class_name_of, config_of, name_of


@dataclass
class KerasRNN:
    """One CuDNNGRU or CuDNNLSTM (possibly inside Bidirectional / TimeDistributed / a nested model)."""

    path: str                      # config path, e.g. "encoder/bidirectional/cu_dnngru"
    top_layer: str                 # the top-level layer whose weight group holds it
    config: dict                   # the CuDNNGRU / CuDNNLSTM layer config (Keras 2 form)
    wrapper: Optional[str]         # "Bidirectional", "TimeDistributed" or None
    merge_mode: Optional[str]
    shape: StackShape              # 1 layer; bidirectional when wrapped in Bidirectional
    datasets: list                 # per direction: {role: dataset path} in the weight group
    source: Path = None            # the input the weights are read from (for messages)
    inferred: Optional[str] = None  # weights-only, no class name: how the class was inferred (shapes)
    #: the document's weight store (:class:`gruconv.model.weights.WeightStore`), where :attr:`datasets`
    #: are read on demand (set by the reader once the document is made)
    store: object = field(default=None, repr=False)
    _stack: Optional[RNNStack] = field(default=None, repr=False)

    @property
    def stack(self) -> RNNStack:
        """The canonical weights, read from :attr:`source` when first asked for.

        Reading on demand keeps one layer's weights in memory at a time when
        converting (``write``) and lets ``read`` check a file from its
        metadata alone; :meth:`release` drops them again.
        """
        if self._stack is None:
            self._stack = _load_stack(self)
        return self._stack

    def release(self) -> None:
        self._stack = None

    @property
    def cls(self) -> str:
        """The original layer class, ``CuDNNGRU`` or ``CuDNNLSTM`` (from the shape's cell)."""
        return CUDNN_KERAS_CLASS[self.shape.cell]

    @property
    def name(self) -> str:
        """Its name in a :class:`~gruconv.model.canonical.Document`: the layer's config path."""
        return self.path

    @property
    def options(self) -> dict:
        c = _conf(self.config)
        return {k: bool(c.get(k, False)) for k in ("return_sequences", "return_state", "go_backwards", "stateful")}


@dataclass
class KerasH5Model:
    path: Path
    kind: str                      # "model" or "weights"
    keras_version: Optional[str]
    backend: Optional[str]
    model_config: Optional[dict]
    training_config: Optional[str]
    layer_names: list
    rnns: list = field(default_factory=list)
    optimizer_weight_count: int = 0
    lambdas: list = field(default_factory=list)
    other_gru_layers: list = field(default_factory=list)
    #: the ``--config`` file the architecture came from (None: the file's own, or a dict)
    config_file: Optional[Path] = None
    #: the bytes every stored weight declares (shape x item size, from the headers the layer scan reads:
    #: :func:`scan_groups`), None where no scan counted them.  Why: a writer choosing between assembling in
    #: memory and staging on disk must know the weights' size, and the file's size says nothing about it
    #: when the datasets are compressed (a 5 MB file declaring 1.2 GB of gzip-1 zeros
    #: was assembled in memory, 2.4 GB peak RSS)
    weight_bytes: Optional[int] = None
    #: where the weights are and how they are named: ``"legacy"`` (``model_weights/<layer>`` with
    #: ``weight_names``); tf_keras's ``.keras`` zip has ``"v3"`` (:mod:`gruconv.readers.tf_keras_zip`)
    layout = "legacy"

    @property
    def content(self) -> str:
        """What the document holds (:data:`gruconv.model.canonical.CONTENTS`): a ``"graph"``, or
        ``"weights"`` without an architecture."""
        return "graph" if self.model_config is not None else "weights"

    @property
    def weights_root(self) -> str:
        return "model_weights" if self.kind == "model" else "/"

    # The Keras-graph passthrough (:class:`gruconv.model.canonical.KerasGraph`): what writers that can
    # express a Keras graph ask of it; they never open the input file themselves.

    @property
    def store(self) -> LegacyStore:
        """The stored weights (:class:`gruconv.readers.keras_h5.store.LegacyStore`), opened through every
        guard (:func:`open_model_file`) for each pass."""
        return LegacyStore(self.path, self.kind, self.layer_names, lambda: open_model_file(self.path))

    def legacy_config(self) -> dict:
        """The model config with every CuDNNGRU / CuDNNLSTM replaced by its GRU / LSTM config (still in
        Keras 2 form: :func:`gruconv.keras3.legacy.converted_config`)."""
        return converted_config(self.model_config)

    def document(self) -> Document:
        """The canonical :class:`~gruconv.model.canonical.Document`: the cuDNN layers as stacks (read
        lazily), this model as the Keras graph passthrough, no other tensors; and the plan facts
        (:func:`plan_facts`)."""
        return plan_facts(self, Document(source=str(self.path), reader=FORMAT, stacks=list(self.rnns), graph=self))

    @contextlib.contextmanager
    def other_weights(self):
        """Every stored weight that belongs to no cuDNN layer, as ``[("<layer>/<weight name>", WeightRef)]`` in
        file order, valid inside the block (a writer that carries them beside the converted RNNs, the
        ``torch`` one, streams each in blocks); every stored weight is checked from its header first."""
        ours = {ds for rnn in self.rnns for roles in rnn.datasets for ds in roles.values()}
        with self.store.open() as store:
            refs = []
            for lname in self.layer_names:
                for wname in store.layer_weights(lname):
                    ref = store.weight(lname, wname)
                    ref.check(numeric=False)
                    refs.append((f"{lname}/{wname}", ref))
            yield [(name, ref) for name, ref in refs if ref.name not in ours]


def sniff(path: Path) -> bool:
    if not path.is_file() or not h5safe.is_hdf5(path):
        return False
    return True


def open_model_file(path: Path):
    """Every read of the file goes through :func:`gruconv.files.hdf5.open_hdf5` (regular file, global-heap
    guard, same inode, a budget on the bytes datasets may declare)."""
    return h5safe.open_hdf5(path, "a Keras HDF5 file")


def check_layer_counts(cfg: dict, path) -> None:
    """Refuse, before Keras is imported, a config Keras would take hours to build: more than
    :data:`gruconv.files.inputs.MAX_SEQUENTIAL_LAYERS` layers in one ``Sequential`` or
    :data:`gruconv.files.inputs.MAX_LAYERS` in all (the reasons and measurements are there)."""
    from ...files.inputs import MAX_LAYERS, MAX_SEQUENTIAL_LAYERS

    total = 0
    for layer, lpath, _top, _wrapper in walk_layers(cfg):
        total += 1
        if total > MAX_LAYERS:
            raise InputError(f"model_config has more than {MAX_LAYERS} layers; refused (Keras would take "
                             "too long to build it)", path=path)
    for container, name in [(cfg, "the model")] + [(layer, lpath) for layer, lpath, _t, _w in walk_layers(cfg)]:
        if _class_name(container) == "Sequential" and len(_layers_of(container)) > MAX_SEQUENTIAL_LAYERS:
            raise InputError(
                f"{name} is a Sequential of {len(_layers_of(container))} layers, more than the "
                f"{MAX_SEQUENTIAL_LAYERS} gruconv converts (Keras 3 rebuilds a Sequential once per added "
                "layer: time grows with the square of the count)", path=path)


def _owner_and_role(wname: str) -> tuple:
    parts = wname.split("/")
    role = parts[-1].split(":")[0]
    return parts[:-1], role


def _find_rnn_weights(entries: list, rnn_name: str, wrapper: Optional[str], where: str, path, *,
                      cls: str, wrapper_name: Optional[str] = None) -> list:
    """Per direction, {role: dataset} of one CuDNNGRU/CuDNNLSTM inside its top-level layer's weight list.

    ``TimeDistributed`` stores its wrapped layer's weights under the wrapper's own name
    (``time_distributed/kernel:0``, tf_keras 2.21, seen): ``wrapper_name`` is tried when no
    weight carries the layer's name.
    """
    if wrapper == "Bidirectional":
        owners = [[f"forward_{rnn_name}"], [f"backward_{rnn_name}"]]
    elif wrapper == "TimeDistributed" and wrapper_name:
        owners = [[rnn_name, wrapper_name]]
    else:
        owners = [[rnn_name]]
    out = []
    for names in owners:
        for owner in names:
            found = {}
            for wname, ds in entries:
                parts, role = _owner_and_role(wname)
                if parts and parts[-1] == owner and role in WEIGHT_ROLES:
                    if role in found:
                        raise InputError(f"{where}: two '{role}' weights for {owner}", path=path)
                    found[role] = ds
            if found:
                break
        missing = [r for r in WEIGHT_ROLES if r not in found]
        if missing:
            raise InputError(
                f"{where}: weights {', '.join(missing)} of {cls} {names[0]!r} not found in the weight file",
                path=path,
            )
        out.append(found)
    return out


def _rnn_from_weights(path: Path, rpath: str, top: str, cfg: dict, wrapper_cfg: Optional[dict],
                      found: list) -> KerasRNN:
    """A :class:`KerasRNN` checked from dataset metadata only (shapes, dtypes); values come later."""
    conf = _conf(cfg)
    units = conf.get("units")
    cls = _class_name(cfg)
    cell = CUDNN_CLASSES[cls]  # both callers pass a cuDNN class (a config's, or by_shape's verdict)
    G = CELLS[cell].num_gates
    dims = []
    dtypes = set()
    for d, roles in enumerate(found):
        where = f"{cls} {rpath}" + ("" if len(found) == 1 else f" ({'forward' if d == 0 else 'backward'})")
        shapes = {}
        for role, ds in roles.items():
            try:
                shapes[role], dt = tuple(ds.shape or ()), ds.dtype
            except (OSError, RuntimeError, ValueError, TypeError) as e:
                raise InputError(f"{where}: {role} cannot be read ({first_line(e)})", path=path) from None
            if dt.kind not in "fiub":
                raise InputError(f"{ds.name} has dtype {dt}, expected a numeric tensor", path=path)
            dtypes.add(str(dt.newbyteorder("=")))  # ">f4" is float32 (h5safe.read_dataset makes it native)
        k = shapes["kernel"]
        if len(k) != 2 or k[1] % G or k[1] == 0 or k[0] == 0:
            raise InputError(f"{where}: kernel has shape {k}, expected (input_size, {G}*units)", path=path)
        I, H = k[0], k[1] // G
        for role, expected in (("recurrent_kernel", (H, G * H)), ("bias", (2 * G * H,))):
            if shapes[role] != expected:
                raise InputError(f"{where}: {role} has shape {shapes[role]}, expected {expected}", path=path)
        dims.append((I, H))
    if len(dtypes) != 1:
        raise InputError(f"{cls} {rpath}: weights have mixed dtypes {sorted(dtypes)}", path=path)
    dtype = dtypes.pop()
    if dtype not in ("float16", "float32", "float64"):
        raise InputError(f"{cls} {rpath}: weights have dtype {dtype}, expected a float type", path=path)
    I, H = dims[0]
    if units is not None and units != H:
        raise InputError(f"{cls} {rpath}: config says units={units}, weights have {H}", path=path)
    if len(dims) == 2 and dims[1] != dims[0]:
        raise InputError(f"{cls} {rpath}: forward and backward weights differ in shape", path=path)
    merge = _conf(wrapper_cfg).get("merge_mode", "concat") if wrapper_cfg else None
    wrapper = _class_name(wrapper_cfg) if wrapper_cfg else None
    if conf.get("time_major"):
        raise UnsupportedError(f"{cls} {rpath} has time_major=True, which {_TARGET_CLASS[cell]} does not offer",
                               path=path)
    try:
        shape = StackShape(I, H, 1, len(dims) == 2, "linear", dtype, cell)
    except InputError as e:
        raise InputError(f"{cls} {rpath}: {e.message}", path=path) from None
    return KerasRNN(rpath, top, cfg, wrapper, merge, shape,
                    [{r: ds.name for r, ds in roles.items()} for roles in found], source=path)


def _nonfinite_on_disk(rnn: KerasRNN) -> int:
    """NaN/Inf values among one CuDNNGRU/CuDNNLSTM's stored weights (what ``rnn.stack.nonfinite_count()``
    counts: the canonical weights are these values rearranged), read in row blocks of about 4 MiB.

    Why: ``inspect`` built the canonical stack of every layer only to count, copying each
    layer's weights three times (raw, split, stacked); on the 180 MiB bench model that was most of
    inspect's time and memory.  A finite block sum proves a block holds no NaN/Inf (they propagate
    through a sum; an overflowing sum of finite values only sends it to the exact count)."""
    import numpy as np

    n = 0
    with rnn.store.open() as store:
        for d in range(len(rnn.datasets)):
            for ref in store.rnn(rnn, d).values():
                ref.check()
                if ref.dtype.kind != "f":
                    continue
                for _, x in ref.blocks(h5safe.ROW_BLOCK_BYTES):
                    with np.errstate(all="ignore"):
                        total = x.sum(dtype=np.float32 if x.dtype == np.float16 else None)
                    if not np.isfinite(total):
                        n += int(np.count_nonzero(~np.isfinite(x)))
                    del x
    return n


def _load_stack(rnn: KerasRNN) -> RNNStack:
    """Read one CuDNNGRU/CuDNNLSTM's tensors (through its store) and turn them into canonical weights
    (cuDNN orientation)."""
    path = rnn.source
    params = []
    with rnn.store.open() as store:
        for d in range(len(rnn.datasets)):
            where = f"{rnn.cls} {rnn.path}" + ("" if len(rnn.datasets) == 1 else
                                               f" ({'forward' if d == 0 else 'backward'})")
            arrays = {role: ref.read() for role, ref in store.rnn(rnn, d).items()}
            try:
                params.append(from_cudnn(arrays["kernel"], arrays["recurrent_kernel"], arrays["bias"],
                                         cell=rnn.shape.cell, where=where))
            except InputError as e:
                raise InputError(e.message, path=path) from None
    return RNNStack(rnn.path, rnn.shape, params, provenance={"format": FORMAT, "datasets": rnn.datasets})


def read(path, options: Optional[Options] = None, **kw) -> KerasH5Model:
    """Read a legacy Keras HDF5 model or weights file; ``options.config`` supplies an architecture
    (``model.to_json()``, a path or a dict) for a weights-only file.

    Every problem is a :class:`~gruconv.errors.GruconvError` naming ``path``.
    """
    path = Path(path)
    opts = Options.of(options, **kw)
    config = architecture_of(opts.config)
    try:
        with about(path):
            doc = read_with_config(path, config)
            if opts.config is not None and not isinstance(opts.config, dict):
                doc.config_file = Path(opts.config)
            return doc
    except RecursionError:
        raise InputError("model_config is nested too deeply", path=path) from None


def read_with_config(path: Path, config: Optional[dict]) -> KerasH5Model:
    with open_model_file(path) as f:
        model_config = h5safe.read_json_attr(f, "model_config", path)
        if model_config is not None:
            kind = "model"
            root = h5safe.child(f, "model_weights", path, "group")
        elif h5safe.read_attr(f, "layer_names") is not None:
            kind = "weights"
            root = f
        else:
            raise InputError(
                "HDF5 file has neither a Keras 'model_config' nor Keras weights ('layer_names'): "
                "not a Keras model file", path=path)
        if config is not None:
            model_config = config
        check_model_config(model_config, path)
        layer_names = h5safe.read_attr(root, "layer_names", []) or []
        if isinstance(layer_names, str):
            layer_names = [layer_names]
        if not isinstance(layer_names, list) or not all(isinstance(n, str) for n in layer_names):
            raise InputError("attribute 'layer_names' is not a list of strings", path=path)
        check_layer_names(layer_names, path)
        # a layer whose config has no name gets the one Keras 2 gave it at load time (keras3/legacy.py)
        model_config = keras2_names(model_config, list(layer_names))
        doc = KerasH5Model(
            path=path, kind=kind,
            keras_version=_str_or_none(h5safe.read_attr(root, "keras_version") or h5safe.read_attr(f, "keras_version")),
            backend=_str_or_none(h5safe.read_attr(root, "backend") or h5safe.read_attr(f, "backend")),
            model_config=model_config,
            training_config=_str_or_none(_joined(h5safe.read_attr(f, "training_config"))),
            layer_names=list(layer_names),
        )
        if h5safe.child_exists(f, "optimizer_weights", path):
            ow = h5safe.child(f, "optimizer_weights", path, "group")
            doc.optimizer_weight_count = len(weight_names_of(ow, path))
        scan_groups(doc, weight_groups(root, path, doc.layer_names))
    return doc


def check_model_config(model_config: Optional[dict], path) -> None:
    """A model config (when there is one) names a class, has the shape every later walker relies on
    (:func:`gruconv.model.keras_config.malformed`, checked here before any weight is looked up: a class name
    that is a list otherwise reads as "weights not found", a wrong reason) and is not too large to build."""
    if model_config is not None and not (isinstance(model_config, dict) and _class_name(model_config)):
        raise InputError("model_config is not a Keras model (no class_name)", path=path)
    if model_config is not None:
        check_layer_counts(model_config, path)  # first: it names the entry itself ("... not an object: 42")
        damaged = malformed(model_config)
        if damaged:
            raise InputError(f"model_config not understood: {damaged}", path=path)


def check_layer_names(layer_names: list, path) -> None:
    """The top-level layers with a weight group: no name twice."""
    dup = first_duplicate(layer_names)
    if dup is not None:
        raise InputError(f"attribute 'layer_names' lists {dup!r} twice", path=path)


def scan_groups(doc: KerasH5Model, groups: dict) -> None:
    """Fill ``doc.rnns`` (and, with an architecture, ``doc.lambdas``, ``doc.other_gru_layers``) from the
    stored layer groups ``{top-level layer: [(weight name, WeightRef)]}`` (:class:`gruconv.model.weights.WeightRef`:
    name, shape and dtype are all the scan reads), whatever store they come from: a legacy HDF5 file's
    ``model_weights`` here, a TF2 object checkpoint's bundle (:mod:`gruconv.readers.tf2`).  Each cuDNN layer
    found reads its weights through ``doc.store`` later."""
    path = doc.path
    if doc.model_config is None:
        doc.rnns = _rnns_without_config(path, groups)
    else:
        def find(layer, rpath, top, wrapper):
            cls = _class_name(layer)
            if top not in groups:
                raise InputError(f"{cls} {rpath}: layer {top!r} has no weight group in the file", path=path)
            return _find_rnn_weights(groups[top], _name(layer), _class_name(wrapper) if wrapper else None,
                                     f"{cls} {rpath}", path, cls=cls,
                                     wrapper_name=_name(wrapper) if wrapper else None)

        scan_layers(doc, find)
    doc.weight_bytes = declared_bytes(ref for entries in groups.values() for _, ref in entries)
    store = doc.store
    for rnn in doc.rnns:
        rnn.store = store


def declared_bytes(refs) -> int:
    """The bytes ``refs`` (:class:`gruconv.model.weights.WeightRef`) declare in their headers (shape x item
    size; nothing is read)."""
    import numpy as np

    total = 0
    for ref in refs:
        total += int(np.prod(ref.shape, dtype=np.int64)) * np.dtype(ref.dtype).itemsize
    return total


def scan_layers(doc: KerasH5Model, find: Callable) -> None:
    """Fill ``doc.lambdas``, ``doc.other_gru_layers`` and ``doc.rnns`` from ``doc.model_config``;
    ``find(layer, path, top, wrapper)`` gives each CuDNN layer's weights (per direction ``{role:
    WeightRef}``, checked from their metadata by :func:`_rnn_from_weights`) where the file keeps
    them -- the legacy layout here, the ``.keras`` layout in :mod:`gruconv.readers.tf_keras_zip`.
    ``doc.lambdas``: every place in the config holding code a build would run, a carried-over layer's
    config included (:func:`gruconv.model.keras_config.code_in`, the one search)."""
    doc.lambdas.extend(code_label(p, what) for p, what in code_in(doc.model_config))
    for layer, rpath, top, wrapper in walk_layers(doc.model_config):
        cls = _class_name(layer)
        if cls == "GRU":
            doc.other_gru_layers.append(rpath)
        if cls not in CUDNN_CLASSES:
            continue
        found = find(layer, rpath, top, wrapper)
        doc.rnns.append(_rnn_from_weights(doc.path, rpath, top, layer, wrapper, found))


def _joined(value):
    if isinstance(value, list):
        return "".join(v if isinstance(v, str) else str(v) for v in value)
    return value


def _str_or_none(value) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    return str(value)


def _rnns_without_config(path: Path, groups: dict) -> list:
    """Weights-only file without an architecture: CuDNNGRUs / CuDNNLSTMs recognised by the shapes of
    their weights (:func:`gruconv.readers.keras_h5.by_shape.classify`), never by their names -- libraries saved them
    as ``rnn_1`` and TF2 checkpoints as ``layer_with_weights-N``.  A Bidirectional's halves are the
    owners ``forward_<name>``/``backward_<name>`` (tf_keras HDF5) or ``forward_layer``/``backward_layer``
    (TF2 object names) of one group.  A triple that looks recurrent but fits no row of the shape table
    is refused with the table's reason."""
    from .by_shape import classify

    rnns = []
    for top, entries in groups.items():
        owners: dict = {}
        for wname, ds in entries:
            parts, role = _owner_and_role(wname)
            if parts and role in WEIGHT_ROLES:
                owners.setdefault(tuple(parts), {})[role] = ds
        pairs: dict = {}
        verdicts = {}
        for parts, roles in owners.items():
            if set(roles) != set(WEIGHT_ROLES):
                continue
            v = classify({r: tuple(roles[r].shape or ()) for r in WEIGHT_ROLES})
            if v.cls is None and v.cell is not None:
                raise InputError(f"{top}: weights of {'/'.join(parts)} look recurrent but fit no known layer: "
                                 f"{v.reason}", path=path)
            if not v.is_cudnn:
                continue
            last = parts[-1]
            if last.startswith(("forward_", "backward_")):
                base = "layer" if last in ("forward_layer", "backward_layer") else last.split("_", 1)[1]
                key = parts[:-1] + (base,)
                pairs.setdefault(key, [None, None])[0 if last.startswith("forward_") else 1] = roles
            else:
                key = parts
                pairs.setdefault(key, [roles])
            verdicts.setdefault(key, []).append(v)
        for parts, found in pairs.items():
            vs = verdicts[parts]
            cls = vs[0].cls
            if any(r is None for r in found):
                raise InputError(f"{'/'.join(parts)}: only one direction of a bidirectional {cls} found", path=path)
            if len({v.cls for v in vs}) != 1:
                raise InputError(f"{'/'.join(parts)}: forward and backward halves are different layers "
                                 f"({vs[0].cls}, {vs[1].cls})", path=path)
            name = parts[-1] if parts[-1] != "layer" or len(parts) == 1 else parts[-2]
            rpath = top if name in (top, "layer") else f"{top}/{name}"
            fake_cfg = {"class_name": cls, "config": {"name": name}}
            wrapper = {"class_name": "Bidirectional", "config": {}} if len(found) == 2 else None
            rnn = _rnn_from_weights(path, rpath, top, fake_cfg, wrapper, found)
            rnn.inferred = vs[0].reason
            rnns.append(rnn)
    return rnns


# --------------------------------------------------------------------------- registry verbs

def architecture_of(config) -> Optional[dict]:
    """``--config``: a dict as given, or a JSON file read through :mod:`gruconv.files.inputs` (size and
    nesting bounded)."""
    if config is None or isinstance(config, dict):
        return config
    from ...files.inputs import load_json

    return load_json(Path(config), "an architecture JSON (--config)")


def _kind(rnn: KerasRNN) -> str:
    return rnn.cls if rnn.wrapper is None else f"{rnn.wrapper}({rnn.cls})"


def _rnn_entry(rnn: KerasRNN, nonfinite: Optional[int] = None) -> dict:
    """One CuDNNGRU / CuDNNLSTM in the inspect / convert schema (``gruconv.options``).

    ``nonfinite`` None: count NaN/Inf by reading this layer's weights now (inspect), then let them go.
    """
    if nonfinite is None:
        nonfinite = rnn.stack.nonfinite_count() if rnn._stack is not None else _nonfinite_on_disk(rnn)
        rnn.release()
    opts = {k: v for k, v in rnn.options.items() if v}
    return {
        "name": rnn.path, "cell": rnn.shape.cell, "kind": _kind(rnn), "shape": rnn.shape.to_dict(),
        "params": params_size(rnn.shape), "nonfinite_weights": nonfinite,
        "converts_to": describe_keras_layer(rnn.shape, opts, rnn.wrapper, rnn.merge_mode),
        "options": opts, "merge_mode": rnn.merge_mode, "details": _cell_details(rnn),
    }


def _cell_details(rnn: KerasRNN) -> list:
    """Per-cell notes for reports: an LSTM's single bias is cuDNN's two biases summed
    (:func:`gruconv.model.keras_layout.to_keras_lstm`), exact but for the one rounding of the sum."""
    notes = [f"class: {rnn.inferred}"] if rnn.inferred else []
    if KERAS3_BIAS_ROWS[rnn.shape.cell] == 2:  # both biases kept: nothing summed
        return notes
    return notes + [f"bias: cuDNN's input and recurrent biases summed in float64, rounded once to {rnn.shape.dtype} "
            "(LSTM has one bias; at most half an ulp per bias value)"]


def inspect(doc: KerasH5Model) -> dict:
    """The inspect document (one schema for every format: ``file``, ``format``, ``summary``, ``rnns``)."""
    what = "Keras HDF5 model" if doc.kind == "model" else "Keras HDF5 weights (no architecture)"
    ver = f"keras {doc.keras_version}" if doc.keras_version else "keras version unknown"
    details = []
    if not doc.rnns:
        details.append("no CuDNNGRU or CuDNNLSTM layers: nothing to convert")
    if doc.lambdas:
        what = "Lambda layers" if all(" (" not in l for l in doc.lambdas) else "layers holding code"
        details.append(f"{what} (refused by convert): {', '.join(doc.lambdas)}")
    custom = _custom_layer_entries(doc)
    for c in custom:
        weights = ", ".join(f"{w['name']} {tuple(w['shape'])} {w['dtype']}" for w in c["weights"]) or "no weights"
        details.append(f"custom layer {c['path']} ({c['class']}): {weights}; {c['convert']}")
    if doc.optimizer_weight_count:
        details.append(f"optimizer state: {doc.optimizer_weight_count} tensors (dropped by convert)")
    model_name = None
    if isinstance(doc.model_config, dict) and isinstance(doc.model_config.get("config"), dict):
        model_name = doc.model_config["config"].get("name")
    return {
        "file": str(doc.path), "format": FORMAT, "kind": doc.kind,
        "summary": f"{what} ({ver}), {len(doc.layer_names)} top-level layer(s)",
        "rnns": [_rnn_entry(r) for r in doc.rnns],
        "details": details,
        "keras_version": doc.keras_version, "backend": doc.backend, "model_name": model_name,
        "layers": len(doc.layer_names),
        "plain_gru_layers": doc.other_gru_layers, "lambda_layers": doc.lambdas, "custom_layers": custom,
        "optimizer_weights": doc.optimizer_weight_count,
        "training_config": doc.training_config is not None,
    }


def input_facts(path: Path, opts: Options) -> InputFacts:
    """What ``path`` holds, read from its attributes alone (:class:`~gruconv.model.canonical.InputFacts`):
    a weights-only file (and no ``--config``) is ``"weights"``, anything else a ``"graph"``."""
    if opts.config is not None:
        return InputFacts("graph")
    try:
        with open_model_file(Path(path)) as f:
            weights_only = "model_config" not in f.attrs and "layer_names" in f.attrs
    except GruconvError:
        weights_only = False  # the conversion itself reports what is wrong
    return InputFacts("weights" if weights_only else "graph")


def input_files(path: Path) -> list:
    """Every file a conversion of ``path`` reads (for output-vs-input checks)."""
    return [Path(path)]


def custom_classes(doc: KerasH5Model) -> dict:
    """``{class name: [layer path, ...]}`` of the model's custom layers (:func:`gruconv.keras3.builtins.custom_classes`
    over its config)."""
    from ...keras3.builtins import custom_classes as of_config

    return of_config(doc.model_config)


def _custom_layer_entries(doc: KerasH5Model) -> list:
    """Per custom layer (:func:`custom_classes`): its path, class, stored weights (name, shape, dtype, read
    from dataset headers only) and what ``convert`` does with it, for ``inspect``."""
    entries = []
    custom = custom_classes(doc)
    if not custom:
        return entries
    with open_model_file(doc.path) as f:
        root = h5safe.child(f, "model_weights", doc.path, "group") if doc.kind == "model" else f
        for cls, paths in custom.items():
            for rpath in paths:
                parts = rpath.split("/")
                weights = []
                if parts[0] in doc.layer_names:
                    group = h5safe.child(root, parts[0], doc.path, "group")
                    for wname in weight_names_of(group, doc.path):
                        owners, _role = _owner_and_role(wname)
                        if len(parts) == 1 or parts[-1] in owners:
                            ds = h5safe.resolve(group, wname, doc.path, "dataset")
                            weights.append({"name": wname, "shape": list(ds.shape or ()),
                                            "dtype": str(ds.dtype.newbyteorder("="))})
                if len(parts) > 1 and weights:
                    what = ("not carried over into .keras / .weights.h5 (a custom layer with weights inside a "
                            "nested model or wrapper); the .h5 weights output copies its weights as they are")
                else:
                    what = (f"convert carries it over into .keras / .weights.h5 as it is (config unchanged, "
                            f"{len(weights)} weight(s) in stored order) and warns that loading needs "
                            f'custom_objects={{"{cls}": <your Keras 3 class>}}; the .h5 weights output copies '
                            "them as they are")
                entries.append({"path": rpath, "class": cls, "weights": weights, "convert": what})
    return entries


def plan_facts(doc: KerasH5Model, d: Document) -> Document:
    """The plan facts of a Keras graph document (:class:`~gruconv.model.canonical.Document`): its
    files, its layers' names, the notes a conversion gives, and how each layer is reported."""
    d.inputs = [Path(doc.path)] + ([Path(doc.config_file)] if doc.config_file is not None else [])
    d.names = [rnn.path for rnn in doc.rnns]
    d.nothing = not doc.rnns
    d.nothing_forced = True  # --force writes a model with no cuDNN layer anyway
    d.row = lambda i, nonfinite=None: _rnn_entry(doc.rnns[i], nonfinite)
    for rnn in doc.rnns:
        conf = rnn.config.get("config") if isinstance(rnn.config, dict) else None
        if isinstance(conf, dict) and conf.get("bias_constraint"):
            G = rnn.shape.gates
            new = "(" + ", ".join(map(str, keras3_bias_shape(rnn.shape.cell, "units"))) + ("," if KERAS3_BIAS_ROWS[rnn.shape.cell] == 1 else "") + ")"
            d.notes.append(
                f"{rnn.path}: bias_constraint carried over, but {_TARGET_CLASS[rnn.shape.cell]}'s bias is {new} "
                f"where {rnn.cls}'s was ({2 * G}*units,): an axis-based constraint (e.g. MaxNorm) acts "
                "differently if you train further")
    if doc.optimizer_weight_count:
        d.notes.append(
            f"optimizer state ({doc.optimizer_weight_count} tensors) dropped: its slots follow the cuDNN layers' "
            "weight layout; the converted model starts with a fresh optimizer")
    return d
