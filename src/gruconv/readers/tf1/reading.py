"""Reading TF 1.x ``tf.contrib.cudnn_rnn`` checkpoints: find the stacks, cross-check, solve, inspect.

Input: a TensorBundle V2 checkpoint (read with :mod:`gruconv.readers.tfbundle`, no
TensorFlow).  Where the keys sit: :mod:`.names`; what the canonical cell
tensors hold: :mod:`.cells`.

TensorFlow never hard-coded the opaque layout (it asked cuDNN for every
region's address), so a buffer has the layout of the cuDNN it ran with.
Canonical tensors therefore define the weights when present; the buffer is
unpacked with :func:`gruconv.model.cudnn_layout.unpack` (cuDNN 9.19 layout) and
compared with them — a disagreement is the sign of a buffer from another
cuDNN generation.  A buffer without canonical tensors (skip-input stacks, the
TF 1.4 ops API) has no stored shape: it is solved from its size and the
user's hints (:func:`gruconv.model.cudnn_layout.solve_shapes`), over the cell its
layer scope names (``cudnn_gru``, ``cudnn_lstm``) or the ``cell`` hint, else
over every cell.

An opaque buffer is a 1-D float tensor named ``opaque_kernel``, the tensor a
``variable`` hint names, or one matched to a canonical group by size.  Keys
that start with ``<buffer key>/`` are its optimizer slots (``/Adam``,
``/Adam_1``, ``/Momentum`` ...): raw opaque buffers, dropped by ``convert``.

:func:`inspect` and :func:`read` never import TensorFlow or Keras; they read
the index, the canonical tensors and the opaque buffers, nothing else.  Data
are memory-mapped read-only views (crc32c checked on first use, never
copied): an opaque buffer's pseudo-layer matrices are one view each, and a
stack defined by canonical tensors takes its matrices from those views when
the cross-check found them bit for bit equal (else from copies of the
canonical blocks); mapped pages are dropped from RSS after each cell.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from ...model.canonical import Document, GateParams, InputFacts, RNNStack, StackShape
from ...model.cudnn_layout import iter_matrix_regions, params_size, solve_shapes
from ...errors import GruconvError, InputError, UnsupportedError, UsageError
from ...model.keras_layout import describe_keras_stack
from ...options import Options
from .. import tfbundle
from .cells import TF_CELLS, ShapeMismatch, expected_blocks, to_params
from .names import (DATA_RE, FLOATS, FORMAT, HDF5_MAGIC, TABLE_MAGIC, Group, find_groups, layer_kind,
                    natural_key, scope_of_buffer, style_text, under)

_HINT_KEYS = ("num_units", "input_size", "num_layers", "direction", "input_mode", "variable", "cell",
              "forget_bias")
_SHAPE_HINTS = ("num_units", "input_size", "num_layers", "direction", "input_mode", "cell")

CANDIDATES_SHOWN = 10


# --------------------------------------------------------------------------- data model


@dataclass
class CrossCheck:
    """Opaque buffer vs canonical tensors.  ``status``: agree | disagree | no canonical | not checked."""

    status: str
    max_abs_diff: Optional[float] = None
    where: Optional[str] = None
    detail: str = ""

    def to_dict(self) -> dict:
        return {"status": self.status, "max_abs_diff": self.max_abs_diff, "where": self.where,
                "detail": self.detail}

    def text(self) -> str:
        if self.status == "agree":
            return f"agree (opaque buffer unpacked in cuDNN 9.19 layout = canonical tensors, " \
                   f"max abs diff {self.max_abs_diff:g})"
        if self.status == "disagree":
            at = f" at {self.where}" if self.where else ""
            diff = f"max abs diff {self.max_abs_diff:.6g}{at}" if self.max_abs_diff is not None else self.detail
            return f"DISAGREE: {diff}; the opaque buffer is not in cuDNN 9.19 layout " \
                   f"(written by another cuDNN generation?)"
        if self.status == "no canonical":
            return "no canonical tensors: weights from the opaque buffer, cuDNN 9.19 layout assumed"
        return f"not checked ({self.detail})" if self.detail else "not checked"


@dataclass
class CheckpointStack:
    """One cuDNN RNN stack (GRU or LSTM) found in a checkpoint.

    ``stack`` is None when its shape is ambiguous (``candidates`` lists the
    fits) or unknown (no shape fits the buffer size).
    """

    scope: str
    stack: Optional[RNNStack]
    source: str
    style: str                              # "1.5", "1.4", "1.3" or "opaque-only"
    cell: Optional[str] = None              # "gru" | "lstm"; None: not known (opaque-only, no hint)
    opaque_key: Optional[str] = None
    opaque_size: Optional[int] = None
    opaque_dtype: Optional[str] = None
    canonical_keys: list = field(default_factory=list)
    cross_check: CrossCheck = field(default_factory=lambda: CrossCheck("not checked"))
    candidates: list = field(default_factory=list)   # StackShape, for opaque-only buffers
    slots: list = field(default_factory=list)        # optimizer slots of the opaque buffer
    canonical_params: Optional[list] = None          # GateParams from canonical tensors, if any
    opaque_params: Optional[list] = None             # GateParams unpacked from the buffer, if any
    _shape: Optional[StackShape] = field(default=None, repr=False)   # from the canonical tensors
    _cells: Optional[dict] = field(default=None, repr=False)         # (layer, dir) -> {name: key}
    _group: Optional[object] = field(default=None, repr=False)
    _error: Optional[Exception] = field(default=None, repr=False)    # raised if this stack is selected
    _nonfinite: Optional[int] = field(default=None, repr=False)      # NaN/Inf among the stack's weights

    @property
    def shape(self) -> Optional[StackShape]:
        return None if self.stack is None else self.stack.shape

    @property
    def keys(self) -> list:
        """Every checkpoint key this stack accounts for (buffer, canonical tensors, slots)."""
        return ([self.opaque_key] if self.opaque_key else []) + list(self.canonical_keys) + list(self.slots)

    def converts_to(self) -> Optional[str]:
        return _converts_to(self.shape)


@dataclass
class CheckpointDoc:
    """What :func:`read` found: the stacks, and every other tensor's key."""

    path: str
    prefix: str
    num_shards: int
    tensor_count: int
    total_bytes: int
    stacks: list
    other_keys: list
    other_bytes: int
    possible_buffers: list = field(default_factory=list)   # {key, size, dtype} worth a --variable
    warnings: list = field(default_factory=list)
    reader: object = field(default=None, repr=False, compare=False)
    prefer: Optional[str] = None                           # --prefer: where the weights were taken from

    #: what the document holds (:data:`gruconv.model.canonical.CONTENTS`)
    content = "stacks"

    def require_shape(self, entry: CheckpointStack) -> None:
        """The one-line refusal of ``entry`` when its shape is ambiguous or unknown (:func:`require_shape`)."""
        require_shape(entry, self.reader.where)

    def opaque_buffer(self, entry: CheckpointStack) -> Optional[np.ndarray]:
        """``entry``'s stored opaque buffer, copied out of the mapped bundle (None: it has none)."""
        if not entry.opaque_key:
            return None
        buf = np.array(self.reader.view(entry.opaque_key))
        self.reader.release()
        return buf

    def document(self) -> Document:
        """The canonical :class:`~gruconv.model.canonical.Document` writers consume: the stacks, no Keras
        graph, the other tensors (read as mapped views), the reader's warnings; and the plan facts
        (:func:`gruconv.writers.planning.plan` decides from them)."""
        r = self.reader
        d = Document(source=str(self.path), reader=FORMAT, stacks=list(self.stacks),
                     other_tensors=list(self.other_keys), view=r.view, release=r.release,
                     warnings=list(self.warnings))
        d.inputs = input_files(self.path)
        d.names = [e.scope for e in self.stacks]
        d.stack_word = cells_text(self.stacks)
        d.nothing = not self.stacks
        d.row = lambda i, nonfinite=None: rnn_entry(self.stacks[i])
        if not self.stacks and self.possible_buffers:
            cand = ", ".join(f"{p['key']} ({p['size']} {p['dtype']} values)" for p in self.possible_buffers[:5])
            d.refusal = UsageError(f"no cuDNN GRU or LSTM stack identified (no opaque_kernel, no canonical cell "
                                   f"tensors); "
                                   f"1-D tensors that may be an opaque buffer: {cand}. Pass --variable KEY and "
                                   f"shape hints (--num-units, --input-size, --num-layers, --direction, "
                                   f"--input-mode)", path=r.where)
            return d
        try:
            for e in self.stacks:
                require_shape(e, r.where)
        except GruconvError as e:
            d.refusal = e
            return d
        d.notes = self._notes()
        return d

    def _notes(self) -> list:
        """What a conversion says beyond the reader's warnings: low-precision stacks, a buffer that
        disagrees with the canonical tensors, optimizer slots dropped."""
        from ...keras3.runtime import LOW_PRECISION_NOTE

        notes = []
        half = [e.scope for e in self.stacks if e.stack.shape.dtype in ("float16", "bfloat16")]
        if half:
            notes.append(LOW_PRECISION_NOTE.format(layers=", ".join(half)))
        for e in self.stacks:
            cc = e.cross_check
            if cc.status == "disagree":
                used = "opaque buffer" if self.prefer == "opaque" else "canonical tensors"
                diff = (f"max abs diff {cc.max_abs_diff:.6g} at {cc.where}" if cc.max_abs_diff is not None
                        else cc.detail)
                notes.append(
                    f"{e.scope}: opaque buffer {e.opaque_key!r} disagrees with the canonical tensors ({diff}); "
                    f"it is not in cuDNN 9.19 layout. Weights taken from the {used}")
            if e.slots:
                notes.append(
                    f"{e.scope}: optimizer slots of the opaque buffer dropped (they follow the cuDNN layout; the "
                    f"converted model starts with a fresh optimizer): {', '.join(e.slots)}")
        return notes


def _converts_to(shape: Optional[StackShape]) -> Optional[str]:
    return None if shape is None else describe_keras_stack(shape)


# --------------------------------------------------------------------------- sniff


def sniff(path) -> bool:
    """True for a checkpoint directory, ``.index`` / ``.data-*`` file, or a prefix whose ``.index`` exists."""
    try:
        p = Path(os.fspath(path))
        if p.is_dir():
            from ..tfbundle import saved_model_variables

            return ((p / "checkpoint").is_file() or any(i.is_file() for i in p.glob("*.index"))
                    or saved_model_variables(p) is not None)
        if p.is_file():
            with open(p, "rb") as f:
                head = f.read(8)
            if head == HDF5_MAGIC:
                return False
            if p.name.endswith(".index"):
                size = p.stat().st_size
                if size < 48:
                    return False
                with open(p, "rb") as f:
                    f.seek(size - 8)
                    return f.read(8) == TABLE_MAGIC
            if DATA_RE.match(p.name) or p.name.endswith(".meta"):
                return True
        return Path(str(p) + ".index").is_file()
    except (OSError, ValueError):
        return False


# --------------------------------------------------------------------------- hints


def _norm_hints(hints: Optional[dict]) -> dict:
    out = {}
    for k, v in (hints or {}).items():
        if v is None:
            continue
        if k not in _HINT_KEYS:
            raise UsageError(f"unknown hint {k!r}; expected one of {', '.join(_HINT_KEYS)}")
        if k in ("num_units", "input_size", "num_layers"):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise UsageError(f"hint {k} must be a positive integer, got {v!r}")
            v = int(v)
        elif k == "direction":
            v = {"uni": "uni", "unidirectional": "uni", "bi": "bi", "bidirectional": "bi"}.get(str(v))
            if v is None:
                raise UsageError(f"hint direction must be 'uni' or 'bi', got {hints[k]!r}")
        elif k == "input_mode":
            v = {"linear": "linear", "linear_input": "linear", "skip": "skip", "skip_input": "skip"}.get(str(v))
            if v is None:
                raise UsageError(f"hint input_mode must be 'linear' or 'skip', got {hints[k]!r}")
        elif k == "variable":
            v = str(v)
        elif k == "cell":
            v = str(v).lower()
            if v not in TF_CELLS:
                raise UsageError(f"hint cell must be one of {', '.join(TF_CELLS)}, got {hints[k]!r}")
        elif k == "forget_bias":
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not np.isfinite(v):
                raise UsageError(f"hint forget_bias must be a finite number, got {v!r}")
            v = float(v)
            if v == 0.0:
                continue  # cuDNN's own (no forget bias): nothing to add
        out[k] = v
    return out


def _hint_text(h: dict) -> str:
    shown = {k: v for k, v in h.items() if k in _SHAPE_HINTS}
    return ", ".join(f"{k}={v}" for k, v in shown.items()) or "no shape hints"


def _shape_hints(h: dict) -> dict:
    return {
        "units": h.get("num_units"),
        "input_size": h.get("input_size"),
        "num_layers": h.get("num_layers"),
        "bidirectional": None if "direction" not in h else h["direction"] == "bi",
        "input_mode": h.get("input_mode"),
        "cell": h.get("cell"),
    }


def _hint_conflicts(shape: StackShape, h: dict) -> list:
    out = []
    for hint, attr in (("num_units", "units"), ("input_size", "input_size"), ("num_layers", "num_layers"),
                       ("input_mode", "input_mode")):
        if hint in h and h[hint] != getattr(shape, attr):
            out.append(f"{hint}={h[hint]} (stored: {getattr(shape, attr)})")
    if "cell" in h and h["cell"] != shape.cell:
        out.append(f"cell={h['cell']} (stored: {shape.cell})")
    if "direction" in h and (h["direction"] == "bi") != shape.bidirectional:
        out.append(f"direction={h['direction']} (stored: {'bi' if shape.bidirectional else 'uni'})")
    return out


# --------------------------------------------------------------------------- reading helpers


class _Reader:
    """A bundle plus the error context (file) for messages.

    Tensors are read as read-only views of the memory-mapped data file
    (:meth:`gruconv.readers.tfbundle.Bundle.view`): no copies, crc32c verified on the
    first read of each.  :meth:`release` drops the mapped pages from the
    process's RSS between stages (they come back from the page cache)."""

    def __init__(self, path):
        self.bundle = tfbundle.open_bundle(path)
        self.where = str(self.bundle.index_path)
        self.cache: dict = {}

    def info(self, key):
        return self.bundle.info(key)

    def read(self, key) -> np.ndarray:
        if key not in self.cache:
            self.cache[key] = self.bundle.view(key)
        return self.cache[key]

    def release(self) -> None:
        self.bundle.release()

    def view(self, key) -> np.ndarray:
        """One tensor as a mapped view, not cached (a writer copying it straight from the file's
        pages; :class:`gruconv.errors.UnsupportedError` for a dtype the bundle cannot map)."""
        return self.bundle.view(key)

    def error(self, message: str, cls=InputError) -> GruconvError:
        return cls(message, path=self.where)


def _is_float_vector(info) -> bool:
    return info.dtype in FLOATS and len(info.shape) == 1 and not info.slices



def _canonical_shape(r: _Reader, g: Group) -> tuple:
    """Validate a canonical group from the index alone; return (StackShape, {(layer, dir): {name: key}}).

    Every tensor's shape comes from the cell's table (:mod:`.cells`)."""
    spec = g.spec
    title = spec.title
    scope = g.scope or "(root)"
    D = 2 if g.bidirectional else 1
    for (layer, d, name) in sorted(g.tensors):
        if name in spec.refused:
            k = g.tensors[layer, d, name]
            shp = list(r.info(k).shape)
            raise r.error(f"scope {scope!r} has {k!r} {shp}: {spec.refused[name]}", UnsupportedError)
    layers = sorted({layer for (layer, _, _) in g.tensors})
    if layers != list(range(len(layers))):
        missing = sorted(set(range(max(layers) + 1)) - set(layers))
        raise r.error(f"canonical {title} tensors of scope {scope!r}: layer(s) {missing} missing "
                      f"(found cell_{', cell_'.join(map(str, layers))})")
    L = len(layers)

    def key_of(layer, d, name):
        k = g.tensors.get((layer, d, name))
        if k is None:
            raise r.error(f"canonical {title} tensor '{g.where(layer, d)}/{name}' is missing (the other tensors "
                          f"of scope {scope!r} are present)")
        return k

    first = r.info(key_of(0, 0, spec.units_from[0]))
    dtype = first.dtype
    if dtype not in FLOATS:
        raise r.error(f"tensor {first.key!r} has dtype {dtype}; cuDNN {title} weights must be float16, "
                      f"float32 or float64", UnsupportedError if dtype == "bfloat16" else InputError)
    try:
        H, I = spec.detect(lambda name: r.info(key_of(0, 0, name)).shape)
    except ShapeMismatch as e:
        raise r.error(f"tensor {key_of(0, 0, e.name)!r} has shape {e.shape}, expected {e.expected}") from None
    try:
        shape = StackShape(I, H, L, g.bidirectional, "linear", dtype, spec.cell)
    except InputError as e:
        raise r.error(f"canonical {title} tensors of scope {scope!r}: {e.message}") from None

    cells = {}
    names = spec.names + (spec.tf13_names if g.has_tf13_biases else ())
    for layer in range(L):
        expect = spec.expected_shapes(shape.layer_input_size(layer), H)
        for d in range(D):
            cell = {}
            for name in names:
                k = key_of(layer, d, name)
                info = r.info(k)
                if info.dtype != dtype:
                    raise r.error(f"tensor {k!r} has dtype {info.dtype}, but {first.key!r} has {dtype}; "
                                  f"all tensors of one {title} stack share a dtype")
                if tuple(info.shape) != expect[name]:
                    raise r.error(f"tensor {k!r} has shape {list(info.shape)}, expected "
                                  f"{list(expect[name])} (layer {layer} of a stack with input size {I}, "
                                  f"{H} units, {'bi' if D == 2 else 'uni'}directional)")
                cell[name] = k
            cells[layer, d] = cell
    return shape, cells


def _unpack_views(buffer: np.ndarray, shape: StackShape) -> list:
    """:func:`gruconv.model.cudnn_layout.unpack` without copies: each pseudo-layer's G gate matrices
    (and biases) lie next to each other in the buffer, so each ``(G, H, in)`` stack is one view."""
    flat = buffer.reshape(-1)
    expected = params_size(shape)
    if flat.size != expected:
        raise InputError(f"opaque buffer has {flat.size} values, a {shape.describe()} {shape.cell_spec.title} "
                         f"needs {expected}")
    G = shape.gates
    regions: dict = {}
    for p, kind, lin, offset, dims in iter_matrix_regions(shape):
        regions.setdefault((p, kind, lin >= G), []).append((offset, dims))

    def gates(p, kind, recurrent):
        parts = regions.get((p, kind, recurrent))
        if parts is None:
            return None
        (first, dims), n = parts[0], int(np.prod(parts[0][1]))
        if len(parts) == G and all(o == first + g * n and d == dims for g, (o, d) in enumerate(parts)):
            return flat[first:first + G * n].reshape((G,) + tuple(dims))
        return np.stack([flat[o:o + n].reshape(d) for o, d in parts])  # pragma: no cover - not cuDNN 9.19

    return [GateParams(input_weights=gates(p, "matrix", False), recurrent_weights=gates(p, "matrix", True),
                       input_bias=gates(p, "bias", False), recurrent_bias=gates(p, "bias", True))
            for p in range(shape.num_pseudo_layers)]


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality of two same-dtype arrays, compared in 16-column tiles.

    The canonical tensors are row-major ``[in, H]`` blocks and the buffer's
    matrices their transposes: comparing whole blocks walks one of them
    column-wise through memory; 16-column tiles keep both sides in cache
    (about 4x faster) and allocate only a tile-sized temporary."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    u = np.dtype(f"u{a.dtype.itemsize}")
    a, b = a.view(u), b.view(u)
    if a.ndim != 2 or a.size < 1 << 16:
        return bool(np.array_equal(a, b))
    for j in range(0, a.shape[1], 16):
        if not np.array_equal(a[:, j:j + 16], b[:, j:j + 16]):
            return False
    return True


def _nonfinite(p: GateParams, release=None) -> int:
    """NaN/Inf values among one pseudo-layer's weights (as RNNStack.nonfinite_count counts them);
    ``release`` (the reader's) after each array, so one array of the mapped file is resident at a time.

    A finite sum proves there are none (NaN and Inf propagate through a sum;
    an overflowing sum of finite values only sends it to the exact count), so
    the common case is one fast reduction per array."""
    n = 0
    for a in p.arrays().values():
        with np.errstate(all="ignore"):
            total = a.sum(dtype=np.float32 if a.dtype == np.float16 else None)
        if not np.isfinite(total):
            n += int(np.count_nonzero(~np.isfinite(a)))
        if release is not None:
            release()
    return n



class _CrossCheck:
    """Compare every canonical tensor with the same values in the unpacked buffer, cell by cell.

    The blocks compared come from the cell's table (:func:`.cells.expected_blocks`).  Matrices and
    separate biases must be identical; a summed bias may differ by the rounding of the sum (2 ulp).
    Reports the largest absolute difference and where it is (tensor key and index).  Every value is
    compared, on the mapped views (no copies)."""

    def __init__(self, dtype, spec):
        self.dtype = np.dtype(dtype)
        self.spec = spec
        self.worst, self.where, self.ok = 0.0, None, True

    def cell(self, t: dict, keys: dict, p: GateParams, n_in: int, H: int, release=None) -> bool:
        """Compare one cell; return True if its matrices are bit-for-bit the buffer's.  ``release`` (the
        reader's) runs after each block: one block of a tensor and of the buffer are resident at a time."""
        identical = True
        blocks = expected_blocks(self.spec, p, n_in, H, self.dtype)
        for name, key in keys.items():
            theirs = t[name]
            for b, idx, mine in blocks[name]:
                part = theirs[idx]
                same = _same_bits(part, mine)
                if not same:
                    if b.is_matrix:
                        identical = False
                    if not np.array_equal(part, mine):  # else +0 vs -0
                        self._differ(b.field == "bsum", key, idx, part, mine)
                del part
                if release is not None:
                    release()
        return identical

    def _differ(self, summed, key, idx, part, mine) -> None:
        a, b = part.astype(np.float64), mine.astype(np.float64)
        with np.errstate(invalid="ignore"):
            diff = np.where(np.isnan(a) & np.isnan(b), 0.0, np.abs(a - b))
        diff = np.where(np.isnan(diff), np.inf, diff)
        if summed:
            allowed = 2 * np.spacing(np.maximum(np.abs(part), np.abs(mine)).astype(self.dtype))
            bad = bool(np.any(diff > allowed.astype(np.float64)))
        else:
            bad = bool(np.any(diff > 0))
        self.ok &= not bad
        i = int(np.argmax(diff))
        m = float(diff.reshape(-1)[i])
        if m > self.worst or (bad and self.where is None):
            self.worst = m
            pos = np.unravel_index(i, diff.shape)
            pos = [s.start + q if s.start else q for s, q in zip(idx, pos)]
            self.where = f"{key}[{', '.join(map(str, pos))}]"

    def result(self) -> CrossCheck:
        if self.ok:
            return CrossCheck("agree", self.worst, None)
        return CrossCheck("disagree", self.worst, self.where)


# --------------------------------------------------------------------------- read


def read(path, options: Optional[Options] = None, **kw) -> CheckpointDoc:
    """Find every cuDNN GRU and LSTM stack in a TF 1.x checkpoint and read its weights (no TensorFlow).

    Stacks are found from the index alone; then ``options.rnn`` (a scope or
    buffer key), else a ``variable`` hint, selects among them, and only the
    selected stacks' tensors are read.  The shape hints describe the
    selected opaque-only stack(s).
    """
    return _read(path, Options.of(options, **kw))


def _read(path, opts: Options, *, count_only: bool = False):
    """:func:`read`; with ``count_only``, the number of stacks :func:`read` would convert, found from
    the index alone (no tensor read: what batch planning needs, :func:`input_facts`)."""
    h, prefer, rnn = _norm_hints(opts.hints), opts.prefer, opts.rnn
    r = _Reader(path)
    b = r.bundle
    keys = b.keys()
    warnings: list = []

    groups = find_groups(keys)
    canonical_all = {k for g in groups for k in g.tensors.values()}
    variable = h.get("variable")
    if variable is not None:
        if variable not in b:
            vecs = [k for k in keys if _is_float_vector(b.info(k))][:10]
            raise r.error(f"variable {variable!r} is not in the checkpoint; 1-D float tensors there: "
                          f"{', '.join(vecs) or 'none'}")
        vi = b.info(variable)
        if not _is_float_vector(vi) or variable in canonical_all:
            what = "a canonical cell tensor" if variable in canonical_all else \
                f"dtype {vi.dtype} and shape {list(vi.shape)}"
            raise r.error(f"variable {variable!r} is {what}; an opaque cuDNN buffer is a 1-D float16/32/64 "
                          f"tensor")

    # Opaque buffers named as the TF 1.5+ layer names them.
    buffers = []
    for k in keys:
        if k == "opaque_kernel" or k.endswith("/opaque_kernel"):
            info = b.info(k)
            if not _is_float_vector(info):
                warnings.append(f"{k}: dtype {info.dtype}, shape {list(info.shape)} is not a cuDNN opaque "
                                f"buffer (expected 1-D float); left with the other tensors")
                continue
            scope_leaf = scope_of_buffer(k).rsplit("/", 1)[-1]
            if layer_kind(scope_leaf) in ("rnn_relu", "rnn_tanh") and k != variable:
                warnings.append(f"{k}: the buffer of a {scope_leaf} layer, not a GRU or LSTM; left with the "
                                f"other tensors")
                continue
            buffers.append(k)
    if variable is not None and variable not in buffers:
        buffers.append(variable)

    scopes_seen: dict = {}
    for g in groups:
        if g.scope in scopes_seen:
            raise r.error(f"scope {g.scope or '(root)'!r} holds two sets of canonical cell tensors "
                          f"({scopes_seen[g.scope]!r} and {g.base!r}); cannot tell which is the stack")
        scopes_seen[g.scope] = g.base

    # 1. Canonical groups (index only), each matched with its buffer.
    found: list = []
    claimed: set = set()
    vectors = {k for k in keys if _is_float_vector(b.info(k))}
    for g in groups:
        entry = CheckpointStack(scope=g.scope, stack=None, source="", style=g.style, cell=g.cell,
                                canonical_keys=sorted(g.tensors.values()))
        found.append(entry)
        own = (g.scope + "/opaque_kernel") if g.scope else "opaque_kernel"
        try:
            shape, cells = _canonical_shape(r, g)
        except (InputError, UnsupportedError) as e:  # raised only if this stack is selected
            entry._error = e
            if own in buffers and own not in claimed:
                entry.opaque_key = own
                claimed.add(own)
            continue
        entry._shape, entry._cells, entry._group = shape, cells, g
        size = params_size(shape)
        opaque = None
        if own in buffers and own not in claimed:
            opaque = own
        elif variable is not None and variable not in claimed and b.info(variable).shape[0] == size:
            opaque = variable
        else:
            others = {k for k in buffers if scope_of_buffer(k) != g.scope}
            pool = {k for k in vectors if k not in claimed and k not in canonical_all and k not in others
                    and b.info(k).shape[0] == size and b.info(k).dtype == shape.dtype}
            pool = [k for k in pool if not ("/" in k and k.rsplit("/", 1)[0] in pool)]  # not a slot
            inside = sorted(k for k in pool if under(k, g.scope))
            if inside:
                opaque = inside[0]
                if len(inside) > 1:
                    warnings.append(f"scope {g.scope!r}: {len(inside)} tensors could be its opaque buffer "
                                    f"({', '.join(inside[:5])}); cross-checked {opaque!r}")
            elif len(pool) == 1:
                opaque = pool[0]
        if entry.style == "1.5" and (opaque is None or not opaque.endswith("opaque_kernel")):
            entry.style = "1.4"
        if opaque is not None:
            info = b.info(opaque)
            entry.opaque_key, entry.opaque_size, entry.opaque_dtype = opaque, info.shape[0], info.dtype
            claimed.add(opaque)

    # 2. Buffers without canonical tensors: the cell is the hint's, else the one the layer scope names,
    #    else unknown (every cell is searched).
    shape_hinted = any(k in h for k in _SHAPE_HINTS if k != "cell")
    for k in buffers:
        if k in claimed:
            continue
        info = b.info(k)
        scope = scope_of_buffer(k)
        kind = layer_kind(scope)
        cell = h.get("cell") or (kind if kind in TF_CELLS else None)
        if (cell is not None and cell == kind and TF_CELLS[cell].leaves_unfitting and k != variable
                and not shape_hinted and not solve_shapes(info.shape[0], dtype=info.dtype, cell=cell)):
            warnings.append(f"{k}: the buffer of a {scope.rsplit('/', 1)[-1]} layer, not a GRU, and its "
                            f"{info.shape[0]} values fit no cuDNN LSTM shape either; left with the other tensors")
            continue
        claimed.add(k)
        found.append(CheckpointStack(scope=scope, stack=None, source="", style="opaque-only", cell=cell,
                                     opaque_key=k, opaque_size=info.shape[0], opaque_dtype=info.dtype,
                                     cross_check=CrossCheck("no canonical")))
    found.sort(key=lambda e: (natural_key(e.scope), e.opaque_key or ""))

    # Optimizer slots of every buffer.
    for entry in found:
        if entry.opaque_key:
            entry.slots = sorted(k for k in keys if k.startswith(entry.opaque_key + "/")
                                 and k not in canonical_all and k not in claimed)

    # Selection: --rnn, else --variable.
    if rnn is not None:
        chosen = [e for e in found if e.scope == rnn or e.opaque_key == rnn]
        if not chosen:
            have = ", ".join(repr(e.scope) for e in found) or "none"
            raise UsageError(f"no cuDNN {cells_text(found)} stack with scope {rnn!r}; stacks found: {have}",
                             path=r.where)
        found = chosen
    elif variable is not None:
        found = [e for e in found if e.opaque_key == variable]
    if count_only:
        return len(found)

    # Read what the selected stacks need.
    for entry in found:
        if entry._error is not None:
            raise entry._error
        if entry.style == "opaque-only":
            _solve(r, entry, h)
        else:
            _load_canonical(r, entry, prefer, h, warnings)
        if entry.stack is not None and "forget_bias" in h:
            _add_forget_bias(entry, h["forget_bias"], r.where, warnings)
        if entry.stack is not None:
            n = entry._nonfinite
            if n:
                warnings.append(f"{entry.scope}: {n} NaN/Inf weight value(s), carried over unchanged")

    used = {k for e in found for k in e.keys}
    other = [k for k in keys if k not in used]
    possible = []
    if not found:
        for k in sorted(vectors):
            if not re.search(r"cudnn|rnn|gru|param|opaque", k, re.I):
                continue
            if "/" in k and k.rsplit("/", 1)[0] in vectors:
                continue  # an optimizer slot of another vector
            info = b.info(k)
            if solve_shapes(info.shape[0], dtype=info.dtype, max_layers=4, cell=h.get("cell")):
                possible.append({"key": k, "size": info.shape[0], "dtype": info.dtype})
    return CheckpointDoc(
        path=str(path), prefix=str(b.prefix), num_shards=b.num_shards, tensor_count=len(b),
        total_bytes=b.total_bytes(), stacks=found, other_keys=other,
        other_bytes=sum(b.info(k).size for k in other), possible_buffers=possible, warnings=warnings,
        reader=r, prefer=prefer)


def _load_canonical(r: _Reader, entry: CheckpointStack, prefer: Optional[str], h: dict, warnings: list) -> None:
    """Read a canonical group, cross-check it with its buffer, build the stack.

    One pass, cell by cell: read (and crc-check) the cell's canonical
    tensors, compare every value with the buffer's, build the cell's
    GateParams, count NaN/Inf, then drop the mapped pages so that at most one
    cell's data is resident."""
    shape, cells, g = entry._shape, entry._cells, entry._group
    bad = _hint_conflicts(shape, h)
    if bad:
        raise UsageError(f"scope {entry.scope!r}: hint(s) {', '.join(bad)} contradict its canonical "
                         f"tensors; drop them or pick another stack with --rnn", path=r.where)
    size = params_size(shape)
    check = None
    if entry.opaque_key is None:
        entry.cross_check = CrossCheck("not checked", detail="no opaque buffer found")
    elif entry.opaque_dtype != shape.dtype:
        entry.cross_check = CrossCheck("not checked", detail=f"buffer is {entry.opaque_dtype}, canonical "
                                       f"tensors are {shape.dtype}")
    elif entry.opaque_size != size:
        r.read(entry.opaque_key)  # a corrupt entry (size beyond the data file, bad crc) is an error, not a mismatch
        r.release()
        deeper = [c for c in solve_shapes(entry.opaque_size, dtype=shape.dtype, units=shape.units, cell=shape.cell,
                                          input_size=shape.input_size, bidirectional=shape.bidirectional,
                                          input_mode=shape.input_mode)
                  if c.num_layers > shape.num_layers]
        if deeper:
            raise InputError(
                f"scope {entry.scope!r}: canonical tensors describe {shape.num_layers} layer(s) but its opaque "
                f"buffer {entry.opaque_key!r} holds {deeper[0].num_layers}: the canonical tensors of layer(s) "
                f"{', '.join(str(l) for l in range(shape.num_layers, deeper[0].num_layers))} are missing "
                f"(use --prefer opaque to take the buffer)", path=r.where)
        entry.cross_check = CrossCheck(
            "disagree", detail=f"buffer has {entry.opaque_size} values, the canonical shape needs {size}")
    else:
        entry.opaque_params = _unpack_views(r.read(entry.opaque_key), shape)  # crc32c checked here
        check = _CrossCheck(shape.dtype, g.spec)
    if prefer == "opaque" and entry.opaque_params is None:
        raise UsageError(f"prefer='opaque', but scope {entry.scope!r} has no usable opaque buffer "
                         f"({entry.cross_check.text()})", path=r.where)
    r.release()
    H = shape.units
    cparams, nonfinite = [], 0
    for layer in range(shape.num_layers):
        n_in = shape.layer_input_size(layer)
        for d in range(shape.num_directions):
            keys = cells[layer, d]
            t = {name: r.read(k) for name, k in keys.items()}
            op = None if check is None else entry.opaque_params[shape.pseudo_layer(layer, d)]
            identical = op is not None and check.cell(t, keys, op, n_in, H, r.release)
            p, diff = to_params(g.spec, t, n_in, H, op if identical else None)
            if diff is not None:
                b0, b1 = g.spec.tf13_names
                warnings.append(f"{entry.scope}: layer {layer}: '{b0}' + '{b1}' differs from "
                                f"{g.spec.units_from[0]} by up to {diff:.3g}; the unsummed halves were used")
            cparams.append(p)
            nonfinite += _nonfinite(op if prefer == "opaque" else p, r.release)
            r.release()
    if check is not None:
        entry.cross_check = check.result()
    entry.canonical_params = cparams
    entry._nonfinite = nonfinite
    what = style_text(entry.style, shape.cell)
    if entry.style == "1.3" and g.has_tf13_biases:
        what += f", unsummed biases from '{g.spec.tf13_names[0][:-1]}0/1'"
    if prefer == "opaque":
        entry.source = f"opaque buffer (cuDNN 9.19 layout), shape from canonical tensors ({what})"
        params = entry.opaque_params
    else:
        entry.source = f"canonical tensors ({what})"
        params = cparams
    entry.stack = RNNStack(entry.scope, shape, params,
                           provenance={"format": FORMAT, "scope": entry.scope, "source": entry.source,
                                       "opaque": entry.opaque_key, "style": entry.style})


def _solve(r: _Reader, entry: CheckpointStack, h: dict) -> None:
    size, dtype = entry.opaque_size, entry.opaque_dtype
    r.read(entry.opaque_key)  # a corrupt entry (beyond the data file, bad crc) is an input error, not a shape
    r.release()
    hints = _shape_hints(h)
    hints["cell"] = entry.cell
    cands = solve_shapes(size, dtype=dtype, **hints)
    entry.candidates = cands
    hinted = any(k in h for k in _SHAPE_HINTS)
    if not cands and hinted:
        raise UsageError(
            f"opaque buffer {entry.opaque_key!r} has {size} {dtype} values; no cuDNN {_cell_word(entry.cell)} with "
            f"{_hint_text(h)} has that many (up to {8 if 'num_layers' not in h else h['num_layers']} layers "
            f"searched); check the hints", path=r.where)
    shape_src = "shape from hints" if hinted else "shape solved from its size"
    if len(cands) == 1:
        shape = cands[0]
        entry.source = f"opaque buffer (cuDNN 9.19 layout), {shape_src}"
        params = _unpack_views(r.read(entry.opaque_key), shape)
        r.release()
        entry.opaque_params = params
        entry._nonfinite = 0
        for p in params:
            entry._nonfinite += _nonfinite(p)
            r.release()
        entry.stack = RNNStack(entry.scope, shape, params,
                               provenance={"format": FORMAT, "scope": entry.scope, "source": entry.source,
                                           "opaque": entry.opaque_key, "style": entry.style})
    elif cands:
        entry.source = f"opaque buffer (cuDNN 9.19 layout), shape ambiguous: {len(cands)} candidates"
    else:
        entry.source = (f"opaque buffer whose size fits no cuDNN {_cell_word(entry.cell)} shape "
                        f"({_not_fitting_hint(entry.cell)})")


def _cell_word(cell: Optional[str]) -> str:
    return TF_CELLS[cell].title if cell else " or ".join(c.title for c in TF_CELLS.values())


def cells_text(entries: list) -> str:
    cells = {e.cell for e in entries}
    return _cell_word(cells.pop()) if len(cells) == 1 and None not in cells else "RNN"


def _not_fitting_hint(cell: Optional[str]) -> str:
    """What an unfitting buffer may be instead: the cell's own hint (:data:`TF_CELLS`), or, for a buffer
    of no known cell (every cell was tried), what no cell covers."""
    return TF_CELLS[cell].not_fitting if cell else "a plain RNN or a projection LSTM buffer?"


def _add_forget_bias(entry: CheckpointStack, forget_bias: float, where: str, warnings: list) -> None:
    """Fold a TF ``LSTMCell``/``LSTMBlockCell`` run-time ``forget_bias`` into the forget-gate bias.

    cuDNN has no such term and ``CudnnCompatibleLSTMCell`` passes 0, so cuDNN-made weights need
    nothing; a canonical-only checkpoint trained with ``LSTMBlockCell(forget_bias=1)`` computes
    ``f = σ(... + b_f + forget_bias)`` and does not record it (``docs/lstm-format-facts.md``)."""
    s = entry.stack.shape
    if "forget" not in s.cell_spec.gates:
        raise UsageError(f"forget_bias applies to LSTM stacks only; {entry.scope!r} is a "
                         f"{s.cell_spec.title}", path=where)
    forget = s.cell_spec.gates.index("forget")
    params = []
    for p in entry.stack.params:
        bW = p.input_bias.astype(np.float64)
        bW[forget] += forget_bias
        params.append(GateParams(p.input_weights, p.recurrent_weights, bW.astype(p.input_bias.dtype),
                                 p.recurrent_bias))
    entry.stack = RNNStack(entry.stack.name, s, params, provenance=dict(entry.stack.provenance,
                                                                          forget_bias=forget_bias))
    entry.source += f", forget_bias {forget_bias:g} added to the forget-gate bias"
    warnings.append(f"{entry.scope}: forget_bias {forget_bias:g} added to every forget-gate bias (as TF's "
                    f"LSTMCell/LSTMBlockCell adds it at run time; cuDNN has none)")


def _disambiguation(cands: list) -> str:
    opts = []
    for attr, opt in (("cell", "--cell"), ("units", "--num-units"), ("input_size", "--input-size"), ("num_layers", "--num-layers"),
                      ("bidirectional", "--direction"), ("input_mode", "--input-mode")):
        if len({getattr(c, attr) for c in cands}) > 1:
            opts.append(opt)
    return ", ".join(opts)


def _cand_text(c: StackShape, with_cell: bool = False) -> str:
    cell = f"{c.cell_spec.title} " if with_cell else ""
    return (f"{cell}input {c.input_size}/units {c.units}/{c.num_layers} layer(s)/"
            f"{'bi' if c.bidirectional else 'uni'}/{c.input_mode}")


def require_shape(entry: CheckpointStack, where: str) -> None:
    if entry.stack is not None:
        return
    if entry.candidates:
        mixed = len({c.cell for c in entry.candidates}) > 1
        shown = "; ".join(_cand_text(c, mixed) for c in entry.candidates[:CANDIDATES_SHOWN])
        extra = len(entry.candidates) - CANDIDATES_SHOWN
        more = f"; ... {extra} more" if extra > 0 else ""
        raise UsageError(
            f"opaque buffer {entry.opaque_key!r} ({entry.opaque_size} values) has no stored shape and "
            f"{len(entry.candidates)} shapes fit: {shown}{more}. Pass {_disambiguation(entry.candidates)} "
            f"(gruconv inspect lists them all)", path=where)
    raise InputError(f"opaque buffer {entry.opaque_key!r} has {entry.opaque_size} values, which fits no cuDNN "
                     f"{_cell_word(entry.cell)} shape of up to 8 layers ({_not_fitting_hint(entry.cell)})",
                     path=where)


# --------------------------------------------------------------------------- inspect


def rnn_entry(e: CheckpointStack) -> dict:
    """One stack in the inspect / convert schema (``gruconv.options``)."""
    sh = e.shape
    details = [f"defined by: {e.source}"]
    if e.opaque_key:
        details.append(f"opaque buffer: {e.opaque_key} ({e.opaque_size} {e.opaque_dtype} values)")
    details.append(f"cross-check: {e.cross_check.text()}")
    if sh is None and e.candidates:
        details.append(f"{len(e.candidates)} candidate shape(s) for {e.opaque_size} values:")
        mixed = len({c.cell for c in e.candidates}) > 1
        for c in e.candidates[:20]:
            details.append(f"  {c.cell_spec.title + ', ' if mixed else ''}input {c.input_size}, units {c.units}, "
                           f"{c.num_layers} layer(s), "
                           f"{'bi' if c.bidirectional else 'uni'}, {c.input_mode}")
        if len(e.candidates) > 20:
            details.append(f"  ... {len(e.candidates) - 20} more (add --num-units/--num-layers/--direction"
                           f"{'/--cell' if mixed else ''})")
    if e.slots:
        details.append(f"optimizer slots (dropped by convert): {', '.join(e.slots)}")
    if (sh is not None and "forget" in sh.cell_spec.gates and e.opaque_key is None
            and "forget_bias" not in e.stack.provenance):
        details.append("note: canonical LSTM tensors only, converted with forget_bias 0 (cuDNN, "
                       "CudnnCompatibleLSTMCell); weights trained with TF's LSTMCell/LSTMBlockCell and its "
                       "default forget_bias=1 need --forget-bias 1")
    return {
        "name": e.scope,
        "cell": sh.cell if sh else e.cell,
        "kind": f"cuDNN {sh.cell_spec.title}" if sh else "cuDNN RNN buffer",
        "shape": sh.to_dict() if sh else None,
        "params": params_size(sh) if sh else None,
        "nonfinite_weights": (e._nonfinite if e._nonfinite is not None else e.stack.nonfinite_count())
        if e.stack is not None else 0,
        "converts_to": e.converts_to(),
        "details": details,
        "source": e.source,
        "style": e.style,
        "opaque_key": e.opaque_key,
        "buffer_size": e.opaque_size,
        "cross_check": e.cross_check.text(),
        "cross_check_detail": e.cross_check.to_dict(),
        "candidates": [c.to_dict() for c in e.candidates[:100]] if sh is None else [],
        "candidate_count": len(e.candidates),
        "canonical_tensors": len(e.canonical_keys),
        "slots": e.slots,
    }


def inspect(doc: CheckpointDoc) -> dict:
    """The inspect document (one schema for every format: ``file``, ``format``, ``summary``, ``rnns``)."""
    details = [f"possible opaque buffer: {b['key']} ({b['size']} {b['dtype']} values): pass --variable "
               f"{b['key']} and shape hints to use it" for b in doc.possible_buffers]
    details += [f"! {w}" for w in doc.warnings]
    if doc.stacks or doc.possible_buffers:
        details.append(f"other tensors: {len(doc.other_keys)} ({doc.other_bytes} bytes), copied to OUT.rest.npz "
                       "by convert")
    else:  # what convert says of it (Document.nothing)
        details.append(f"no cudnn_rnn stack: nothing to convert ({len(doc.other_keys)} other tensor(s))")
    return {
        "file": doc.path,
        "format": FORMAT,
        "kind": "checkpoint",
        "summary": f"TensorFlow checkpoint {doc.prefix}, {doc.tensor_count} tensors, {doc.total_bytes} bytes",
        "rnns": [rnn_entry(e) for e in doc.stacks],
        "details": details,
        "prefix": doc.prefix,
        "data_shards": doc.num_shards,
        "tensor_count": doc.tensor_count,
        "total_bytes": doc.total_bytes,
        "other_tensors": {"count": len(doc.other_keys), "bytes": doc.other_bytes, "keys": doc.other_keys},
        "possible_buffers": doc.possible_buffers,
        "warnings": doc.warnings,
    }


def input_files(path) -> list:
    """Every file a conversion of ``path`` reads: the state file, the index, every data shard
    (:func:`gruconv.readers.tfbundle.checkpoint_files`)."""
    try:
        return tfbundle.checkpoint_files(path)
    except GruconvError:
        return [Path(path)]


def input_facts(path, opts: Options) -> InputFacts:
    """Bare stacks (:class:`~gruconv.model.canonical.InputFacts`), how many a conversion writes: all
    the checkpoint's (no ``--rnn``) or the one named."""
    if opts.rnn is None:
        try:
            # From the index alone first (the full read, weights and cross-check, cost ~10 ms
            # per checkpoint in the batch's serial planning); at most one stack is one output whatever
            # reading it would find.  Several: the full read decides, as before (a stack that fails to
            # read leaves one file-named output, whose conversion reports the failure).
            if _read(path, Options.of(opts), count_only=True) > 1:
                return InputFacts("stacks", stacks=len(read(path, opts).stacks) or 1)
        except GruconvError:
            pass  # reported by the conversion itself
    return InputFacts("stacks")
