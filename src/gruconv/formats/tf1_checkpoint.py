"""TensorFlow 1.x ``tf.contrib.cudnn_rnn`` GRU checkpoints: find the stacks, read them, convert them.

Input: a TensorBundle V2 checkpoint (read with :mod:`gruconv.tfbundle`, no
TensorFlow).  What TF 1.x wrote for a cuDNN GRU (names checked against the TF
sources; see ``fixtures/make_tf1_fixtures.py`` and ``shared/DESIGN.md``):

TF 1.5–1.15 ``CudnnGRU`` layer (style ``"1.5"``)
    ``<scope>/opaque_kernel`` — 1-D, the opaque cuDNN weight buffer, plus
    (its ``CudnnGRUSaveable``) canonical tensors under
    ``<scope>/rnn/multi_rnn_cell/cell_<l>/cudnn_compatible_gru_cell/`` or
    ``<scope>/stack_bidirectional_rnn/cell_<l>/bidirectional_rnn/{fw,bw}/cudnn_compatible_gru_cell/``.
TF 1.4 ops API (style ``"1.4"``)
    a buffer variable the user named, optionally a saveable with the same
    canonical names under some scope.
TF 1.3 ``RNNParamsSaveable`` (style ``"1.3"``)
    ``<scope>/multi_rnn_cell/cell_<l>/cudnn_compatible_gru_cell/...`` (no
    ``rnn/``) plus ``bias_cudnn 0`` (input-side ``[b_Wr; b_Wz]``) and
    ``bias_cudnn 1`` (recurrent-side) — the key has a space.

The canonical (``CudnnCompatibleGRUCell``) tensors of one pseudo-layer:
``gates/kernel [in+H, 2H]`` (rows: input, then state; columns: reset, then
update), ``gates/bias [2H]`` (input-side + recurrent-side biases **summed**),
``candidate/input_projection/kernel [in, H]`` and
``candidate/hidden_projection/kernel [H, H]`` (transposes of cuDNN's
``[H, in]`` matrices), ``candidate/input_projection/bias`` (b_Wh) and
``candidate/hidden_projection/bias`` (b_Rh).  A summed gate bias is exact for
inference: the sum goes on the input side, zeros on the recurrent side.

TensorFlow never hard-coded the opaque layout (it asked cuDNN for every
region's address), so a buffer has the layout of the cuDNN it ran with.
Canonical tensors therefore define the weights when present; the buffer is
unpacked with :func:`gruconv.cudnn_layout.unpack` (cuDNN 9.19 layout) and
compared with them — a disagreement is the sign of a buffer from another
cuDNN generation.  A buffer without canonical tensors (skip-input stacks, the
TF 1.4 ops API) has no stored shape: it is solved from its size and the
user's hints (:func:`gruconv.cudnn_layout.solve_shapes`).

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

import contextlib
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from ..canonical import GateParams, RNNStack, StackShape
from ..cudnn_layout import iter_matrix_regions, params_size, solve_shapes
from ..errors import GruconvError, InputError, OutputError, UnsupportedError, UsageError
from ..keras_layout import describe_keras_stack
from ..results import ConvertResult, Options
from .. import tfbundle

FORMAT = "tf1-checkpoint"

_CELL = "cudnn_compatible_gru_cell"
_CELL_TENSORS = (
    "gates/kernel",
    "gates/bias",
    "candidate/input_projection/kernel",
    "candidate/hidden_projection/kernel",
    "candidate/input_projection/bias",
    "candidate/hidden_projection/bias",
)
_TF13_BIASES = ("bias_cudnn 0", "bias_cudnn 1")
_NAME_ALT = "|".join(re.escape(n) for n in _CELL_TENSORS + _TF13_BIASES)
_UNI_RE = re.compile(
    rf"^(?P<base>(?:.*/)?)multi_rnn_cell/cell_(?P<layer>\d+)/{_CELL}/(?P<name>{_NAME_ALT})$", re.S)
_BI_RE = re.compile(
    rf"^(?P<base>(?:.*/)?)stack_bidirectional_rnn/cell_(?P<layer>\d+)/bidirectional_rnn/"
    rf"(?P<dir>fw|bw)/{_CELL}/(?P<name>{_NAME_ALT})$", re.S)
_FLOATS = ("float16", "float32", "float64")
_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_TABLE_MAGIC = (0xDB4775248B80FB57).to_bytes(8, "little")
_DATA_RE = re.compile(r"^.+\.data-\d{5,}-of-\d{5,}$")
#: Layer scopes of the other cuDNN RNN kinds (snake_case of CudnnLSTM, CudnnRNNRelu,
#: CudnnRNNTanh): their ``opaque_kernel`` is not a GRU buffer.
_NON_GRU_SCOPE_RE = re.compile(r"^cudnn_(lstm|rnn_relu|rnn_tanh)(_\d+)?$")
_HINT_KEYS = ("num_units", "input_size", "num_layers", "direction", "input_mode", "variable")
_STYLE_TEXT = {
    "1.5": "TF 1.5+ CudnnGRU layer",
    "1.4": "TF 1.4+ CudnnGRUSaveable",
    "1.3": "TF 1.3 RNNParamsSaveable",
}
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
    """One cuDNN GRU stack found in a checkpoint.

    ``stack`` is None when its shape is ambiguous (``candidates`` lists the
    fits) or unknown (no shape fits the buffer size).
    """

    scope: str
    stack: Optional[RNNStack]
    source: str
    style: str                              # "1.5", "1.4", "1.3" or "opaque-only"
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


def _converts_to(shape: Optional[StackShape]) -> Optional[str]:
    return None if shape is None else describe_keras_stack(shape)


# --------------------------------------------------------------------------- sniff


def sniff(path) -> bool:
    """True for a checkpoint directory, ``.index`` / ``.data-*`` file, or a prefix whose ``.index`` exists."""
    try:
        p = Path(os.fspath(path))
        if p.is_dir():
            return (p / "checkpoint").is_file() or any(i.is_file() for i in p.glob("*.index"))
        if p.is_file():
            with open(p, "rb") as f:
                head = f.read(8)
            if head == _HDF5_MAGIC:
                return False
            if p.name.endswith(".index"):
                size = p.stat().st_size
                if size < 48:
                    return False
                with open(p, "rb") as f:
                    f.seek(size - 8)
                    return f.read(8) == _TABLE_MAGIC
            if _DATA_RE.match(p.name) or p.name.endswith(".meta"):
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
        out[k] = v
    return out


def _hint_text(h: dict) -> str:
    shown = {k: v for k, v in h.items() if k != "variable"}
    return ", ".join(f"{k}={v}" for k, v in shown.items()) or "no shape hints"


def _shape_hints(h: dict) -> dict:
    return {
        "units": h.get("num_units"),
        "input_size": h.get("input_size"),
        "num_layers": h.get("num_layers"),
        "bidirectional": None if "direction" not in h else h["direction"] == "bi",
        "input_mode": h.get("input_mode"),
    }


def _hint_conflicts(shape: StackShape, h: dict) -> list:
    out = []
    for hint, attr in (("num_units", "units"), ("input_size", "input_size"), ("num_layers", "num_layers"),
                       ("input_mode", "input_mode")):
        if hint in h and h[hint] != getattr(shape, attr):
            out.append(f"{hint}={h[hint]} (stored: {getattr(shape, attr)})")
    if "direction" in h and (h["direction"] == "bi") != shape.bidirectional:
        out.append(f"direction={h['direction']} (stored: {'bi' if shape.bidirectional else 'uni'})")
    return out


# --------------------------------------------------------------------------- reading helpers


class _Reader:
    """A bundle plus the error context (file) for messages.

    Tensors are read as read-only views of the memory-mapped data file
    (:meth:`gruconv.tfbundle.Bundle.view`): no copies, crc32c verified on the
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

    def error(self, message: str, cls=InputError) -> GruconvError:
        return cls(message, path=self.where)


def _is_float_vector(info) -> bool:
    return info.dtype in _FLOATS and len(info.shape) == 1 and not info.slices


def _scope_of_buffer(key: str) -> str:
    if key == "opaque_kernel":
        return ""
    if key.endswith("/opaque_kernel"):
        return key[: -len("/opaque_kernel")]
    return key.rsplit("/", 1)[0] if "/" in key else key


def _under(key: str, scope: str) -> bool:
    return scope == "" or key.startswith(scope + "/")


# --------------------------------------------------------------------------- canonical groups


@dataclass
class _Group:
    base: str
    bidirectional: bool
    tensors: dict = field(default_factory=dict)      # (layer, dir, name) -> key

    @property
    def has_tf13_biases(self) -> bool:
        return any(n in _TF13_BIASES for (_, _, n) in self.tensors)

    @property
    def style(self) -> str:
        if self.has_tf13_biases:
            return "1.3"
        if not self.bidirectional and not (self.base == "rnn/" or self.base.endswith("/rnn/")):
            return "1.3"  # RNNParamsSaveable names without their bias_cudnn halves
        return "1.5"

    @property
    def scope(self) -> str:
        base = self.base
        if not self.bidirectional and self.style != "1.3":
            base = base[: -len("rnn/")]
        return base.rstrip("/")


def _find_groups(keys) -> list:
    groups: dict = {}
    for key in keys:
        m = _BI_RE.match(key)
        bidir = m is not None
        if m is None:
            m = _UNI_RE.match(key)
        if m is None:
            continue
        g = groups.setdefault((m["base"], bidir), _Group(m["base"], bidir))
        d = (1 if m["dir"] == "bw" else 0) if bidir else 0
        g.tensors[(int(m["layer"]), d, m["name"])] = key
    return [groups[k] for k in sorted(groups)]


def _canonical_shape(r: _Reader, g: _Group) -> tuple:
    """Validate a canonical group from the index alone; return (StackShape, {(layer, dir): {name: key}})."""
    scope = g.scope or "(root)"
    D = 2 if g.bidirectional else 1
    layers = sorted({layer for (layer, _, _) in g.tensors})
    if layers != list(range(len(layers))):
        missing = sorted(set(range(max(layers) + 1)) - set(layers))
        raise r.error(f"canonical GRU tensors of scope {scope!r}: layer(s) {missing} missing "
                      f"(found cell_{', cell_'.join(map(str, layers))})")
    L = len(layers)

    def key_of(layer, d, name):
        k = g.tensors.get((layer, d, name))
        if k is None:
            if g.bidirectional:
                where = f"{g.base}stack_bidirectional_rnn/cell_{layer}/bidirectional_rnn/{'bw' if d else 'fw'}/{_CELL}"
            else:
                where = f"{g.base}multi_rnn_cell/cell_{layer}/{_CELL}"
            raise r.error(f"canonical GRU tensor '{where}/{name}' is missing (the other tensors of scope "
                          f"{scope!r} are present)")
        return k

    first = r.info(key_of(0, 0, "gates/bias"))
    dtype = first.dtype
    if dtype not in _FLOATS:
        raise r.error(f"tensor {first.key!r} has dtype {dtype}; cuDNN GRU weights must be float16, "
                      f"float32 or float64", UnsupportedError if dtype == "bfloat16" else InputError)
    if len(first.shape) != 1 or first.shape[0] % 2 or first.shape[0] == 0:
        raise r.error(f"tensor {first.key!r} has shape {list(first.shape)}, expected [2 * units]")
    H = first.shape[0] // 2
    ip = r.info(key_of(0, 0, "candidate/input_projection/kernel"))
    if len(ip.shape) != 2 or ip.shape[1] != H:
        raise r.error(f"tensor {ip.key!r} has shape {list(ip.shape)}, expected [input_size, {H}]")
    I = ip.shape[0]
    try:
        shape = StackShape(I, H, L, g.bidirectional, "linear", dtype)
    except InputError as e:
        raise r.error(f"canonical GRU tensors of scope {scope!r}: {e.message}") from None

    cells = {}
    for layer in range(L):
        n_in = shape.layer_input_size(layer)
        expect = {
            "gates/kernel": (n_in + H, 2 * H), "gates/bias": (2 * H,),
            "candidate/input_projection/kernel": (n_in, H), "candidate/hidden_projection/kernel": (H, H),
            "candidate/input_projection/bias": (H,), "candidate/hidden_projection/bias": (H,),
            "bias_cudnn 0": (2 * H,), "bias_cudnn 1": (2 * H,),
        }
        for d in range(D):
            names = _CELL_TENSORS + (_TF13_BIASES if g.has_tf13_biases else ())
            cell = {}
            for name in names:
                k = key_of(layer, d, name)
                info = r.info(k)
                if info.dtype != dtype:
                    raise r.error(f"tensor {k!r} has dtype {info.dtype}, but {first.key!r} has {dtype}; "
                                  f"all tensors of one GRU stack share a dtype")
                if tuple(info.shape) != expect[name]:
                    raise r.error(f"tensor {k!r} has shape {list(info.shape)}, expected "
                                  f"{list(expect[name])} (layer {layer} of a stack with input size {I}, "
                                  f"{H} units, {'bi' if D == 2 else 'uni'}directional)")
                cell[name] = k
            cells[layer, d] = cell
    return shape, cells


def _unpack_views(buffer: np.ndarray, shape: StackShape) -> list:
    """:func:`gruconv.cudnn_layout.unpack` without copies: each pseudo-layer's three gate matrices
    (and biases) lie next to each other in the buffer, so each ``(3, H, in)`` stack is one view."""
    flat = buffer.reshape(-1)
    expected = params_size(shape)
    if flat.size != expected:
        raise InputError(f"opaque buffer has {flat.size} values, a {shape.describe()} GRU needs {expected}")
    regions: dict = {}
    for p, kind, lin, offset, dims in iter_matrix_regions(shape):
        regions.setdefault((p, kind, lin >= 3), []).append((offset, dims))

    def gates(p, kind, recurrent):
        parts = regions.get((p, kind, recurrent))
        if parts is None:
            return None
        (first, dims), n = parts[0], int(np.prod(parts[0][1]))
        if len(parts) == 3 and all(o == first + g * n and d == dims for g, (o, d) in enumerate(parts)):
            return flat[first:first + 3 * n].reshape((3,) + tuple(dims))
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


def _nonfinite(p: GateParams) -> int:
    """NaN/Inf values among one pseudo-layer's weights (as RNNStack.nonfinite_count counts them).

    A finite sum proves there are none (NaN and Inf propagate through a sum;
    an overflowing sum of finite values only sends it to the exact count), so
    the common case is one fast reduction per array."""
    n = 0
    for a in p.arrays().values():
        with np.errstate(all="ignore"):
            total = a.sum(dtype=np.float32 if a.dtype == np.float16 else None)
        if not np.isfinite(total):
            n += int(np.count_nonzero(~np.isfinite(a)))
    return n


def _stacked(blocks: list) -> np.ndarray:
    """``np.ascontiguousarray(np.stack(blocks))`` in one copy."""
    out = np.empty((len(blocks),) + blocks[0].shape, blocks[0].dtype)
    for g, b in enumerate(blocks):
        out[g] = b
    return out


def _cell_params(t: dict, n_in: int, H: int, matrices: Optional[GateParams]) -> tuple:
    """(GateParams of one canonical cell (its tensors ``t``), by how much 'bias_cudnn 0' + 'bias_cudnn 1'
    differ from gates/bias, or None when they agree or are absent).

    ``matrices``: the buffer's pseudo-layer when its matrices were found bit-for-bit equal to the
    canonical ones; its (3, H, in) views are then used as they are instead of stacking copies of the
    transposed canonical blocks (same values, no copy).  Biases always come from the canonical tensors.
    """
    gk = t["gates/kernel"]
    gb = t["gates/bias"]
    diff = None
    if "bias_cudnn 0" in t:
        b0, b1 = t["bias_cudnn 0"], t["bias_cudnn 1"]
        bw_rz, br_rz = [b0[:H], b0[H:]], [b1[:H], b1[H:]]
        with np.errstate(all="ignore"):
            summed = (b0 + b1).astype(gb.dtype)
        if not np.array_equal(summed, gb, equal_nan=True):
            diff = float(np.nanmax(np.abs(summed.astype(np.float64) - gb.astype(np.float64))))
    else:
        bw_rz, br_rz = [gb[:H], gb[H:]], [np.zeros(H, gb.dtype), np.zeros(H, gb.dtype)]
    if matrices is not None:
        iw, rw = matrices.input_weights, matrices.recurrent_weights
    else:
        iw = _stacked([gk[:n_in, :H].T, gk[:n_in, H:].T, t["candidate/input_projection/kernel"].T])
        rw = _stacked([gk[n_in:, :H].T, gk[n_in:, H:].T, t["candidate/hidden_projection/kernel"].T])
    return GateParams(
        input_weights=iw, recurrent_weights=rw,
        input_bias=np.stack(bw_rz + [t["candidate/input_projection/bias"]]),
        recurrent_bias=np.stack(br_rz + [t["candidate/hidden_projection/bias"]]),
    ), diff


def _cell_blocks(p: GateParams, n_in: int, H: int, dtype) -> dict:
    """For each canonical cell tensor: (blocks of it as (row slice, column slice), the buffer's blocks).

    The blocks are views (no copies), so comparing a large stack costs one
    pass over memory; ``gates/bias`` is the sum, computed in the tensor dtype
    as TF computed it."""
    full = (slice(None), slice(None))
    with np.errstate(all="ignore"):
        gb = (np.concatenate([p.input_bias[0], p.input_bias[1]])
              + np.concatenate([p.recurrent_bias[0], p.recurrent_bias[1]])).astype(dtype)
    return {
        "gates/kernel": [((slice(0, n_in), slice(0, H)), p.input_weights[0].T),
                         ((slice(0, n_in), slice(H, 2 * H)), p.input_weights[1].T),
                         ((slice(n_in, None), slice(0, H)), p.recurrent_weights[0].T),
                         ((slice(n_in, None), slice(H, 2 * H)), p.recurrent_weights[1].T)],
        "gates/bias": [((slice(None),), gb)],
        "candidate/input_projection/kernel": [(full, p.input_weights[2].T)],
        "candidate/hidden_projection/kernel": [(full, p.recurrent_weights[2].T)],
        "candidate/input_projection/bias": [((slice(None),), p.input_bias[2])],
        "candidate/hidden_projection/bias": [((slice(None),), p.recurrent_bias[2])],
        "bias_cudnn 0": [((slice(0, H),), p.input_bias[0]), ((slice(H, None),), p.input_bias[1])],
        "bias_cudnn 1": [((slice(0, H),), p.recurrent_bias[0]), ((slice(H, None),), p.recurrent_bias[1])],
    }


_MATRICES = ("gates/kernel", "candidate/input_projection/kernel", "candidate/hidden_projection/kernel")


class _CrossCheck:
    """Compare every canonical tensor with the same values in the unpacked buffer, cell by cell.

    Matrices and separate biases must be identical; a summed gate bias may
    differ by the rounding of the sum (2 ulp).  Reports the largest absolute
    difference and where it is (tensor key and index).  Every value is
    compared, on the mapped views (no copies)."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        self.worst, self.where, self.ok = 0.0, None, True

    def cell(self, t: dict, keys: dict, p: GateParams, n_in: int, H: int) -> bool:
        """Compare one cell; return True if its matrices are bit-for-bit the buffer's."""
        identical = True
        blocks = _cell_blocks(p, n_in, H, self.dtype)
        for name, key in keys.items():
            theirs = t[name]
            for idx, mine in blocks[name]:
                part = theirs[idx]
                if _same_bits(part, mine):
                    continue
                if name in _MATRICES:
                    identical = False
                if np.array_equal(part, mine):  # +0 vs -0
                    continue
                self._differ(name, key, idx, part, mine)
        return identical

    def _differ(self, name, key, idx, part, mine) -> None:
        a, b = part.astype(np.float64), mine.astype(np.float64)
        with np.errstate(invalid="ignore"):
            diff = np.where(np.isnan(a) & np.isnan(b), 0.0, np.abs(a - b))
        diff = np.where(np.isnan(diff), np.inf, diff)
        if name == "gates/bias":
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
    """Find every cuDNN GRU stack in a TF 1.x checkpoint and read its weights (no TensorFlow).

    Stacks are found from the index alone; then ``options.rnn`` (a scope or
    buffer key), else a ``variable`` hint, selects among them, and only the
    selected stacks' tensors are read.  The shape hints describe the
    selected opaque-only stack(s).
    """
    opts = Options.of(options, **kw)
    h, prefer, rnn = _norm_hints(opts.hints), opts.prefer, opts.rnn
    r = _Reader(path)
    b = r.bundle
    keys = b.keys()
    warnings: list = []

    groups = _find_groups(keys)
    canonical_all = {k for g in groups for k in g.tensors.values()}
    variable = h.get("variable")
    if variable is not None:
        if variable not in b:
            vecs = [k for k in keys if _is_float_vector(b.info(k))][:10]
            raise r.error(f"variable {variable!r} is not in the checkpoint; 1-D float tensors there: "
                          f"{', '.join(vecs) or 'none'}")
        vi = b.info(variable)
        if not _is_float_vector(vi) or variable in canonical_all:
            what = "a canonical GRU tensor" if variable in canonical_all else \
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
            scope_leaf = _scope_of_buffer(k).rsplit("/", 1)[-1]
            if _NON_GRU_SCOPE_RE.match(scope_leaf) and k != variable:
                warnings.append(f"{k}: the buffer of a {scope_leaf} layer, not a GRU; left with the other "
                                f"tensors")
                continue
            buffers.append(k)
    if variable is not None and variable not in buffers:
        buffers.append(variable)

    scopes_seen: dict = {}
    for g in groups:
        if g.scope in scopes_seen:
            raise r.error(f"scope {g.scope or '(root)'!r} holds two sets of canonical GRU tensors "
                          f"({scopes_seen[g.scope]!r} and {g.base!r}); cannot tell which is the stack")
        scopes_seen[g.scope] = g.base

    # 1. Canonical groups (index only), each matched with its buffer.
    found: list = []
    claimed: set = set()
    vectors = {k for k in keys if _is_float_vector(b.info(k))}
    for g in groups:
        entry = CheckpointStack(scope=g.scope, stack=None, source="", style=g.style,
                                canonical_keys=sorted(g.tensors.values()))
        found.append(entry)
        own = (g.scope + "/opaque_kernel") if g.scope else "opaque_kernel"
        try:
            shape, cells = _canonical_shape(r, g)
        except InputError as e:  # raised only if this stack is selected
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
            others = {k for k in buffers if _scope_of_buffer(k) != g.scope}
            pool = {k for k in vectors if k not in claimed and k not in canonical_all and k not in others
                    and b.info(k).shape[0] == size and b.info(k).dtype == shape.dtype}
            pool = [k for k in pool if not ("/" in k and k.rsplit("/", 1)[0] in pool)]  # not a slot
            inside = sorted(k for k in pool if _under(k, g.scope))
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

    # 2. Buffers without canonical tensors.
    for k in buffers:
        if k in claimed:
            continue
        claimed.add(k)
        info = b.info(k)
        found.append(CheckpointStack(scope=_scope_of_buffer(k), stack=None, source="", style="opaque-only",
                                     opaque_key=k, opaque_size=info.shape[0], opaque_dtype=info.dtype,
                                     cross_check=CrossCheck("no canonical")))
    found.sort(key=lambda e: (e.scope, e.opaque_key or ""))

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
            raise UsageError(f"no cuDNN GRU stack with scope {rnn!r}; stacks found: {have}", path=r.where)
        found = chosen
    elif variable is not None:
        found = [e for e in found if e.opaque_key == variable]

    # Read what the selected stacks need.
    for entry in found:
        if entry._error is not None:
            raise entry._error
        if entry.style == "opaque-only":
            _solve(r, entry, h)
        else:
            _load_canonical(r, entry, prefer, h, warnings)
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
            if solve_shapes(info.shape[0], dtype=info.dtype, max_layers=4, cell="gru"):
                possible.append({"key": k, "size": info.shape[0], "dtype": info.dtype})
    return CheckpointDoc(
        path=str(path), prefix=str(b.prefix), num_shards=b.num_shards, tensor_count=len(b),
        total_bytes=b.total_bytes(), stacks=found, other_keys=other,
        other_bytes=sum(b.info(k).size for k in other), possible_buffers=possible, warnings=warnings,
        reader=r)


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
        check = _CrossCheck(shape.dtype)
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
            identical = op is not None and check.cell(t, keys, op, n_in, H)
            p, diff = _cell_params(t, n_in, H, op if identical else None)
            if diff is not None:
                warnings.append(f"{entry.scope}: layer {layer}: 'bias_cudnn 0' + 'bias_cudnn 1' differs from "
                                f"gates/bias by up to {diff:.3g}; the unsummed bias_cudnn halves were used")
            cparams.append(p)
            nonfinite += _nonfinite(op if prefer == "opaque" else p)
            r.release()
    if check is not None:
        entry.cross_check = check.result()
    entry.canonical_params = cparams
    entry._nonfinite = nonfinite
    what = _STYLE_TEXT[entry.style]
    if entry.style == "1.3" and g.has_tf13_biases:
        what += ", unsummed biases from 'bias_cudnn 0/1'"
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
    cands = solve_shapes(size, dtype=dtype, cell="gru", **_shape_hints(h))
    entry.candidates = cands
    if not cands and any(k != "variable" for k in h):
        raise UsageError(
            f"opaque buffer {entry.opaque_key!r} has {size} {dtype} values; no cuDNN GRU with "
            f"{_hint_text(h)} has that many (up to {8 if 'num_layers' not in h else h['num_layers']} layers "
            f"searched); check the hints", path=r.where)
    shape_src = "shape from hints" if any(k != "variable" for k in h) else "shape solved from its size"
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
        entry.source = "opaque buffer whose size fits no cuDNN GRU shape (an LSTM or plain RNN buffer?)"


def _disambiguation(cands: list) -> str:
    opts = []
    for attr, opt in (("units", "--num-units"), ("input_size", "--input-size"), ("num_layers", "--num-layers"),
                      ("bidirectional", "--direction"), ("input_mode", "--input-mode")):
        if len({getattr(c, attr) for c in cands}) > 1:
            opts.append(opt)
    return ", ".join(opts)


def _cand_text(c: StackShape) -> str:
    return (f"input {c.input_size}/units {c.units}/{c.num_layers} layer(s)/"
            f"{'bi' if c.bidirectional else 'uni'}/{c.input_mode}")


def _require_shape(entry: CheckpointStack, where: str) -> None:
    if entry.stack is not None:
        return
    if entry.candidates:
        shown = "; ".join(_cand_text(c) for c in entry.candidates[:CANDIDATES_SHOWN])
        extra = len(entry.candidates) - CANDIDATES_SHOWN
        more = f"; ... {extra} more" if extra > 0 else ""
        raise UsageError(
            f"opaque buffer {entry.opaque_key!r} ({entry.opaque_size} values) has no stored shape and "
            f"{len(entry.candidates)} shapes fit: {shown}{more}. Pass {_disambiguation(entry.candidates)} "
            f"(gruconv inspect lists them all)", path=where)
    raise InputError(f"opaque buffer {entry.opaque_key!r} has {entry.opaque_size} values, which fits no cuDNN "
                     f"GRU shape of up to 8 layers (is it an LSTM or plain RNN buffer?)", path=where)


# --------------------------------------------------------------------------- inspect


def _rnn_entry(e: CheckpointStack) -> dict:
    """One stack in the inspect / convert schema (``gruconv.results``)."""
    sh = e.shape
    details = [f"defined by: {e.source}"]
    if e.opaque_key:
        details.append(f"opaque buffer: {e.opaque_key} ({e.opaque_size} {e.opaque_dtype} values)")
    details.append(f"cross-check: {e.cross_check.text()}")
    if sh is None and e.candidates:
        details.append(f"{len(e.candidates)} candidate shape(s) for {e.opaque_size} values:")
        for c in e.candidates[:20]:
            details.append(f"  input {c.input_size}, units {c.units}, {c.num_layers} layer(s), "
                           f"{'bi' if c.bidirectional else 'uni'}, {c.input_mode}")
        if len(e.candidates) > 20:
            details.append(f"  ... {len(e.candidates) - 20} more (add --num-units/--num-layers/--direction)")
    if e.slots:
        details.append(f"optimizer slots (dropped by convert): {', '.join(e.slots)}")
    return {
        "name": e.scope,
        "cell": sh.cell if sh else None,
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
    details.append(f"other tensors: {len(doc.other_keys)} ({doc.other_bytes} bytes), copied to OUT.rest.npz "
                   "by convert")
    return {
        "file": doc.path,
        "format": FORMAT,
        "kind": "checkpoint",
        "summary": f"TensorFlow checkpoint {doc.prefix}, {doc.tensor_count} tensors, {doc.total_bytes} bytes",
        "rnns": [_rnn_entry(e) for e in doc.stacks],
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
    """Every file a conversion of ``path`` reads: the index, every data shard, the state file."""
    p = Path(path)
    files = [p / "checkpoint"] if p.is_dir() and (p / "checkpoint").is_file() else []
    try:
        prefix = tfbundle.resolve_prefix(p)
    except GruconvError:
        return files + [p]
    index = Path(str(prefix) + ".index")
    shards = sorted(prefix.parent.glob(glob_escape(prefix.name) + ".data-*"))
    return files + [index] + shards


def glob_escape(name: str) -> str:
    import glob

    return glob.escape(name)


def output_name(path, opts: Options, stem: str) -> str:
    """Batch mode: ``stem.keras``, or ``stem`` as a directory when several stacks convert at once."""
    if opts.rnn is None:
        try:
            if len(read(path, opts).stacks) > 1:
                return stem
        except GruconvError:
            pass  # reported by the conversion itself
    return stem + ".keras"


# --------------------------------------------------------------------------- convert


def _file_stem(scope: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.\-]", "_", scope.replace("/", "__")).lstrip(".")
    return stem or "gru_stack"


def _npz_array(arr: np.ndarray, key: str, warnings: list) -> tuple:
    """(array, allow_pickle) for np.lib.format.write_array, keeping the tensor's bytes."""
    if arr.dtype == object:  # TF strings: bytes objects
        items = list(arr.reshape(-1))
        if all(isinstance(v, bytes) and not v.endswith(b"\x00") for v in items):
            width = max((len(v) for v in items), default=1) or 1
            return np.array(items, dtype=f"S{width}").reshape(arr.shape), False
        warnings.append(f"rest.npz: string tensor {key!r} stored as a pickled object array "
                        f"(np.load(..., allow_pickle=True))")
        return arr, True
    if arr.dtype.kind == "V" or arr.dtype.name == "bfloat16":
        warnings.append(f"rest.npz: {arr.dtype.name} tensor {key!r} stored as its raw uint{8 * arr.dtype.itemsize} "
                        f"bit patterns")
        return arr.view(f"<u{arr.dtype.itemsize}"), False
    return arr, False


def _write_rest(r: _Reader, keys: list, target: Path, force: bool, warnings: list) -> None:
    from ..outputs import atomic_path

    with atomic_path(target, force=force, suffix=".npz") as tmp:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for k in keys:
                try:
                    arr = r.bundle.view(k)  # mapped; written straight from the file's pages
                except UnsupportedError as e:
                    warnings.append(f"rest.npz: tensor {k!r} not copied ({e.message})")
                    continue
                arr, pickle = _npz_array(arr, k, warnings)
                with zf.open(k + ".npy", "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=pickle)
                del arr
                r.release()


def _layer_weights(r: _Reader, e: CheckpointStack):
    """``layer_weights`` for :func:`gruconv.formats.keras3.build_stack_model`: one Keras array at a time.

    The arrays come from the stack's params through the one gate reorder
    (:func:`gruconv.keras_layout.to_keras_gru`); the params may be views of
    the mapped checkpoint, whose pages are dropped as soon as an array is
    built, so about one array's worth of checkpoint data is resident at a time."""
    from .keras3 import _params_weights

    default = _params_weights(e.stack)

    def weight(layer: int, d: int, i: int) -> np.ndarray:
        value = default(layer, d, i)
        r.release()
        return value

    return weight


def _targets(doc: CheckpointDoc, output: Path, opts: Options) -> tuple:
    """(as_dir, model targets, rest.npz target), every target checked before any work."""
    from ..outputs import check_target

    input = Path(doc.path)
    force = opts.force
    lower = output.name.lower()
    as_dir = output.is_dir() or not lower.endswith(".keras")
    if not as_dir and len(doc.stacks) > 1:
        scopes = ", ".join(repr(e.scope) for e in doc.stacks)
        raise UsageError(f"the checkpoint holds {len(doc.stacks)} GRU stacks ({scopes}): pass --rnn SCOPE to "
                         f"convert one into {output.name}, or a directory as OUTPUT for all", path=input)
    if as_dir and output.suffix.lower() in (".h5", ".hdf5", ".npz", ".json"):
        raise UsageError(f"a TF1 checkpoint converts to Keras 3 .keras models: name OUTPUT *.keras, or a "
                         f"directory (got {output.name!r})", path=input)
    if as_dir:
        if output.exists() and not output.is_dir():
            raise OutputError("output exists and is not a directory", path=output)
        parent = output.parent if str(output.parent) else Path(".")
        if not output.exists() and not parent.is_dir():
            raise OutputError(f"output directory {str(parent)!r} does not exist", path=output)
        if output.is_dir() and any(output.iterdir()) and not force:
            raise OutputError("output directory is not empty; pass --force to write into it", path=output)
        names, targets = set(), []
        for e in doc.stacks:
            stem, n = _file_stem(e.scope), 1
            while stem.lower() in names:
                n += 1
                stem = f"{_file_stem(e.scope)}_{n}"
            names.add(stem.lower())
            targets.append(output / f"{stem}.keras")
        rest_target = output / "rest.npz"
    else:
        targets = [output]
        rest_target = Path(str(output) + ".rest.npz")
        check_target(output, force=force)
        if doc.other_keys:
            check_target(rest_target, force=force)
    return as_dir, targets, rest_target


def check_outputs(doc: CheckpointDoc, output: Path, opts: Options) -> None:
    """Refuse what this conversion cannot or must not write, before any work is done."""
    if doc.stacks:
        for e in doc.stacks:
            _require_shape(e, doc.reader.where)
        _targets(doc, Path(output), opts)


def to_keras(doc: CheckpointDoc, opts: Optional[Options] = None) -> list:
    """``[(stack entry, model)]``: each stack as the Keras 3 model ``convert`` saves, in memory.

    Built with every optional input and output (initial states, final states)
    so verification can drive them all; ``convert`` adds only what was asked."""
    from . import keras3

    out = []
    for e in doc.stacks:
        _require_shape(e, doc.reader.where)
        out.append((e, keras3.build_stack_model(e.stack, initial_state=True, return_state=True, name=e.scope)))
    return out


def convert(doc: CheckpointDoc, output: Path, opts: Optional[Options] = None) -> ConvertResult:
    """Convert the checkpoint's GRU stack(s) into Keras 3 ``.keras`` model(s) plus ``rest.npz``.

    One stack: ``output`` is a ``.keras`` file and the other tensors go to
    ``<output>.rest.npz``.  Several stacks (and no ``rnn``): ``output`` is a
    directory that receives ``<scope with / as __>.keras`` per stack and
    ``rest.npz``.  Everything is written atomically.
    """
    from ..outputs import atomic_path
    from . import keras3

    opts = opts or Options()
    force, prefer = opts.force, opts.prefer
    input, output = Path(doc.path), Path(output)
    r = doc.reader
    result = ConvertResult(input=str(input), format=FORMAT)
    result.warnings.extend(doc.warnings)
    if not doc.stacks:
        if doc.possible_buffers:
            cand = ", ".join(f"{p['key']} ({p['size']} {p['dtype']} values)" for p in doc.possible_buffers[:5])
            raise UsageError(f"no cuDNN GRU stack identified (no opaque_kernel, no canonical GRU tensors); "
                             f"1-D tensors that may be an opaque buffer: {cand}. Pass --variable KEY and "
                             f"shape hints (--num-units, --input-size, --num-layers, --direction, --input-mode)",
                             path=r.where)
        result.nothing_to_convert = True
        return result
    for e in doc.stacks:
        _require_shape(e, r.where)

    as_dir, targets, rest_target = _targets(doc, output, opts)

    for e in doc.stacks:
        cc = e.cross_check
        if cc.status == "disagree":
            used = "opaque buffer" if prefer == "opaque" else "canonical tensors"
            diff = (f"max abs diff {cc.max_abs_diff:.6g} at {cc.where}" if cc.max_abs_diff is not None
                    else cc.detail)
            result.warnings.append(
                f"{e.scope}: opaque buffer {e.opaque_key!r} disagrees with the canonical tensors ({diff}); "
                f"it is not in cuDNN 9.19 layout. Weights taken from the {used}")
        if e.slots:
            result.warnings.append(
                f"{e.scope}: optimizer slots of the opaque buffer dropped (they follow the cuDNN layout; the "
                f"converted model starts with a fresh optimizer): {', '.join(e.slots)}")

    created = False
    if as_dir and not output.exists():
        try:
            output.mkdir()
        except OSError as err:
            raise OutputError(f"cannot create output directory ({err.strerror or err})", path=output) from None
        created = True
    try:
        for e, target in zip(doc.stacks, targets):
            model = keras3.build_stack_model(e.stack, initial_state=opts.initial_state,
                                             return_state=opts.return_state, mask_input=opts.mask_input,
                                             name=e.scope or "gru_stack",
                                             layer_weights=_layer_weights(r, e))
            r.release()
            with atomic_path(target, force=True if as_dir else force, suffix=".keras") as tmp:
                keras3.save(model, tmp)
            result.outputs.append(str(target))
            result.rnns.append(dict(_rnn_entry(e), output=str(target)))
        if doc.other_keys:
            _write_rest(r, doc.other_keys, rest_target, True if as_dir else force, result.warnings)
            result.outputs.append(str(rest_target))
    except BaseException:
        if created:  # leave no half-filled directory behind
            with contextlib.suppress(OSError):
                for f in result.outputs:
                    Path(f).unlink()
                output.rmdir()
        raise
    return result
