#!/usr/bin/env python3
"""Make real-cuDNN LSTM golden files: canonical weights -> opaque weight space -> cudnnRNNForward.

Standalone (NumPy + ctypes only; never imports gruconv, torch, jax or tensorflow unless
``--torch-check`` asks for a PyTorch cross-check).  For each LSTM configuration in CONFIGS it

1. draws canonical per-gate weights (seeded): input matrices ``W{p}_{k}`` (k = 0..3), recurrent
   matrices ``W{p}_{k}`` (k = 4..7), biases ``b{p}_{k}`` (k = 0..7) and, with a projection,
   ``W{p}_8``.  cuDNN's linLayerID convention for ``CUDNN_LSTM`` (cudnnGetRNNWeightParams docs):
   0/4 input gate i, 1/5 forget gate f, 2/6 new-memory (cell candidate) gate c~, 3/7 output gate o,
   8 the recurrent projection (only with projSize < hiddenSize);
2. asks cuDNN where each region lives (``cudnnGetRNNWeightParams``), records offset and descriptor
   dims, copies each canonical array there (row-major), and reads the whole weight space back
   (``opaque``) - what TensorFlow's ``CudnnRNNCanonicalToParams`` does;
3. checks the measured region offsets against the hypothesis "all matrices first (pseudo-layer order,
   linLayerID 0..7 then 8, each [rows, cols] row-major), then all biases in the same order; skip
   input: layer 0 has no input matrices" and that the regions tile the buffer with no gap;
4. runs ``cudnnRNNForward`` (inference) in float32 strict (``CUDNN_FMA_MATH``), float32 with
   ``CUDNN_DEFAULT_MATH`` (TF32 tensor cores allowed), float32 with
   ``CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION`` (measured only, not stored) and float64;
5. compares cuDNN's float64 outputs with ``lstm_oracle`` (float64 NumPy) and writes one ``.npz`` per
   configuration plus a README.md and summary.json.

LSTM as cuDNN computes it (double bias)::

    i  = sigmoid(W_i x + b_Wi + R_i h + b_Ri)        linLayerID 0 / 4
    f  = sigmoid(W_f x + b_Wf + R_f h + b_Rf)        linLayerID 1 / 5
    c~ = tanh   (W_c x + b_Wc + R_c h + b_Rc)        linLayerID 2 / 6
    o  = sigmoid(W_o x + b_Wo + R_o h + b_Ro)        linLayerID 3 / 7
    c' = f * c + i * c~
    h' = o * tanh(c')            (with a projection: h' = P (o * tanh(c')), P = linLayerID 8)

Usage::

    python3 scripts/make_lstm_golden.py --out OUTDIR [--torch-check] [--tar FILE]
    python3 scripts/make_lstm_golden.py --fake --out /tmp/x   # CPU dry run: a fake cuDNN that
                                                              # implements the hypothesis
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import datetime
import glob
import json
import os
import platform
import re
import subprocess
import sys
import tarfile
import traceback

import numpy as np

# --------------------------------------------------------------------------- configurations
# P: projection size (== H means none).  skip needs I == H.
CONFIGS = [
    dict(name="lstm_1l_uni", I=5, H=7, L=1, bidir=False, skip=False, T=9, B=3, seed=101, varlen=False),
    dict(name="lstm_1l_uni_h1", I=3, H=1, L=1, bidir=False, skip=False, T=6, B=2, seed=102, varlen=False),
    dict(name="lstm_2l_uni", I=4, H=6, L=2, bidir=False, skip=False, T=8, B=3, seed=103, varlen=False),
    dict(name="lstm_2l_uni_skip", I=6, H=6, L=2, bidir=False, skip=True, T=7, B=2, seed=104, varlen=False),
    dict(name="lstm_1l_bidir_skip", I=8, H=8, L=1, bidir=True, skip=True, T=6, B=3, seed=105, varlen=False),
    dict(name="lstm_2l_bidir", I=3, H=5, L=2, bidir=True, skip=False, T=7, B=2, seed=106, varlen=False),
    dict(name="lstm_2l_bidir_varlen", I=6, H=10, L=2, bidir=True, skip=False, T=12, B=5, seed=107,
         varlen=True),
    dict(name="lstm_3l_bidir_12x24", I=12, H=24, L=3, bidir=True, skip=False, T=10, B=2, seed=108,
         varlen=False),
    dict(name="lstm_1l_uni_8x256", I=8, H=256, L=1, bidir=False, skip=False, T=6, B=2, seed=109,
         varlen=False),
    dict(name="lstm_2l_bidir_proj", I=6, H=8, P=5, L=2, bidir=True, skip=False, T=7, B=3, seed=110,
         varlen=True),
]
GATES = ("i", "f", "c", "o")  # cuDNN order of linLayerIDs 0..3 (input side) and 4..7 (recurrent side)

# --------------------------------------------------------------------------- cuDNN enums
CUDNN_DATA_FLOAT, CUDNN_DATA_DOUBLE = 0, 1
CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, CUDNN_FMA_MATH = 0, 1, 2, 3
MATH_NAMES = {0: "CUDNN_DEFAULT_MATH", 1: "CUDNN_TENSOR_OP_MATH",
              2: "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION", 3: "CUDNN_FMA_MATH"}
CUDNN_RNN_ALGO_STANDARD = 0
CUDNN_LSTM = 2
CUDNN_RNN_DOUBLE_BIAS = 2
CUDNN_UNIDIRECTIONAL, CUDNN_BIDIRECTIONAL = 0, 1
CUDNN_LINEAR_INPUT, CUDNN_SKIP_INPUT = 0, 1
CUDNN_FWD_MODE_INFERENCE = 0
CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED = 0
CUDNN_RNN_PADDED_IO_ENABLED = 1
H2D, D2H = 1, 2

# The runs: (key suffix, numpy dtype, math type, stored in the npz)
RUNS = [("", np.float32, CUDNN_FMA_MATH, True),
        ("_default_math", np.float32, CUDNN_DEFAULT_MATH, True),
        ("_tensor_op_conv", np.float32, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, False),
        ("_f64", np.float64, CUDNN_FMA_MATH, True)]


class CudnnStatusError(RuntimeError):
    def __init__(self, fn, status, text):
        super().__init__(f"{fn} failed: status {status} ({text})")
        self.fn, self.status, self.text = fn, status, text


# --------------------------------------------------------------------------- shapes and weights
def proj_size(cfg):
    return cfg.get("P", cfg["H"])


def dirs(cfg):
    return 2 if cfg["bidir"] else 1


def layer_in(cfg, layer):
    return cfg["I"] if layer == 0 else proj_size(cfg) * dirs(cfg)


def region_shapes(cfg, p):
    """{linLayerID: (rows, cols)} of pseudo-layer p's matrices, as the hypothesis has them."""
    layer = p // dirs(cfg)
    H, P = cfg["H"], proj_size(cfg)
    out = {}
    if not (cfg["skip"] and layer == 0):
        for k in range(4):
            out[k] = (H, layer_in(cfg, layer))
    for k in range(4, 8):
        out[k] = (H, P)
    if P < H:
        out[8] = (P, H)
    return out


def hypothesis_offsets(cfg):
    """{(p, k, is_bias): element offset} under the hypothesised layout, and the total size."""
    npl = cfg["L"] * dirs(cfg)
    off, table = 0, {}
    for p in range(npl):
        for k, (r, c) in sorted(region_shapes(cfg, p).items()):
            table[(p, k, 0)] = off
            off += r * c
    for p in range(npl):
        for k in range(8):
            table[(p, k, 1)] = off
            off += cfg["H"]
    return table, off


def make_weights(cfg, rng):
    """Canonical float32 weights: {'W{p}_{k}': [rows, cols], 'b{p}_{k}': [H]}."""
    w = {}
    npl = cfg["L"] * dirs(cfg)
    for p in range(npl):
        for k, (r, c) in sorted(region_shapes(cfg, p).items()):
            if 4 <= k < 8:  # recurrent [H, P]: orthonormal columns (rows when H < P cannot happen)
                q, rr = np.linalg.qr(rng.standard_normal((r, c)))
                m = q * np.sign(np.diag(rr))[None, :]
            else:  # input [H, in] or projection [P, H]: Glorot uniform
                lim = np.sqrt(6.0 / (r + c))
                m = rng.uniform(-lim, lim, size=(r, c))
            w[f"W{p}_{k}"] = m.astype(np.float32)
        for k in range(8):
            w[f"b{p}_{k}"] = rng.uniform(-0.3, 0.3, size=cfg["H"]).astype(np.float32)
    return w


def make_inputs(cfg, rng):
    T, B, npl = cfg["T"], cfg["B"], cfg["L"] * dirs(cfg)
    x = rng.standard_normal((T, B, cfg["I"])).astype(np.float32)
    h0 = rng.uniform(-0.5, 0.5, size=(npl, B, proj_size(cfg))).astype(np.float32)
    c0 = rng.uniform(-0.5, 0.5, size=(npl, B, cfg["H"])).astype(np.float32)
    if cfg["varlen"]:
        lengths = rng.integers(1, T + 1, size=B)
        lengths[0], lengths[-1] = T, 1  # longest and shortest present, not sorted
    else:
        lengths = np.full(B, T)
    return x, h0, c0, lengths.astype(np.int32)


# --------------------------------------------------------------------------- float64 oracle
def _sigmoid(v):
    return 0.5 * (1.0 + np.tanh(0.5 * v))


def lstm_oracle(cfg, weights, x, h0, c0, seq_lengths):
    """cuDNN's LSTM (double bias, optional projection, skip input) in float64 NumPy.

    ``weights``: {'W{p}_{k}', 'b{p}_{k}'} as in the golden files (k 0..3 input side, 4..7
    recurrent side, gate order i, f, c~, o; 'W{p}_8' the projection [P, H] if any).  ``x`` time-major
    [T, B, I]; ``h0`` [L*D, B, P]; ``c0`` [L*D, B, H].  Padded-IO semantics: outputs past a
    sequence's length are 0, final states are those at its last valid step, and the backward
    direction starts at each sequence's own last valid step.  Returns y [T, B, P*D], hy, cy.
    """
    f64 = np.float64
    T, B, _ = x.shape
    D, L = dirs(cfg), cfg["L"]
    lengths = np.asarray(seq_lengths, dtype=np.int64)
    hy = np.zeros(np.shape(h0), f64)
    cy = np.zeros(np.shape(c0), f64)
    inp = np.asarray(x, f64)
    bi = np.arange(B)
    for layer in range(L):
        outs = []
        for d in range(D):
            p = layer * D + d
            if cfg["skip"] and layer == 0:
                xw = np.stack([inp] * 4)  # identity input "matrices"
            else:
                Wx = np.stack([np.asarray(weights[f"W{p}_{k}"], f64) for k in range(4)])
                xw = np.einsum("ghi,tbi->gtbh", Wx, inp)
            xw = xw + np.stack([np.asarray(weights[f"b{p}_{k}"], f64) for k in range(4)])[:, None, None, :]
            R = np.stack([np.asarray(weights[f"W{p}_{k}"], f64) for k in range(4, 8)])
            bR = np.stack([np.asarray(weights[f"b{p}_{k}"], f64) for k in range(4, 8)])
            Pm = weights.get(f"W{p}_8")
            Pm = None if Pm is None else np.asarray(Pm, f64)
            h = np.asarray(h0[p], f64).copy()
            c = np.asarray(c0[p], f64).copy()
            y = np.zeros((T, B, h.shape[1]), f64)
            for step in range(T):
                t = (lengths - 1 - step) if d == 1 else np.full(B, step)
                valid = step < lengths
                tt = np.clip(t, 0, T - 1)
                g = [xw[k, tt, bi] + h @ R[k].T + bR[k] for k in range(4)]
                i_g, f_g, c_g, o_g = _sigmoid(g[0]), _sigmoid(g[1]), np.tanh(g[2]), _sigmoid(g[3])
                c_new = f_g * c + i_g * c_g
                h_new = o_g * np.tanh(c_new)
                if Pm is not None:
                    h_new = h_new @ Pm.T
                c = np.where(valid[:, None], c_new, c)
                h = np.where(valid[:, None], h_new, h)
                y[tt[valid], bi[valid]] = h[valid]
            hy[p], cy[p] = h, c
            outs.append(y)
        inp = np.concatenate(outs, axis=-1)
    return inp, hy, cy


# --------------------------------------------------------------------------- the real cuDNN (ctypes)
_vp, _i, _i32, _sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_int32, ctypes.c_size_t
_ip, _szp = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t)
_vpp = ctypes.POINTER(ctypes.c_void_p)

CUDART = {
    "cudaGetDeviceCount": (_i, [_ip]), "cudaRuntimeGetVersion": (_i, [_ip]),
    "cudaDriverGetVersion": (_i, [_ip]), "cudaGetErrorString": (ctypes.c_char_p, [_i]),
    "cudaMalloc": (_i, [_vpp, _sz]), "cudaFree": (_i, [_vp]), "cudaMemcpy": (_i, [_vp, _vp, _sz, _i]),
    "cudaMemset": (_i, [_vp, _i, _sz]), "cudaDeviceSynchronize": (_i, []),
}
CUDNN = {
    "cudnnGetVersion": (_sz, []), "cudnnGetErrorString": (ctypes.c_char_p, [_i]),
    "cudnnCreate": (_i, [_vpp]), "cudnnDestroy": (_i, [_vp]),
    "cudnnCreateRNNDescriptor": (_i, [_vpp]), "cudnnDestroyRNNDescriptor": (_i, [_vp]),
    "cudnnSetRNNDescriptor_v8": (_i, [_vp, _i, _i, _i, _i, _i, _i, _i, _i, _i32, _i32, _i32, _i32, _vp,
                                      ctypes.c_uint32]),
    "cudnnCreateDropoutDescriptor": (_i, [_vpp]), "cudnnDestroyDropoutDescriptor": (_i, [_vp]),
    "cudnnDropoutGetStatesSize": (_i, [_vp, _szp]),
    "cudnnSetDropoutDescriptor": (_i, [_vp, _vp, ctypes.c_float, _vp, _sz, ctypes.c_ulonglong]),
    "cudnnGetRNNWeightSpaceSize": (_i, [_vp, _vp, _szp]),
    "cudnnGetRNNWeightParams": (_i, [_vp, _vp, _i32, _sz, _vp, _i32, _vp, _vpp, _vp, _vpp]),
    "cudnnCreateTensorDescriptor": (_i, [_vpp]), "cudnnDestroyTensorDescriptor": (_i, [_vp]),
    "cudnnSetTensorNdDescriptor": (_i, [_vp, _i, _i, _ip, _ip]),
    "cudnnGetTensorNdDescriptor": (_i, [_vp, _i, _ip, _ip, _ip, _ip]),
    "cudnnCreateRNNDataDescriptor": (_i, [_vpp]), "cudnnDestroyRNNDataDescriptor": (_i, [_vp]),
    "cudnnSetRNNDataDescriptor": (_i, [_vp, _i, _i, _i, _i, _i, _ip, _vp]),
    "cudnnGetRNNTempSpaceSizes": (_i, [_vp, _vp, _i, _vp, _szp, _szp]),
    "cudnnRNNForward": (_i, [_vp, _vp, _i, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp,
                             _sz, _vp, _sz, _vp, _sz, _vp]),
}
SUBLIBS = ("graph", "engines_runtime_compiled", "engines_precompiled", "heuristic", "ops", "cnn", "adv")


def _sover(path):
    m = re.search(r"\.so((?:\.\d+)+)$", path)
    return tuple(int(v) for v in m.group(1).split(".")[1:]) if m else ()


def _wheel(sub, stem):
    out = []
    for d in sys.path:
        if d and os.path.isdir(d):
            found = [p for p in glob.glob(os.path.join(d, "nvidia", sub, "lib", stem + ".so.*"))
                     if re.search(re.escape(stem) + r"\.so(\.\d+)+$", p)]
            out += sorted(found, key=_sover, reverse=True)
    return out


def _bind(lib, protos):
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


class RealCudnn:
    """The libraries, one handle, and the few operations this script needs."""

    fake = False

    def __init__(self):
        self.loaded = {}
        rt_cands = ([os.environ["GRUCONV_LIBCUDART"]] if os.environ.get("GRUCONV_LIBCUDART") else
                    _wheel("*", "libcudart") + ["libcudart.so.13", "libcudart.so.12"]
                    + sorted(glob.glob("/usr/local/cuda/lib64/libcudart.so.*"), key=_sover, reverse=True))
        dn_cands = ([os.environ["GRUCONV_LIBCUDNN"]] if os.environ.get("GRUCONV_LIBCUDNN") else
                    _wheel("cudnn", "libcudnn") + ["libcudnn.so.9"])
        self.rt = self._first(rt_cands, CUDART, "cudart")
        n = ctypes.c_int(0)
        self._cuda(self.rt.cudaGetDeviceCount(ctypes.byref(n)), "cudaGetDeviceCount")
        if n.value < 1:
            raise RuntimeError("no CUDA device")
        self.dn = self._first(dn_cands, CUDNN, "cudnn")
        self.version = int(self.dn.cudnnGetVersion())
        try:
            fn = self.dn.cudnnGetCudartVersion
            fn.restype, fn.argtypes = _sz, []
            self.cudnn_cudart = int(fn())
        except AttributeError:
            self.cudnn_cudart = 0
        try:
            fn = self.dn.cudnnGetLastErrorString
            fn.restype, fn.argtypes = None, [ctypes.c_char_p, _sz]
            self.last_error = fn
        except AttributeError:
            self.last_error = None
        # cuDNN 9's shim loads sub-libraries lazily: make them (and cuBLAS/NVRTC of the same CUDA
        # major, from a wheel install) come from the shim's own tree.
        lib_dir = os.path.dirname(os.path.realpath(self.loaded["cudnn"]))
        nvidia = os.path.dirname(os.path.dirname(lib_dir))
        self.preloaded = []
        if os.path.basename(nvidia) == "nvidia":
            major = self.cudnn_cudart // 1000 if self.cudnn_cudart else None
            for stem in ("libcublasLt", "libcublas", "libnvrtc"):
                c = [p for p in sorted(glob.glob(os.path.join(nvidia, "*", "lib", stem + ".so.[0-9]*")),
                                       key=_sover, reverse=True)
                     if re.search(re.escape(stem) + r"\.so(\.\d+)+$", p)
                     and (major is None or _sover(p)[:1] == (major,))]
                if c:
                    ctypes.CDLL(c[0], mode=ctypes.RTLD_GLOBAL)
                    self.preloaded.append(c[0])
        for sub in SUBLIBS:
            cand = os.path.join(lib_dir, f"libcudnn_{sub}.so.{self.version // 10000}")
            if os.path.exists(cand):
                ctypes.CDLL(cand, mode=ctypes.RTLD_GLOBAL)
                self.preloaded.append(cand)
        v = ctypes.c_int(0)
        self.rt.cudaRuntimeGetVersion(ctypes.byref(v))
        self.runtime_version = v.value
        self.rt.cudaDriverGetVersion(ctypes.byref(v))
        self.driver_api_version = v.value
        self.gpu = self._gpu_name()
        h = _vp()
        self._dnn(self.dn.cudnnCreate(ctypes.byref(h)), "cudnnCreate")
        self.handle = h
        self._allocs = []

    # -- plumbing --------------------------------------------------------------------------
    def _first(self, cands, protos, what):
        errs = []
        for path in cands:
            try:
                lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                _bind(lib, protos)
            except (OSError, AttributeError) as e:
                errs.append(f"{path}: {e}")
                continue
            self.loaded[what] = path
            return lib
        raise RuntimeError(f"no usable {what}: " + "; ".join(errs))

    def _gpu_name(self):
        for name in ("cudaGetDeviceProperties_v2", "cudaGetDeviceProperties"):
            fn = getattr(self.rt, name, None)
            if fn is None:
                continue
            fn.restype, fn.argtypes = _i, [_vp, _i]
            buf = ctypes.create_string_buffer(1 << 16)
            if fn(ctypes.cast(buf, _vp), 0) == 0:
                return buf.raw[:256].split(b"\0", 1)[0].decode(errors="replace")
        return "unknown CUDA device"

    def _cuda(self, st, fn):
        if st != 0:
            t = self.rt.cudaGetErrorString(st)
            raise RuntimeError(f"{fn} failed: {st} ({t.decode() if t else '?'})")

    def _dnn(self, st, fn):
        if st != 0:
            t = self.dn.cudnnGetErrorString(st)
            text = t.decode() if t else "?"
            if self.last_error is not None:
                buf = ctypes.create_string_buffer(4096)
                self.last_error(buf, _sz(len(buf)))
                if buf.value:
                    text += "; " + buf.value.decode(errors="replace").strip()
            raise CudnnStatusError(fn, st, text)

    def malloc(self, nbytes):
        p = _vp()
        self._cuda(self.rt.cudaMalloc(ctypes.byref(p), _sz(max(nbytes, 1))), "cudaMalloc")
        self._allocs.append(p)
        return p

    def upload(self, arr):
        arr = np.ascontiguousarray(arr)
        p = self.malloc(arr.nbytes)
        self._cuda(self.rt.cudaMemcpy(p, arr.ctypes.data_as(_vp), _sz(arr.nbytes), H2D), "cudaMemcpy H2D")
        return p

    def download(self, p, shape, dtype):
        out = np.empty(shape, dtype)
        self._cuda(self.rt.cudaMemcpy(out.ctypes.data_as(_vp), p, _sz(out.nbytes), D2H), "cudaMemcpy D2H")
        return out

    def free_all(self):
        for p in self._allocs:
            self.rt.cudaFree(p)
        self._allocs = []

    def info(self):
        return {"gpu": self.gpu, "cudnn_version": self.version, "cudnn_cudart_version": self.cudnn_cudart,
                "cuda_runtime_version": self.runtime_version, "driver_api_version": self.driver_api_version,
                "libcudnn": os.path.realpath(self.loaded["cudnn"]) if os.path.exists(self.loaded["cudnn"])
                else self.loaded["cudnn"], "libcudart": self.loaded["cudart"], "preloaded": self.preloaded}

    # -- descriptors -----------------------------------------------------------------------
    def rnn_desc(self, cfg, dtype, math):
        """(rnn descriptor, dropout descriptor, cleanup list)."""
        dn, keep = self.dn, []
        drop = _vp()
        self._dnn(dn.cudnnCreateDropoutDescriptor(ctypes.byref(drop)), "cudnnCreateDropoutDescriptor")
        keep.append((dn.cudnnDestroyDropoutDescriptor, drop))
        ssz = _sz(0)
        self._dnn(dn.cudnnDropoutGetStatesSize(self.handle, ctypes.byref(ssz)), "cudnnDropoutGetStatesSize")
        states = self.malloc(ssz.value)
        self._dnn(dn.cudnnSetDropoutDescriptor(drop, self.handle, ctypes.c_float(0.0), states, ssz,
                                               ctypes.c_ulonglong(0)), "cudnnSetDropoutDescriptor")
        rnn = _vp()
        self._dnn(dn.cudnnCreateRNNDescriptor(ctypes.byref(rnn)), "cudnnCreateRNNDescriptor")
        keep.append((dn.cudnnDestroyRNNDescriptor, rnn))
        dt = CUDNN_DATA_FLOAT if dtype == np.float32 else CUDNN_DATA_DOUBLE
        self._dnn(dn.cudnnSetRNNDescriptor_v8(
            rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS,
            CUDNN_BIDIRECTIONAL if cfg["bidir"] else CUDNN_UNIDIRECTIONAL,
            CUDNN_SKIP_INPUT if cfg["skip"] else CUDNN_LINEAR_INPUT,
            dt, dt, math, cfg["I"], cfg["H"], proj_size(cfg), cfg["L"], drop, CUDNN_RNN_PADDED_IO_ENABLED),
            "cudnnSetRNNDescriptor_v8")
        return rnn, keep

    def _tensor_desc(self):
        d = _vp()
        self._dnn(self.dn.cudnnCreateTensorDescriptor(ctypes.byref(d)), "cudnnCreateTensorDescriptor")
        return d

    def _nd(self, d):
        dt, nb = ctypes.c_int(-1), ctypes.c_int(0)
        dims, strides = (ctypes.c_int * 8)(), (ctypes.c_int * 8)()
        st = self.dn.cudnnGetTensorNdDescriptor(d, 8, ctypes.byref(dt), ctypes.byref(nb), dims, strides)
        if st != 0:
            return {"status": st}
        return {"dims": list(dims[:nb.value]), "strides": list(strides[:nb.value]), "dtype": dt.value}

    @staticmethod
    def _cleanup(keep):
        for fn, d in reversed(keep):
            fn(d)

    # -- the two operations ----------------------------------------------------------------
    def build(self, cfg, dtype, math, weights):
        """Write canonical weights where cuDNN says; return (opaque, regions, probes)."""
        itemsize = np.dtype(dtype).itemsize
        rnn, keep = self.rnn_desc(cfg, dtype, math)
        try:
            wsz = _sz(0)
            self._dnn(self.dn.cudnnGetRNNWeightSpaceSize(self.handle, rnn, ctypes.byref(wsz)),
                      "cudnnGetRNNWeightSpaceSize")
            base = self.malloc(wsz.value)
            # 0xFF bytes are NaN: whatever no region covers stays NaN in the read-back.
            self._cuda(self.rt.cudaMemset(base, 0xFF, wsz), "cudaMemset(weight space)")
            regions, probes = [], []
            npl = cfg["L"] * dirs(cfg)
            ks = range(9)  # 8 is the projection; probed also without one
            for p in range(npl):
                for k in ks:
                    md, bd = self._tensor_desc(), self._tensor_desc()
                    keep += [(self.dn.cudnnDestroyTensorDescriptor, md), (self.dn.cudnnDestroyTensorDescriptor, bd)]
                    ma, ba = _vp(), _vp()
                    st = self.dn.cudnnGetRNNWeightParams(self.handle, rnn, p, wsz, base, k, md,
                                                         ctypes.byref(ma), bd, ctypes.byref(ba))
                    if st != 0:
                        probes.append({"p": p, "k": k, "status": st,
                                       "text": (self.dn.cudnnGetErrorString(st) or b"?").decode()})
                        if k < 8:
                            self._dnn(st, f"cudnnGetRNNWeightParams(p={p}, k={k})")
                        continue
                    for is_bias, addr, desc in ((0, ma.value, md), (1, ba.value, bd)):
                        if not addr:  # NULL: cuDNN has no such region
                            absent_ok = (k == 8 and (is_bias or proj_size(cfg) == cfg["H"])) or (
                                not is_bias and k < 4 and cfg["skip"] and p < dirs(cfg))
                            probes.append({"p": p, "k": k, "is_bias": is_bias, "addr": None,
                                           "desc": self._nd(desc)})
                            if not absent_ok:
                                raise RuntimeError(f"cuDNN returned no address for p={p} k={k} "
                                                   f"bias={is_bias}")
                            continue
                        nd = self._nd(desc)
                        delta = addr - base.value
                        if delta % itemsize or not 0 <= delta < wsz.value:
                            raise RuntimeError(f"region p={p} k={k} bias={is_bias} at byte offset {delta}")
                        regions.append({"p": p, "k": k, "is_bias": is_bias, "offset": delta // itemsize, **nd})
                        if k == 8:
                            probes.append({"p": p, "k": k, "is_bias": is_bias, "offset": delta // itemsize,
                                           **nd})
            # Write every canonical array at its address.
            for r in regions:
                key = f"{'b' if r['is_bias'] else 'W'}{r['p']}_{r['k']}"
                if key not in weights:
                    raise RuntimeError(f"cuDNN has a region {key} {r} that the hypothesis lacks")
                arr = np.ascontiguousarray(weights[key], dtype=dtype)
                n = int(np.prod(r.get("dims") or [0]))
                if n != arr.size:
                    raise RuntimeError(f"{key}: cuDNN's descriptor {r.get('dims')} has {n} elements, "
                                       f"canonical array {arr.shape}")
                self._cuda(self.rt.cudaMemcpy(_vp(base.value + r["offset"] * itemsize), arr.ctypes.data_as(_vp),
                                              _sz(arr.nbytes), H2D), f"cudaMemcpy({key})")
            opaque = self.download(base, (wsz.value // itemsize,), dtype)
            return opaque, regions, probes
        finally:
            self._cleanup(keep)
            self.free_all()

    def forward(self, cfg, dtype, math, opaque, x, h0, c0, lengths):
        T, B = x.shape[:2]
        D, H, P, L = dirs(cfg), cfg["H"], proj_size(cfg), cfg["L"]
        rnn, keep = self.rnn_desc(cfg, dtype, math)
        dn = self.dn
        try:
            wsz = _sz(0)
            self._dnn(dn.cudnnGetRNNWeightSpaceSize(self.handle, rnn, ctypes.byref(wsz)), "cudnnGetRNNWeightSpaceSize")
            if wsz.value != opaque.nbytes:
                raise RuntimeError(f"weight space {wsz.value} bytes, opaque {opaque.nbytes}")
            dt = CUDNN_DATA_FLOAT if dtype == np.float32 else CUDNN_DATA_DOUBLE
            fill = np.zeros(1, dtype)
            seq = (ctypes.c_int * B)(*[int(v) for v in lengths])
            descs = []
            for vec in (cfg["I"], P * D):
                d = _vp()
                self._dnn(dn.cudnnCreateRNNDataDescriptor(ctypes.byref(d)), "cudnnCreateRNNDataDescriptor")
                keep.append((dn.cudnnDestroyRNNDataDescriptor, d))
                self._dnn(dn.cudnnSetRNNDataDescriptor(d, dt, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, T, B, vec,
                                                       seq, fill.ctypes.data_as(_vp)), "cudnnSetRNNDataDescriptor")
                descs.append(d)
            xd, yd = descs
            td = []
            for width in (P, H):
                d = self._tensor_desc()
                keep.append((dn.cudnnDestroyTensorDescriptor, d))
                dims = (ctypes.c_int * 3)(L * D, B, width)
                strides = (ctypes.c_int * 3)(B * width, width, 1)
                self._dnn(dn.cudnnSetTensorNdDescriptor(d, dt, 3, dims, strides), "cudnnSetTensorNdDescriptor")
                td.append(d)
            hd, cd = td
            ws, rs = _sz(0), _sz(0)
            self._dnn(dn.cudnnGetRNNTempSpaceSizes(self.handle, rnn, CUDNN_FWD_MODE_INFERENCE, xd,
                                                   ctypes.byref(ws), ctypes.byref(rs)), "cudnnGetRNNTempSpaceSizes")
            d_w = self.upload(opaque)
            d_x = self.upload(x.astype(dtype))
            d_h0 = self.upload(h0.astype(dtype))
            d_c0 = self.upload(c0.astype(dtype))
            d_seq = self.upload(np.asarray(lengths, np.int32))
            shapes = {"y": (T, B, P * D), "hy": (L * D, B, P), "cy": (L * D, B, H)}
            outs = {}
            for k, s in shapes.items():
                nbytes = int(np.prod(s)) * np.dtype(dtype).itemsize
                outs[k] = self.malloc(nbytes)
                self._cuda(self.rt.cudaMemset(outs[k], 0xFF, _sz(nbytes)), "cudaMemset(out)")
            d_work = self.malloc(ws.value)
            d_res = self.malloc(rs.value) if rs.value else None
            self._dnn(dn.cudnnRNNForward(self.handle, rnn, CUDNN_FWD_MODE_INFERENCE, d_seq, xd, d_x, yd, outs["y"],
                                         hd, d_h0, outs["hy"], cd, d_c0, outs["cy"], wsz, d_w, ws, d_work,
                                         rs, d_res), "cudnnRNNForward")
            self._cuda(self.rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
            res = {k: self.download(outs[k], shapes[k], dtype) for k in shapes}
            return res["y"], res["hy"], res["cy"], {"workspace": ws.value, "reserve": rs.value}
        finally:
            self._cleanup(keep)
            self.free_all()


class FakeCudnn:
    """CPU stand-in for a dry run: the hypothesised layout and the oracle as 'cuDNN'."""

    fake = True
    version = 0

    def info(self):
        return {"gpu": "FAKE (CPU dry run)", "cudnn_version": 0}

    def build(self, cfg, dtype, math, weights):
        table, total = hypothesis_offsets(cfg)
        opaque = np.full(total, np.nan, dtype)
        regions, probes = [], []
        for (p, k, is_bias), off in sorted(table.items(), key=lambda kv: kv[1]):
            arr = np.asarray(weights[f"{'b' if is_bias else 'W'}{p}_{k}"], dtype)
            opaque[off:off + arr.size] = arr.reshape(-1)
            regions.append({"p": p, "k": k, "is_bias": is_bias, "offset": off,
                            "dims": [1, *arr.shape] if arr.ndim == 2 else [1, arr.size, 1]})
        probes.append({"p": 0, "k": 8, "is_bias": 0, "addr": None, "fake": True})
        return opaque, regions, probes

    def forward(self, cfg, dtype, math, opaque, x, h0, c0, lengths):
        w = weights_from_opaque(cfg, opaque)
        y, hy, cy = lstm_oracle(cfg, w, x.astype(dtype), h0.astype(dtype), c0.astype(dtype), lengths)
        return y.astype(dtype), hy.astype(dtype), cy.astype(dtype), {"workspace": 0, "reserve": 0}


def weights_from_opaque(cfg, opaque):
    """Per-gate arrays read out of an opaque buffer under the hypothesised layout."""
    table, _ = hypothesis_offsets(cfg)
    w = {}
    npl = cfg["L"] * dirs(cfg)
    for p in range(npl):
        for k, (r, c) in region_shapes(cfg, p).items():
            off = table[(p, k, 0)]
            w[f"W{p}_{k}"] = opaque[off:off + r * c].reshape(r, c)
        for k in range(8):
            off = table[(p, k, 1)]
            w[f"b{p}_{k}"] = opaque[off:off + cfg["H"]]
    return w


# --------------------------------------------------------------------------- optional PyTorch check
def torch_check(cfg, weights, x, h0, c0, lengths, y64, hy64, cy64):
    """max |torch CPU float64 nn.LSTM - cuDNN f64| (torch's gate order is cuDNN's: i, f, g, o)."""
    if cfg["skip"]:
        return None
    import torch
    D, H, P = dirs(cfg), cfg["H"], proj_size(cfg)
    m = torch.nn.LSTM(cfg["I"], H, cfg["L"], bidirectional=cfg["bidir"], proj_size=P if P < H else 0,
                      dtype=torch.float64)
    with torch.no_grad():
        for layer in range(cfg["L"]):
            for d in range(D):
                p, sfx = layer * D + d, ("_reverse" if d else "")
                t = lambda a: torch.from_numpy(np.asarray(a, np.float64))  # noqa: E731
                getattr(m, f"weight_ih_l{layer}{sfx}").copy_(t(np.concatenate([weights[f"W{p}_{k}"] for k in range(4)])))
                getattr(m, f"weight_hh_l{layer}{sfx}").copy_(t(np.concatenate([weights[f"W{p}_{k}"] for k in range(4, 8)])))
                getattr(m, f"bias_ih_l{layer}{sfx}").copy_(t(np.concatenate([weights[f"b{p}_{k}"] for k in range(4)])))
                getattr(m, f"bias_hh_l{layer}{sfx}").copy_(t(np.concatenate([weights[f"b{p}_{k}"] for k in range(4, 8)])))
                if P < H:
                    getattr(m, f"weight_hr_l{layer}{sfx}").copy_(t(weights[f"W{p}_8"]))
        xt = torch.from_numpy(x.astype(np.float64))
        packed = torch.nn.utils.rnn.pack_padded_sequence(xt, torch.from_numpy(lengths.astype(np.int64)),
                                                         enforce_sorted=False)
        out, (hy, cy) = m(packed, (torch.from_numpy(h0.astype(np.float64)), torch.from_numpy(c0.astype(np.float64))))
        yt, _ = torch.nn.utils.rnn.pad_packed_sequence(out, total_length=x.shape[0])
    return {"y": float(np.abs(yt.numpy() - y64).max()), "hy": float(np.abs(hy.numpy() - hy64).max()),
            "cy": float(np.abs(cy.numpy() - cy64).max())}


# --------------------------------------------------------------------------- driver
def check_layout(cfg, regions, opaque):
    table, total = hypothesis_offsets(cfg)
    measured = {(r["p"], r["k"], r["is_bias"]): r["offset"] for r in regions}
    mismatches = [{"region": list(k), "hypothesis": table.get(k), "measured": measured.get(k)}
                  for k in sorted(set(table) | set(measured)) if table.get(k) != measured.get(k)]
    return {"hypothesis_holds": not mismatches and total == opaque.size, "mismatches": mismatches[:20],
            "hypothesis_total": total, "weight_space_elements": int(opaque.size),
            "uncovered_elements": int(np.isnan(opaque).sum())}


def run_config(cu, cfg, out_dir, do_torch):
    rng = np.random.default_rng(cfg["seed"])
    weights = make_weights(cfg, rng)
    x, h0, c0, lengths = make_inputs(cfg, rng)
    res = {"name": cfg["name"], "config": cfg}
    opaque, regions, probes = cu.build(cfg, np.float32, CUDNN_FMA_MATH, weights)
    res["layout"] = check_layout(cfg, regions, opaque)
    res["probes"] = probes
    res["matrix_descriptors"] = sorted({json.dumps([r["k"], r["is_bias"], r.get("dims"), r.get("strides")])
                                        for r in regions if r["p"] == 0})
    try:
        op64, regions64, _ = cu.build(cfg, np.float64, CUDNN_FMA_MATH, weights)
    except CudnnStatusError:
        op64, regions64, _ = cu.build(cfg, np.float64, CUDNN_DEFAULT_MATH, weights)
    res["layout_f64_same_offsets"] = ([(r["p"], r["k"], r["is_bias"], r["offset"]) for r in regions]
                                      == [(r["p"], r["k"], r["is_bias"], r["offset"]) for r in regions64])
    res["opaque_f64_equals_upcast"] = bool(np.array_equal(op64, opaque.astype(np.float64)))
    # The opaque read back must equal the canonical arrays placed by the hypothesis.
    if res["layout"]["hypothesis_holds"]:
        w_back = weights_from_opaque(cfg, opaque)
        res["read_back_matches_canonical"] = all(np.array_equal(w_back[k], weights[k]) for k in weights)
    data = {"config": json.dumps({k: cfg[k] for k in ("I", "H", "L", "bidir", "skip", "T", "B", "seed", "varlen")}
                                 | {"P": proj_size(cfg)}),
            "cudnn_version": np.int64(cu.version), "opaque": opaque, "x": x, "h0": h0, "c0": c0,
            "seq_lengths": lengths}
    data.update(weights)
    data["layout"] = np.array([[r["p"], r["k"], r["is_bias"], r["offset"], int(np.prod(r.get("dims") or [0]))]
                               for r in regions], dtype=np.int64)
    outs, res["runs"] = {}, {}
    for sfx, dtype, math, store in RUNS:
        key = sfx or "_strict"
        op = opaque.astype(dtype)
        try:
            y, hy, cy, info = cu.forward(cfg, dtype, math, op, x, h0, c0, lengths)
        except CudnnStatusError as e:
            if dtype == np.float64:  # fall back as gruconv does
                y, hy, cy, info = cu.forward(cfg, dtype, CUDNN_DEFAULT_MATH, op, x, h0, c0, lengths)
                info["math"] = "CUDNN_DEFAULT_MATH (FMA_MATH refused: %s)" % e
            else:
                res["runs"][key] = {"math": MATH_NAMES[math], "error": str(e)}
                continue
        info.setdefault("math", MATH_NAMES[math])
        info["nan_in_output"] = bool(np.isnan(y).any() or np.isnan(hy).any() or np.isnan(cy).any())
        outs[key] = (y, hy, cy)
        res["runs"][key] = info
        if store:
            data[f"y{sfx}"], data[f"hy{sfx}"], data[f"cy{sfx}"] = y, hy, cy
    y64, hy64, cy64 = outs["_f64"]
    for key, (y, hy, cy) in outs.items():
        if key != "_f64":
            res["runs"][key]["max_abs_vs_f64"] = float(max(np.abs(y - y64).max(), np.abs(hy - hy64).max(),
                                                          np.abs(cy - cy64).max()))
    oy, ohy, ocy = lstm_oracle(cfg, weights, x, h0, c0, lengths)
    res["oracle_vs_cudnn_f64"] = {"y": float(np.abs(oy - y64).max()), "hy": float(np.abs(ohy - hy64).max()),
                                  "cy": float(np.abs(ocy - cy64).max())}
    pad = np.arange(cfg["T"])[:, None] >= lengths[None, :]
    res["padding_is_zero"] = bool(np.all(y64[pad] == 0)) if pad.any() else None
    if do_torch:
        try:
            res["torch_cpu_f64_vs_cudnn_f64"] = torch_check(cfg, weights, x, h0, c0, lengths, y64, hy64, cy64)
        except Exception as e:  # noqa: BLE001 - a cross-check only
            res["torch_cpu_f64_vs_cudnn_f64"] = f"failed: {type(e).__name__}: {e}"
    data["measured"] = json.dumps({k: res[k] for k in ("runs", "oracle_vs_cudnn_f64", "layout")})
    path = os.path.join(out_dir, cfg["name"] + ".npz")
    np.savez_compressed(path, **data)
    res["bytes"] = os.path.getsize(path)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for the .npz files, README.md, summary.json")
    ap.add_argument("--fake", action="store_true", help="CPU dry run with a fake cuDNN (no GPU needed)")
    ap.add_argument("--torch-check", action="store_true", help="also compare with torch CPU float64 nn.LSTM")
    ap.add_argument("--only", nargs="*", help="config names to make")
    ap.add_argument("--tar", help="also pack OUT into this tar file")
    ap.add_argument("--readme-from", metavar="SUMMARY_JSON",
                    help="only rewrite OUT/README.md from an earlier run's summary.json (no GPU)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    if args.readme_from:
        with open(args.readme_from) as f:
            s = json.load(f)
        write_readme(args.out, s["environment"], s["results"])
        return 0
    cu = FakeCudnn() if args.fake else RealCudnn()
    env = cu.info()
    env["date_utc"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    env["python"] = platform.python_version()
    env["numpy"] = np.__version__
    try:
        env["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001
        env["nvidia_smi"] = f"unavailable: {e}"
    if args.torch_check:
        try:
            import torch
            env["torch"] = torch.__version__
        except ImportError as e:
            env["torch"] = f"unavailable: {e}"
    print(json.dumps(env, indent=1), flush=True)
    results = []
    for cfg in CONFIGS:
        if args.only and cfg["name"] not in args.only:
            continue
        try:
            r = run_config(cu, cfg, args.out, args.torch_check)
        except Exception as e:  # noqa: BLE001 - record and go on (the projection may be refused)
            r = {"name": cfg["name"], "config": cfg, "error": f"{type(e).__name__}: {e}",
                 "traceback": traceback.format_exc()}
        results.append(r)
        short = {k: r.get(k) for k in ("name", "error", "layout", "oracle_vs_cudnn_f64", "runs", "probes",
                                       "layout_f64_same_offsets", "opaque_f64_equals_upcast",
                                       "read_back_matches_canonical", "padding_is_zero",
                                       "torch_cpu_f64_vs_cudnn_f64", "bytes", "matrix_descriptors")}
        print(json.dumps(short, default=str), flush=True)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"environment": env, "results": results}, f, indent=1, default=str)
    write_readme(args.out, env, results)
    total = sum(r.get("bytes", 0) for r in results)
    print(f"total npz bytes: {total}")
    if args.tar:
        with tarfile.open(args.tar, "w") as t:
            t.add(args.out, arcname="cudnn-golden-lstm")
    return 1 if any("error" in r and "proj" not in r["name"] for r in results) else 0


def _fmt(v):
    return f"{v:.1e}" if isinstance(v, float) else str(v)


def write_readme(out, env, results):
    ok = [r for r in results if "error" not in r]
    rng = lambda key: (min(r["runs"][key]["max_abs_vs_f64"] for r in ok if "max_abs_vs_f64" in r["runs"].get(key, {})),  # noqa: E731
                       max(r["runs"][key]["max_abs_vs_f64"] for r in ok if "max_abs_vs_f64" in r["runs"].get(key, {})))
    lines = []
    rows = []
    for r in results:
        c = r["config"]
        if "error" in r:
            rows.append(f"| `{r['name']}.npz` | {c['I']} | {c['H']} | {proj_size(c)} | {c['L']} | "
                        f"{'bi' if c['bidir'] else 'uni'} | {'skip' if c['skip'] else 'linear'} | "
                        f"{c['T']}x{c['B']}{' varlen' if c['varlen'] else ''} | FAILED: {r['error']} | | | |")
            continue
        rows.append(f"| `{r['name']}.npz` | {c['I']} | {c['H']} | {proj_size(c)} | {c['L']} | "
                    f"{'bi' if c['bidir'] else 'uni'} | {'skip' if c['skip'] else 'linear'} | "
                    f"{c['T']}x{c['B']}{' varlen' if c['varlen'] else ''} | "
                    f"{'yes' if r['layout']['hypothesis_holds'] else 'NO'} | "
                    f"{_fmt(r['runs']['_strict'].get('max_abs_vs_f64'))} | "
                    f"{_fmt(r['runs']['_default_math'].get('max_abs_vs_f64'))} | "
                    f"{_fmt(max(r['oracle_vs_cudnn_f64'].values()))} |")
    try:
        s_lo, s_hi = rng("_strict")
        d_lo, d_hi = rng("_default_math")
        measured = (f"- max |strict fp32 - f64| over y, hy, cy: {s_lo:.1e} to {s_hi:.1e}; TF32 allowed "
                    f"(`CUDNN_DEFAULT_MATH`): {d_lo:.1e} to {d_hi:.1e}.")
        try:
            t_lo, t_hi = rng("_tensor_op_conv")
            measured += (f" `CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION` (not stored): {t_lo:.1e} to {t_hi:.1e}.")
        except ValueError:
            pass
        orc = max(max(r["oracle_vs_cudnn_f64"].values()) for r in ok)
        measured += f"\n- `lstm_oracle` (float64 NumPy, in the script) vs `y_f64`/`hy_f64`/`cy_f64`: at most {orc:.1e}."
        tc = [max(r["torch_cpu_f64_vs_cudnn_f64"].values()) for r in ok
              if isinstance(r.get("torch_cpu_f64_vs_cudnn_f64"), dict)]
        if tc:
            measured += (f"\n- PyTorch{(' ' + env['torch']) if env.get('torch') else ''} CPU float64 `nn.LSTM` (weights: per-gate arrays stacked "
                         f"i, f, c~, o; `proj_size` for the projection) vs `y_f64`/`hy_f64`/`cy_f64`: at most "
                         f"{max(tc):.1e} ({len(tc)} files; skip-input files excluded, PyTorch has no skip input).")
        holds = [r["name"] for r in ok if r["layout"]["hypothesis_holds"]]
        tiles = all(r["layout"]["uncovered_elements"] == 0 for r in ok)
        measured += (f"\n- Layout (cuDNN {env.get('cudnn_version')}): the hypothesis holds for {len(holds)} of "
                     f"{len(results)} files - all matrices first, in pseudo-layer order (l0-fw, l0-bw, l1-fw, ...), "
                     "each pseudo-layer's matrices in linLayerID order 0..7 (then 8, the projection, if any), each "
                     "`[rows, cols]` row-major (cuDNN's matrix descriptors say dims `[1, rows, cols]`, strides "
                     "`[rows*cols, cols, 1]`); then all biases, pseudo-layer by pseudo-layer, linLayerID 0..7, `H` each. "
                     + ("The regions tile the weight space with no gap or padding (a NaN-filled buffer had no NaN "
                        "left). " if tiles else "SOME ELEMENTS WERE NOT COVERED BY ANY REGION. ")
                     + "The float64 weight space has the same element offsets.")
        skip = [r for r in ok if r["config"]["skip"]]
        if skip:
            measured += ("\n- Skip input (`CUDNN_SKIP_INPUT`): for layer 0, `cudnnGetRNNWeightParams` returns a NULL "
                         "matrix address (descriptor with 0 dims) for linLayerIDs 0..3, in both directions, but all "
                         "eight biases; the weight space simply has no layer-0 input matrices. The outputs match "
                         "the input used as is (identity) in every gate plus both biases.")
        proj = [r for r in ok if proj_size(r["config"]) < r["config"]["H"]]
        for r in proj:
            c = r["config"]
            p8 = [q for q in r["probes"] if q["k"] == 8 and q.get("is_bias") == 0 and "offset" in q]
            b8 = [q for q in r["probes"] if q["k"] == 8 and q.get("is_bias") == 1]
            if not p8:
                measured += f"\n- Projection (`{r['name']}`): no linLayerID 8 matrix was reported."
                continue
            measured += (f"\n- Projection (`{r['name']}`, H={c['H']}, projSize P={proj_size(c)}): accepted. "
                         f"linLayerID 8 is the projection matrix, dims {p8[0].get('dims')} (i.e. `[P, H]`, "
                         f"row-major), at element offsets {[q['offset'] for q in p8]} for pseudo-layers "
                         f"0..{len(p8) - 1}: right after that pseudo-layer's recurrent matrices (k 4..7, each `[H, P]`), "
                         f"before the next pseudo-layer's matrices; its bias address is "
                         f"{'NULL (no bias)' if b8 and all(q.get('addr', 1) is None for q in b8) else b8}. "
                         f"Upper layers' input matrices are `[H, P * dirs]`; `hx`/`hy` and `y` are P wide, `cx`/`cy` "
                         f"H wide.")
        noproj = [q for r in ok if proj_size(r["config"]) == r["config"]["H"] for q in r["probes"] if q["k"] == 8]
        if noproj and all(q.get("addr", 1) is None for q in noproj):
            measured += ("\n- Without a projection, linLayerID 8 is accepted (status 0) and returns NULL for both "
                         "matrix and bias.")
    except ValueError:
        measured = "- (no successful configuration)"
    lines.append(TEMPLATE.format(
        gpu=env.get("gpu"), smi=env.get("nvidia_smi"), cudnn=env.get("cudnn_version"),
        rt=env.get("cuda_runtime_version"), drv=env.get("driver_api_version"),
        dnnrt=env.get("cudnn_cudart_version"), date=env.get("date_utc"),
        lib=env.get("libcudnn"), fake=" (FAKE DRY RUN: not cuDNN)" if env.get("gpu", "").startswith("FAKE") else "",
        rows="\n".join(rows), measured=measured))
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(lines))


TEMPLATE = """# Real cuDNN LSTM reference data{fake}

Made by `scripts/make_lstm_golden.py --torch-check` on {date}: {gpu} (`nvidia-smi` name, driver,
memory, compute capability: {smi}), cuDNN `cudnnGetVersion() == {cudnn}` from `{lib}`
(`cudnnGetCudartVersion() == {dnnrt}`), CUDA runtime `cudaRuntimeGetVersion() == {rt}`,
`cudaDriverGetVersion() == {drv}`. cuDNN was called directly through its C API (ctypes) - no deep-learning
framework in between:

1. canonical per-gate weights were drawn (seeded; Glorot-uniform input and projection matrices,
   recurrent matrices with orthonormal columns, biases uniform(-0.3, 0.3));
2. each matrix and bias was copied into the weight space at the address that
   `cudnnGetRNNWeightParams(pseudoLayer, linLayerID)` returned (what TensorFlow's
   `CudnnRNNCanonicalToParams` does); the buffer was filled with NaN first;
3. the whole weight space was read back: that is `opaque` (no NaN left: the regions tile it);
4. `cudnnRNNForward` (inference) ran on a seeded input and initial states, in float32 strict
   (`CUDNN_FMA_MATH`), float32 with `CUDNN_DEFAULT_MATH` (TF32 allowed), float32 with
   `CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION` (measured only) and float64 on `opaque` cast to float64.

RNN descriptor: `CUDNN_LSTM`, `CUDNN_RNN_ALGO_STANDARD`, `CUDNN_RNN_DOUBLE_BIAS`, dropout 0,
projection size `P` (= `H` unless the name says `proj`), data layout
`CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED` (time-major) with `CUDNN_RNN_PADDED_IO_ENABLED`, padding fill 0.

LSTM as cuDNN computes it (gate order of linLayerIDs 0..3 and 4..7: i, f, c~, o):

```
i  = sigmoid(W_i x + b_Wi + R_i h + b_Ri)     linLayerID 0 / 4   input gate
f  = sigmoid(W_f x + b_Wf + R_f h + b_Rf)     linLayerID 1 / 5   forget gate
c~ = tanh   (W_c x + b_Wc + R_c h + b_Rc)     linLayerID 2 / 6   new memory (cell candidate)
o  = sigmoid(W_o x + b_Wo + R_o h + b_Ro)     linLayerID 3 / 7   output gate
c' = f * c + i * c~
h' = o * tanh(c')        with a projection: h' = W_8 (o * tanh(c')), W_8 [P, H], no bias
```

## Files

| file | I | H | P | L | dir | input | T x B | layout hypothesis | strict - f64 | TF32 - f64 | oracle - f64 |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
{rows}

## Keys

| key | meaning |
| --- | --- |
| `config` | JSON: `I`, `H`, `P` (projection size; = `H` when none), `L`, `bidir`, `skip` (`CUDNN_SKIP_INPUT`), `T`, `B`, `seed`, `varlen` |
| `cudnn_version` | `cudnnGetVersion()` |
| `W{{p}}_{{k}}` | canonical matrix, row-major, of pseudo-layer `p` (l0-fw, l0-bw, l1-fw, ...) and linLayerID `k`: `k` 0..3 `[H, in]` on the layer input (`in` = `I` for layer 0, `P * dirs` above), `k` 4..7 `[H, P]` on the recurrent state, `k` 8 the projection `[P, H]` (only when `P < H`). Skip input: layer 0 has no `W{{p}}_0..3` (cuDNN returns no matrix; the input is used as is) |
| `b{{p}}_{{k}}` | bias `[H]`, `k` 0..3 input side (b_W), 4..7 recurrent side (b_R); all eight also in skip mode; the projection has none |
| `opaque` | float32 weight space exactly as cuDNN holds it (a TF1 `opaque_kernel`). The float64 weight space is this cast to float64 (checked equal element by element, same offsets) |
| `layout` | int64 `[n, 5]`: `p`, `k`, `is_bias`, element offset in `opaque`, element count, as `cudnnGetRNNWeightParams` reported |
| `x`, `h0`, `c0`, `seq_lengths` | input `[T, B, I]` float32, initial states `[L*dirs, B, P]` and `[L*dirs, B, H]`, lengths `[B]` int32 |
| `y`, `hy`, `cy` | float32 strict (`CUDNN_FMA_MATH`): `y [T, B, P*dirs]` (forward then backward halves), `hy [L*dirs, B, P]`, `cy [L*dirs, B, H]`. With `varlen`, `y` past a sequence's length is 0 and `hy`/`cy` are the states at its last valid step; the backward direction starts at each sequence's own last valid step |
| `y_default_math`, `hy_default_math`, `cy_default_math` | float32 with `CUDNN_DEFAULT_MATH` (TF32 tensor cores allowed on this GPU) |
| `y_f64`, `hy_f64`, `cy_f64` | float64 run |
| `measured` | JSON: per run the math mode, workspace size and max abs error vs f64; oracle error; layout check |

## What was measured with it

{measured}
- `summary.json` has every region's offset, descriptor dims and strides, the linLayerID 8 probes, workspace
  sizes and the errors above, per file.

Regenerate (GPU, ~15 s of which ~10 s loading): `python3 scripts/make_lstm_golden.py --torch-check --out DIR`;
rewrite this README from `summary.json` alone: `--readme-from summary.json --out DIR`. A CPU dry run of the
whole pipeline against a fake cuDNN that implements the layout above: `--fake --out /tmp/x`.
"""


if __name__ == "__main__":
    sys.exit(main())
