"""Run the real cuDNN RNN forward pass (GRU or LSTM) from Python, through ctypes, with no framework.

Finding and loading the libraries is :mod:`gruconv.verify.reference.cudnn_lib`; this module is
the RNN call: descriptors, weight-space queries, ``cudnnRNNForward``, the
math-mode candidates and the input checks.  The cuDNN cell mode comes from
``shape.cell`` (:data:`MODES`); gate counts from ``shape.gates``.

Public API::

    run(opaque, shape, x, h0=None, c0=None, seq_lengths=None, *, allow_tf32=False)
        -> (y, hy, cy, info)                  # cy is None for a GRU
    weight_regions(shape) -> [WeightRegion]   # cudnnGetRNNWeightParams, storage order
    weight_space_bytes(shape) -> int          # cudnnGetRNNWeightSpaceSize
    rnn_mode(shape_or_cell) -> int            # CUDNN_GRU / CUDNN_LSTM
    check_inputs(opaque, shape, x, h0, c0, seq_lengths) -> Inputs   # no GPU needed

Descriptor settings are those of the golden files in ``shared/cudnn-golden``
(GRU) and ``fixtures/cudnn-golden-lstm`` (LSTM): ``CUDNN_GRU`` or
``CUDNN_LSTM``, ``CUDNN_RNN_ALGO_STANDARD``, ``CUDNN_RNN_DOUBLE_BIAS``,
projection size = hidden size, dropout 0,
``CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED`` with
``CUDNN_RNN_PADDED_IO_ENABLED`` and padding fill 0, inference mode.  An
LSTM's ``cx``/``cy`` use the same tensor descriptor as ``hx``/``hy``.
float32 runs use ``CUDNN_FMA_MATH`` (strict fp32) unless ``allow_tf32`` asks
for ``CUDNN_DEFAULT_MATH`` (TF32 tensor cores allowed).

Self-report on a GPU machine::

    python -m gruconv.verify.reference.cudnn_rnn [GOLDEN_DIR ...] [--maps]

prints :func:`gruconv.verify.reference.cudnn_lib.library_info` and, per golden ``.npz`` file
(GRU files of ``shared/cudnn-golden``, LSTM files of
``fixtures/cudnn-golden-lstm``; an LSTM file is one with ``c0``), the
errors of a strict fp32, a TF32 and a float64 run against the stored
outputs.  Exit status 0 when every strict error is <= 1e-6, 1 otherwise,
3 when cuDNN cannot run here.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
import sys
from dataclasses import dataclass
from typing import Optional

import numpy as np

from . import cudnn_lib
from ...model.canonical import CELLS, StackShape
from ...model.cudnn_layout import params_size
from .cudnn_lib import CudaCallError, Libraries, Resources
from ...errors import InputError

__all__ = ["run", "weight_regions", "weight_space_bytes", "rnn_mode", "check_inputs", "Inputs",
           "WeightRegion", "MODES", "CUDNN_GRU", "CUDNN_LSTM"]

# --------------------------------------------------------------------------- enums
# cudnn_graph.h
CUDNN_DATA_FLOAT, CUDNN_DATA_DOUBLE, CUDNN_DATA_HALF = 0, 1, 2
CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, CUDNN_FMA_MATH = 0, 1, 2, 3
# cudnn_adv.h (cudnnRNNMode_t: RELU 0, TANH 1, LSTM 2, GRU 3)
CUDNN_RNN_RELU, CUDNN_RNN_TANH, CUDNN_LSTM, CUDNN_GRU = 0, 1, 2, 3
CUDNN_RNN_ALGO_STANDARD = 0
#: cudnnRNNAlgo_t by name.  ``standard`` is the reference's; the persistent kernels are what a
#: framework may pick for the same layer (torch takes ``persist_static_small_h`` for small hidden sizes
#: on unpacked fp32 input: ``scripts/gpu_cudnn_variants.py``, docs/gpu-verification.md 2026-11-27), and
#: they round differently.  ``persist_dynamic`` is compiled at run time (cudnnBuildRNNDynamic, NVRTC).
ALGORITHMS = {"standard": 0, "persist_static": 1, "persist_dynamic": 2, "persist_static_small_h": 3}
CUDNN_RNN_DOUBLE_BIAS = 2
CUDNN_UNIDIRECTIONAL, CUDNN_BIDIRECTIONAL = 0, 1
CUDNN_LINEAR_INPUT, CUDNN_SKIP_INPUT = 0, 1
CUDNN_FWD_MODE_INFERENCE = 0
CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED = 0
CUDNN_RNN_PADDED_IO_ENABLED = 1

#: cell name (:data:`gruconv.model.canonical.CELLS`) -> cuDNN's ``cudnnRNNMode_t``.
MODES = {"gru": CUDNN_GRU, "lstm": CUDNN_LSTM}

_MODE_NAMES = {CUDNN_RNN_RELU: "CUDNN_RNN_RELU", CUDNN_RNN_TANH: "CUDNN_RNN_TANH", CUDNN_LSTM: "CUDNN_LSTM",
               CUDNN_GRU: "CUDNN_GRU"}
_DTYPE_NAMES = {CUDNN_DATA_FLOAT: "CUDNN_DATA_FLOAT", CUDNN_DATA_DOUBLE: "CUDNN_DATA_DOUBLE",
                CUDNN_DATA_HALF: "CUDNN_DATA_HALF"}
_DTYPE_ITEMSIZE = {CUDNN_DATA_FLOAT: 4, CUDNN_DATA_DOUBLE: 8, CUDNN_DATA_HALF: 2}
_MATH_NAMES = {CUDNN_DEFAULT_MATH: "CUDNN_DEFAULT_MATH", CUDNN_TENSOR_OP_MATH: "CUDNN_TENSOR_OP_MATH",
               CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION",
               CUDNN_FMA_MATH: "CUDNN_FMA_MATH"}

_vp = ctypes.c_void_p


def rnn_mode(shape_or_cell) -> int:
    """cuDNN's ``cudnnRNNMode_t`` for a :class:`StackShape` or a cell name; InputError if it has none."""
    cell = shape_or_cell.cell if isinstance(shape_or_cell, StackShape) else shape_or_cell
    try:
        return MODES[cell]
    except (KeyError, TypeError):
        raise InputError(f"no cuDNN RNN mode for cell {cell!r} (known: {', '.join(MODES)})") from None


# --------------------------------------------------------------------------- math modes
def _math_candidates(dtype: np.dtype, allow_tf32: bool) -> list:
    """(cuDNN data type, math precision, math type) to try, in order."""
    if dtype == np.float32:
        # Never falls back: strict fp32 must not silently become TF32, nor the reverse.
        return [(CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH if allow_tf32 else CUDNN_FMA_MATH)]
    if dtype == np.float64:
        return [(CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_FMA_MATH),
                (CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH)]
    # float16: float32 accumulation ("pseudo half") first.
    return [(CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH),
            (CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH),
            (CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_TENSOR_OP_MATH)]


def _retryable(status: int) -> bool:
    """BAD_PARAM / NOT_SUPPORTED families (cuDNN 9: 2xxx, 3xxx; cuDNN 8: 3, 9)."""
    return 2000 <= status < 4000 or status in (3, 9)


def _each_candidate(libs: Libraries, candidates: list, call) -> tuple:
    """``call(candidate)`` for the first candidate cuDNN accepts; (result, failed attempts)."""
    attempts = []
    with libs.lock:
        for n, cand in enumerate(candidates):
            try:
                return call(cand), attempts
            except CudaCallError as e:
                if n + 1 < len(candidates) and _retryable(e.status):
                    attempts.append(f"{_DTYPE_NAMES[cand[1]]}/{_MATH_NAMES[cand[2]]}: {e}")
                    continue
                raise
    raise AssertionError("unreachable")  # pragma: no cover


# --------------------------------------------------------------------------- input checks
@dataclass
class Inputs:
    """Checked, contiguous host arrays for one call (all in ``dtype``; ``c0`` None for a GRU)."""

    opaque: np.ndarray
    dtype: np.dtype
    x: np.ndarray
    h0: np.ndarray
    c0: Optional[np.ndarray]
    lengths: np.ndarray
    T: int
    B: int


def _state(value, name: str, shape: tuple, dtype) -> np.ndarray:
    if value is None:
        return np.zeros(shape, dtype=dtype)
    arr = np.asarray(value)
    if tuple(arr.shape) != shape:
        raise InputError(f"{name} must have shape [layers*dirs, B, H] = {list(shape)}, got {list(arr.shape)}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise InputError(f"{name} must be floating point, got {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=dtype)


def check_inputs(opaque, shape, x, h0=None, c0=None, seq_lengths=None) -> Inputs:
    """Check and normalise :func:`run`'s inputs (no GPU needed); InputError with a one-line message."""
    if not isinstance(shape, StackShape):
        raise InputError(f"shape must be a gruconv.model.canonical.StackShape, got {type(shape).__name__}")
    rnn_mode(shape)
    opaque = np.asarray(opaque)
    if opaque.dtype not in (np.float16, np.float32, np.float64):
        raise InputError(f"opaque buffer must be float16, float32 or float64, got {opaque.dtype}")
    dtype = opaque.dtype
    opaque = np.ascontiguousarray(opaque.reshape(-1))
    x = np.asarray(x)
    if x.ndim != 3 or x.shape[2] != shape.input_size or x.shape[0] < 1 or x.shape[1] < 1:
        raise InputError(f"x must be time-major [T, B, {shape.input_size}] with T, B >= 1, "
                         f"got shape {tuple(x.shape)}")
    if not np.issubdtype(x.dtype, np.floating):
        raise InputError(f"x must be floating point, got {x.dtype}")
    T, B = int(x.shape[0]), int(x.shape[1])
    x = np.ascontiguousarray(x, dtype=dtype)
    state_shape = (shape.num_pseudo_layers, B, shape.units)
    h0 = _state(h0, "h0", state_shape, dtype)
    if "c" in shape.cell_spec.states:
        c0 = _state(c0, "c0", state_shape, dtype)
    elif c0 is not None:
        raise InputError(f"c0 given, but a {shape.cell_spec.title} has no cell state (states: "
                         f"{', '.join(shape.cell_spec.states)})")
    if seq_lengths is None:
        lengths = np.full(B, T, dtype=np.int32)
    else:
        raw = np.asarray(seq_lengths)
        if raw.shape != (B,) or not np.issubdtype(raw.dtype, np.integer):
            raise InputError(f"seq_lengths must be {B} integers (one per batch entry), got "
                             f"{raw.dtype} array of shape {tuple(raw.shape)}")
        if raw.min() < 1 or raw.max() > T:
            raise InputError(f"seq_lengths must lie in 1..T={T}, got {raw.tolist()}")
        lengths = np.ascontiguousarray(raw, dtype=np.int32)
    return Inputs(opaque, dtype, x, h0, c0, lengths, T, B)


# --------------------------------------------------------------------------- descriptors
def _rnn_descriptor(res: Resources, shape: StackShape, cand: tuple, algo: str = "standard") -> tuple:
    """Dropout (0) and RNN descriptors for ``shape`` run by cuDNN algorithm ``algo`` (:data:`ALGORITHMS`);
    returns (rnn descriptor, dropout states bytes)."""
    libs = res.libs
    dn, handle = libs.cudnn, libs.handle
    data_type, math_prec, math_type = cand
    # Dropout descriptor (dropout 0, but cuDNN still wants initialised RNG states).
    dropout = res.create("DropoutDescriptor")
    states_size = ctypes.c_size_t(0)
    libs.cudnn_check(dn.cudnnDropoutGetStatesSize(handle, ctypes.byref(states_size)),
                     "cudnnDropoutGetStatesSize")
    states = res.malloc(states_size.value, "dropout states")
    libs.cudnn_check(dn.cudnnSetDropoutDescriptor(dropout, handle, ctypes.c_float(0.0), states,
                                                  states_size, ctypes.c_ulonglong(0)),
                     "cudnnSetDropoutDescriptor")
    rnn = res.create("RNNDescriptor")
    H = shape.units
    libs.cudnn_check(dn.cudnnSetRNNDescriptor_v8(
        rnn, ALGORITHMS[algo], rnn_mode(shape), CUDNN_RNN_DOUBLE_BIAS,
        CUDNN_BIDIRECTIONAL if shape.bidirectional else CUDNN_UNIDIRECTIONAL,
        CUDNN_SKIP_INPUT if shape.input_mode == "skip" else CUDNN_LINEAR_INPUT,
        data_type, math_prec, math_type,
        shape.input_size, H, H, shape.num_layers, dropout, CUDNN_RNN_PADDED_IO_ENABLED),
        "cudnnSetRNNDescriptor_v8")
    return rnn, int(states_size.value)


def _weight_space_size(libs: Libraries, rnn) -> int:
    size = ctypes.c_size_t(0)
    libs.cudnn_check(libs.cudnn.cudnnGetRNNWeightSpaceSize(libs.handle, rnn, ctypes.byref(size)),
                     "cudnnGetRNNWeightSpaceSize")
    return int(size.value)


def _describe(shape: StackShape) -> str:
    return f"{shape.cell_spec.title} ({shape.describe()})"


# --------------------------------------------------------------------------- the forward call
def run(opaque: np.ndarray, shape: StackShape, x: np.ndarray, h0: Optional[np.ndarray] = None,
        c0: Optional[np.ndarray] = None, seq_lengths: Optional[np.ndarray] = None, *,
        allow_tf32: bool = False, algo: str = "standard") -> tuple:
    """Run cuDNN's forward pass (inference) of ``shape.cell`` on an opaque weight buffer.

    ``opaque``: the weight space exactly as cuDNN holds it (1-D; its dtype,
    float16/32/64, selects the run's precision; ``shape.dtype`` is not
    consulted). ``x``: time-major ``[T, B, input_size]``; ``h0`` and (LSTM
    only; a GRU refuses it) ``c0``: ``[layers*dirs, B, H]`` (zeros if None);
    ``seq_lengths``: ``[B]`` in ``1..T`` (all ``T`` if None).

    Returns ``(y, hy, cy, info)``: ``y [T, B, H*dirs]``, ``hy`` and ``cy``
    ``[layers*dirs, B, H]`` (dtype of ``opaque``; ``cy`` None for a GRU) and
    an info dict (:func:`gruconv.verify.reference.cudnn_lib.library_info` plus the cell mode,
    the math mode used and buffer sizes).

    ``algo``: the cuDNN algorithm (:data:`ALGORITHMS`; ``standard`` unless asked).  A shape an
    algorithm does not take fails with cuDNN's NOT_SUPPORTED as :class:`CudaCallError`.

    Outputs past a sequence's length are cuDNN's padding fill (0).  The
    output buffers are poisoned with NaN bytes before the call, so anything
    cuDNN did not write shows up as NaN rather than as plausible numbers.
    """
    inp = check_inputs(opaque, shape, x, h0, c0, seq_lengths)
    if algo not in ALGORITHMS:
        raise ValueError(f"algo must be one of {', '.join(ALGORITHMS)}, got {algo!r}")
    libs = cudnn_lib.load()
    (y, hy, cy, info), attempts = _each_candidate(
        libs, _math_candidates(inp.dtype, allow_tf32), lambda cand: _forward(libs, cand, shape, inp, algo))
    info.update(libs.info())
    info["allow_tf32"] = bool(allow_tf32)
    info["math_attempts_failed"] = attempts
    return y, hy, cy, info


def _forward(libs: Libraries, cand: tuple, shape: StackShape, inp: Inputs, algo: str = "standard") -> tuple:
    dn = libs.cudnn
    data_type, math_prec, math_type = cand
    H, L, D = shape.units, shape.num_layers, shape.num_directions
    T, B, opaque = inp.T, inp.B, inp.opaque
    has_c = inp.c0 is not None
    y_host = np.empty((T, B, H * D), dtype=inp.dtype)
    hy_host = np.empty(inp.h0.shape, dtype=inp.dtype)
    cy_host = np.empty(inp.h0.shape, dtype=inp.dtype) if has_c else None
    fill = np.zeros(1, dtype=inp.dtype)
    seq_host = (ctypes.c_int * B)(*[int(v) for v in inp.lengths])

    with Resources(libs) as res:
        handle = libs.handle
        rnn, states_bytes = _rnn_descriptor(res, shape, cand, algo)
        if algo == "persist_dynamic":  # its kernel is compiled for this batch size before any call
            libs.cudnn_check(dn.cudnnBuildRNNDynamic(handle, rnn, ctypes.c_int(B)), "cudnnBuildRNNDynamic")
        ws_size = _weight_space_size(libs, rnn)
        if ws_size != opaque.nbytes:
            itemsize = opaque.dtype.itemsize
            raise InputError(
                f"opaque buffer has {opaque.size} {opaque.dtype} values ({opaque.nbytes} bytes), but cuDNN "
                f"{cudnn_lib.format_cudnn_version(libs.cudnn_version)} needs a weight space of {ws_size} bytes "
                f"({ws_size // itemsize} values) for a {_describe(shape)} (the canonical layout has "
                f"{params_size(shape)}): the buffer was laid out for another shape or another cuDNN")

        x_desc = res.create("RNNDataDescriptor")
        libs.cudnn_check(dn.cudnnSetRNNDataDescriptor(
            x_desc, data_type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, T, B, shape.input_size,
            seq_host, fill.ctypes.data_as(_vp)), "cudnnSetRNNDataDescriptor(x)")
        y_desc = res.create("RNNDataDescriptor")
        libs.cudnn_check(dn.cudnnSetRNNDataDescriptor(
            y_desc, data_type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, T, B, H * D,
            seq_host, fill.ctypes.data_as(_vp)), "cudnnSetRNNDataDescriptor(y)")
        # One descriptor for every state: hx/hy and (LSTM) cx/cy are all [L*D, B, H].
        h_desc = res.create("TensorDescriptor")
        dims = (ctypes.c_int * 3)(L * D, B, H)
        strides = (ctypes.c_int * 3)(B * H, H, 1)
        libs.cudnn_check(dn.cudnnSetTensorNdDescriptor(h_desc, data_type, 3, dims, strides),
                         "cudnnSetTensorNdDescriptor(h)")

        work_size, reserve_size = ctypes.c_size_t(0), ctypes.c_size_t(0)
        libs.cudnn_check(dn.cudnnGetRNNTempSpaceSizes(handle, rnn, CUDNN_FWD_MODE_INFERENCE, x_desc,
                                                      ctypes.byref(work_size), ctypes.byref(reserve_size)),
                         "cudnnGetRNNTempSpaceSizes")

        d_weights = res.upload(opaque, "weight space")
        d_x = res.upload(inp.x, "x")
        d_h0 = res.upload(inp.h0, "hx")
        d_c0 = res.upload(inp.c0, "cx") if has_c else None
        d_seq = res.upload(inp.lengths, "devSeqLengths")
        outs = [("y", y_host), ("hy", hy_host)] + ([("cy", cy_host)] if has_c else [])
        dev = {}
        for what, host in outs:
            dev[what] = res.malloc(host.nbytes, what)
            # 0xFF bytes are NaN in float16/32/64: whatever cuDNN leaves unwritten shows up.
            res.memset(dev[what], 0xFF, host.nbytes, what)
        d_work = res.malloc(work_size.value, "workspace")
        d_reserve = res.malloc(reserve_size.value, "reserve space")

        libs.cudnn_check(dn.cudnnRNNForward(
            handle, rnn, CUDNN_FWD_MODE_INFERENCE, d_seq,
            x_desc, d_x, y_desc, dev["y"],
            h_desc, d_h0, dev["hy"],
            h_desc, d_c0, dev.get("cy"),
            ctypes.c_size_t(opaque.nbytes), d_weights,
            work_size, d_work, reserve_size, d_reserve), "cudnnRNNForward")
        res.synchronize("cudnnRNNForward")
        for what, host in outs:
            res.download(dev[what], host, what)
        info = {
            "cell": shape.cell,
            "rnn_mode": _MODE_NAMES[rnn_mode(shape)],
            "data_type": _DTYPE_NAMES[data_type],
            "math_precision": _DTYPE_NAMES[math_prec],
            "math_type": _MATH_NAMES[math_type],
            "algo": f"CUDNN_RNN_ALGO_{algo.upper()}",
            "weight_space_bytes": ws_size,
            "workspace_bytes": int(work_size.value),
            "reserve_space_bytes": int(reserve_size.value),
            "dropout_states_bytes": states_bytes,
        }
    return y_host, hy_host, cy_host, info


# --------------------------------------------------------------------------- weight-space queries
@dataclass(frozen=True)
class WeightRegion:
    """One matrix or bias of the weight space, as ``cudnnGetRNNWeightParams`` reports it.

    ``dims``/``strides``: the tensor descriptor cuDNN filled in (cuDNN 9:
    matrices ``[1, rows, cols]``, biases ``[1, H, 1]``); ``shape`` drops the
    descriptor's padding dimensions (``(rows, cols)`` or ``(H,)``), the form
    :func:`gruconv.model.cudnn_layout.iter_matrix_regions` uses.
    """

    pseudo_layer: int
    kind: str            # "matrix" or "bias"
    lin_layer_id: int
    byte_offset: int     # from the start of the weight space
    nbytes: int
    dims: tuple
    strides: tuple
    data_type: str

    @property
    def shape(self) -> tuple:
        if self.kind == "bias":
            return (int(np.prod(self.dims)),)
        return tuple(self.dims[1:]) if len(self.dims) == 3 and self.dims[0] == 1 else tuple(self.dims)


def _read_descriptor(libs: Libraries, desc) -> tuple:
    data_type, nb = ctypes.c_int(-1), ctypes.c_int(0)
    dims, strides = (ctypes.c_int * 8)(), (ctypes.c_int * 8)()
    libs.cudnn_check(libs.cudnn.cudnnGetTensorNdDescriptor(desc, 8, ctypes.byref(data_type), ctypes.byref(nb),
                                                           dims, strides), "cudnnGetTensorNdDescriptor")
    n = nb.value
    return int(data_type.value), tuple(int(v) for v in dims[:n]), tuple(int(v) for v in strides[:n])


def _descriptor_candidates(shape: StackShape) -> list:
    return _math_candidates(np.dtype(shape.dtype), False)


def weight_space_bytes(shape: StackShape) -> int:
    """``cudnnGetRNNWeightSpaceSize`` for a descriptor built from ``shape`` (its ``dtype``)."""
    if not isinstance(shape, StackShape):
        raise InputError(f"shape must be a gruconv.model.canonical.StackShape, got {type(shape).__name__}")
    libs = cudnn_lib.load()

    def call(cand):
        with Resources(libs) as res:
            rnn, _ = _rnn_descriptor(res, shape, cand)
            return _weight_space_size(libs, rnn)

    return _each_candidate(libs, _descriptor_candidates(shape), call)[0]


def weight_regions(shape: StackShape) -> list:
    """Every matrix and bias region cuDNN reports for a descriptor built from ``shape``.

    Asks ``cudnnGetRNNWeightParams(pseudoLayer, linLayerID)`` for every
    pseudo-layer and linLayerID ``0 .. 2*shape.gates - 1`` (the weight space
    is a real device allocation of ``cudnnGetRNNWeightSpaceSize`` bytes; only
    addresses are read, no data).  A region cuDNN reports as absent (NULL
    address: skip input's layer-0 input matrices) is left out.  Returns
    :class:`WeightRegion` s sorted by byte offset (storage order), for
    comparing with :func:`gruconv.model.cudnn_layout.iter_matrix_regions`.
    """
    if not isinstance(shape, StackShape):
        raise InputError(f"shape must be a gruconv.model.canonical.StackShape, got {type(shape).__name__}")
    libs = cudnn_lib.load()
    dn = libs.cudnn

    def call(cand):
        out = []
        with Resources(libs) as res:
            rnn, _ = _rnn_descriptor(res, shape, cand)
            ws_size = _weight_space_size(libs, rnn)
            base = res.malloc(ws_size, "weight space")
            m_desc = res.create("TensorDescriptor")
            b_desc = res.create("TensorDescriptor")
            for p in range(shape.num_pseudo_layers):
                for lin in range(shape.cell_spec.num_linear_layers):
                    m_addr, b_addr = _vp(), _vp()
                    libs.cudnn_check(dn.cudnnGetRNNWeightParams(
                        libs.handle, rnn, p, ctypes.c_size_t(ws_size), base, lin,
                        m_desc, ctypes.byref(m_addr), b_desc, ctypes.byref(b_addr)),
                        f"cudnnGetRNNWeightParams(pseudoLayer={p}, linLayerID={lin})")
                    for kind, addr, desc in (("matrix", m_addr, m_desc), ("bias", b_addr, b_desc)):
                        if not addr.value:
                            continue
                        dt, dims, strides = _read_descriptor(libs, desc)
                        itemsize = _DTYPE_ITEMSIZE.get(dt, 0)
                        out.append(WeightRegion(p, kind, lin, int(addr.value - base.value),
                                                int(np.prod(dims)) * itemsize, dims, strides,
                                                _DTYPE_NAMES.get(dt, str(dt))))
        out.sort(key=lambda r: (r.byte_offset, r.pseudo_layer, r.lin_layer_id))
        return out

    return _each_candidate(libs, _descriptor_candidates(shape), call)[0]


# --------------------------------------------------------------------------- self-report
def _golden_shape(g: dict, dtype: str = "float32") -> Optional[StackShape]:
    """The shape of a golden file (GRU files have no ``c0``); None for one gruconv cannot run (projection)."""
    c = g["config"]
    if int(c.get("P", c["H"])) != int(c["H"]):
        return None
    states = tuple(s for s in ("h", "c") if f"{s}0" in g)
    cell = next((name for name, spec in CELLS.items() if spec.states == states), None)
    if cell is None:
        raise ValueError(f"golden file with states {states} matches no cell of {tuple(CELLS)}")
    return StackShape(c["I"], c["H"], c["L"], c["bidir"], "skip" if c["skip"] else "linear", dtype, cell)


def _main(argv=None) -> int:
    """``python -m gruconv.verify.reference.cudnn_rnn [GOLDEN_DIR ...]``: report the libraries, and errors per golden file."""
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m gruconv.verify.reference.cudnn_rnn", description=_main.__doc__)
    ap.add_argument("golden_dir", nargs="*", help="directories of cuDNN golden .npz files (GRU or LSTM) to check")
    ap.add_argument("--maps", action="store_true",
                    help="at the end, list the CUDA/cuDNN libraries this process has mapped")
    args = ap.parse_args(argv)
    ok, reason = cudnn_lib.available()
    print(f"available: {ok}: {reason}")
    if not ok:
        if args.maps:
            _print_maps()
        return 3
    print(json.dumps(cudnn_lib.library_info(), indent=2))
    if not args.golden_dir:
        return 0
    worst = 0.0
    for path in sorted(p for d in args.golden_dir for p in glob.glob(os.path.join(d, "*.npz"))):
        with np.load(path) as d:
            g = {k: d[k] for k in d.files}
        g["config"] = json.loads(str(g["config"]))
        shape = _golden_shape(g)
        if shape is None:
            print(f"{os.path.basename(path)}: skipped (projection size != hidden size)")
            continue
        feed = (g["x"], g["h0"], g.get("c0"), g["seq_lengths"])
        # LSTM golden files keep no float64 buffer: theirs is the float32 one cast (same offsets).
        opaque64 = g.get("opaque_f64", g["opaque"].astype(np.float64))
        y, hy, cy, _ = run(g["opaque"], shape, *feed)
        yt, _, _, _ = run(g["opaque"], shape, *feed, allow_tf32=True)
        y64, hy64, cy64, info64 = run(opaque64, shape, *feed)
        strict = max(np.abs(y - g["y"]).max(), np.abs(hy - g["hy"]).max(),
                     np.abs(cy - g["cy"]).max() if cy is not None else 0.0)
        f64 = max(np.abs(y64 - g["y_f64"]).max(), np.abs(hy64 - g["hy_f64"]).max(),
                  np.abs(cy64 - g["cy_f64"]).max() if cy64 is not None else 0.0)
        worst = max(worst, float(strict))
        states = "y,hy,cy" if cy is not None else "y,hy"
        print(f"{os.path.basename(path)} [{shape.cell_spec.title}]: strict |{states} - golden| {strict:.3e}  "
              f"strict-vs-f64 {np.abs(y - g['y_f64']).max():.3e}  "
              f"tf32-vs-f64 {np.abs(yt - g['y_f64']).max():.3e} "
              f"(golden default-math {np.abs(g['y_default_math'] - g['y_f64']).max():.3e})  "
              f"f64 |{states} - f64 golden| {f64:.3e} [{info64['math_type']}]")
    print(f"worst strict error: {worst:.3e}")
    if args.maps:
        _print_maps()
    return 0 if worst <= 1e-6 else 1


def _print_maps() -> None:
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "/" in line
                            and re.search(r"lib(cudnn|cublas|cudart|nvrtc)", line)})
    except OSError as e:  # pragma: no cover
        print(f"/proc/self/maps unreadable: {e}")
        return
    print("mapped CUDA/cuDNN libraries:")
    for p in paths:
        print(f"  {p}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(_main())
