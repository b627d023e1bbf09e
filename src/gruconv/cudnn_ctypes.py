"""Run the real cuDNN GRU forward pass from Python, through ctypes, with no framework.

No maintained Python binding exposes cuDNN's RNN API (CuPy 14 dropped cuDNN,
cuDNN Frontend has no RNN), so this module calls ``libcudnn``'s C API and the
CUDA runtime directly.  It never imports torch, jax or tensorflow.

Public API::

    available() -> (bool, str)        # never raises
    library_info() -> dict            # raises ReferenceUnavailable
    run_gru(opaque, shape, x, h0=None, seq_lengths=None, *, allow_tf32=False)
        -> (y, hy, info)

Descriptor settings are those of the golden files in ``shared/cudnn-golden``:
``CUDNN_GRU``, ``CUDNN_RNN_ALGO_STANDARD``, ``CUDNN_RNN_DOUBLE_BIAS``,
projection size = hidden size, dropout 0, ``CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED``
with ``CUDNN_RNN_PADDED_IO_ENABLED`` and padding fill 0, inference mode.
float32 runs use ``CUDNN_FMA_MATH`` (strict fp32) unless ``allow_tf32`` asks
for ``CUDNN_DEFAULT_MATH`` (TF32 tensor cores allowed).

Library discovery, first hit wins:

1. ``GRUCONV_LIBCUDNN`` / ``GRUCONV_LIBCUDART``: full paths (only those are tried);
2. NVIDIA's pip wheels under every ``sys.path`` / site-packages entry
   (``nvidia/cudnn/lib/libcudnn.so.*``, ``nvidia/*/lib/libcudart.so.*``);
3. the system loader (``ctypes.util.find_library``, ``libcudnn.so.9``,
   ``libcudart.so.13``/``.12``, ``/usr/local/cuda/lib64``).

cuDNN 9's ``libcudnn.so.9`` is a shim that loads sub-libraries
(``libcudnn_graph``, ``libcudnn_ops``, ``libcudnn_adv``, ...) lazily.  To make
sure they come from the shim's own directory (not another cuDNN that the
system loader happens to know), they are preloaded from there with
``RTLD_GLOBAL`` in dependency order, and for wheel installs the cuBLAS(Lt)
and NVRTC libraries of the matching CUDA major are preloaded from the same
``nvidia`` tree (cuDNN 9 opens them with ``dlopen`` when it needs them).
``available()`` proves the whole chain works by creating a cuDNN handle and
an RNN descriptor (which lives in ``libcudnn_adv``).

Every status is checked; errors name the C function and cuDNN's/CUDA's own
error string.  All device memory and descriptors are released on every path.
"""

from __future__ import annotations

import atexit
import ctypes
import ctypes.util
import glob
import os
import re
import site
import sys
import threading
from contextlib import ExitStack
from typing import Optional

import numpy as np

from .canonical import StackShape
from .cudnn_layout import params_size
from .errors import GruconvError, InputError, ReferenceUnavailable

__all__ = ["available", "library_info", "run_gru", "CudaCallError", "ENV_LIBCUDNN", "ENV_LIBCUDART"]

ENV_LIBCUDNN = "GRUCONV_LIBCUDNN"
ENV_LIBCUDART = "GRUCONV_LIBCUDART"
#: Diagnostic: ``0`` turns off preloading cuDNN's sub-libraries and cuBLAS/NVRTC.
ENV_PRELOAD = "GRUCONV_CUDNN_PRELOAD"

# --------------------------------------------------------------------------- enums
# cudnn_graph.h
CUDNN_DATA_FLOAT, CUDNN_DATA_DOUBLE, CUDNN_DATA_HALF = 0, 1, 2
CUDNN_DEFAULT_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION, CUDNN_FMA_MATH = 0, 1, 2, 3
# cudnn_adv.h
CUDNN_RNN_ALGO_STANDARD = 0
CUDNN_GRU = 3
CUDNN_RNN_DOUBLE_BIAS = 2
CUDNN_UNIDIRECTIONAL, CUDNN_BIDIRECTIONAL = 0, 1
CUDNN_LINEAR_INPUT, CUDNN_SKIP_INPUT = 0, 1
CUDNN_FWD_MODE_INFERENCE = 0
CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED = 0
CUDNN_RNN_PADDED_IO_ENABLED = 1
# cuda_runtime_api.h
_CUDA_MEMCPY_H2D, _CUDA_MEMCPY_D2H = 1, 2
_CUDA_DEV_ATTR_CC_MAJOR, _CUDA_DEV_ATTR_CC_MINOR = 75, 76

_DTYPE_NAMES = {CUDNN_DATA_FLOAT: "CUDNN_DATA_FLOAT", CUDNN_DATA_DOUBLE: "CUDNN_DATA_DOUBLE",
                CUDNN_DATA_HALF: "CUDNN_DATA_HALF"}
_MATH_NAMES = {CUDNN_DEFAULT_MATH: "CUDNN_DEFAULT_MATH", CUDNN_TENSOR_OP_MATH: "CUDNN_TENSOR_OP_MATH",
               CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION",
               CUDNN_FMA_MATH: "CUDNN_FMA_MATH"}

#: cuDNN statuses that mean "cuDNN cannot run here" (9.x: NOT_INITIALIZED,
#: SUBLIBRARY_VERSION_MISMATCH, LICENSE_ERROR, SUBLIBRARY_LOADING_FAILED; 8.x: NOT_INITIALIZED).
_UNAVAILABLE_STATUSES = {1, 1001, 1002, 1005, 1008}

#: cuDNN 9 sub-libraries, in dependency order (graph first, adv last).
_CUDNN_SUBLIBS = ("graph", "engines_runtime_compiled", "engines_precompiled", "heuristic",
                  "ops", "cnn", "adv")


class CudaCallError(GruconvError):
    """A cuDNN or CUDA runtime call failed; ``function`` and ``status`` say which and how."""

    def __init__(self, message: str, *, function: str = "", status: int = 0, path: object = None):
        super().__init__(message, path=path)
        self.function = function
        self.status = status


# ------------------------------------------------------------------ discovery
def _site_dirs() -> list:
    dirs = list(sys.path)
    try:
        dirs += site.getsitepackages()
    except Exception:  # pragma: no cover - some virtualenvs lack it
        pass
    try:
        dirs.append(site.getusersitepackages())
    except Exception:  # pragma: no cover
        pass
    out, seen = [], set()
    for d in dirs:
        if not d or not os.path.isdir(d):
            continue
        real = os.path.realpath(d)
        if real not in seen:
            seen.add(real)
            out.append(d)
    return out


def _soname_version(path: str) -> tuple:
    m = re.search(r"\.so((?:\.\d+)*)$", os.path.basename(path))
    return tuple(int(p) for p in m.group(1).split(".")[1:]) if m and m.group(1) else ()


def _wheel_libs(sub_glob: str, stem: str) -> list:
    """``nvidia/<sub_glob>/lib/<stem>.so.N`` under every site dir, newest major first per dir."""
    pattern = re.compile(re.escape(stem) + r"\.so(\.\d+)+$")
    out = []
    for d in _site_dirs():
        found = [p for p in glob.glob(os.path.join(d, "nvidia", sub_glob, "lib", stem + ".so.*"))
                 if pattern.search(os.path.basename(p)) and os.path.isfile(p)]
        found.sort(key=_soname_version, reverse=True)
        out += [p for p in found if p not in out]
    return out


def _system_libs(name: str, sonames: tuple) -> list:
    out = []
    found = ctypes.util.find_library(name)
    if found:
        out.append(found)
    out += [s for s in sonames if s not in out]
    return out


def _cudnn_candidates() -> list:
    env = os.environ.get(ENV_LIBCUDNN)
    if env:
        return [("env " + ENV_LIBCUDNN, env)]
    return ([("pip wheel", p) for p in _wheel_libs("cudnn", "libcudnn")]
            + [("system", p) for p in _system_libs("cudnn", ("libcudnn.so.9", "libcudnn.so.8"))])


def _cudart_candidates() -> list:
    env = os.environ.get(ENV_LIBCUDART)
    if env:
        return [("env " + ENV_LIBCUDART, env)]
    local = []
    for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"):
        local += sorted(glob.glob(os.path.join(d, "libcudart.so.[0-9]*")), key=_soname_version, reverse=True)
    return ([("pip wheel", p) for p in _wheel_libs("*", "libcudart")]
            + [("system", p) for p in _system_libs("cudart", ("libcudart.so.13", "libcudart.so.12"))]
            + [("system", p) for p in local])


def _loaded_path(lib: ctypes.CDLL, symbol: str, fallback: str) -> str:
    """The file a library was really loaded from (``dladdr`` on one of its symbols)."""

    class _DlInfo(ctypes.Structure):
        _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                    ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]

    for libname in (None, "libdl.so.2"):
        try:
            dl = ctypes.CDLL(libname)
            dladdr = dl.dladdr
        except (OSError, AttributeError):
            continue
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        dladdr.restype = ctypes.c_int
        info = _DlInfo()
        addr = ctypes.cast(getattr(lib, symbol), ctypes.c_void_p)
        if dladdr(addr, ctypes.byref(info)) and info.dli_fname:
            return os.path.realpath(info.dli_fname.decode(errors="replace"))
    return fallback


def _format_cudnn_version(v: int) -> str:
    if v >= 90000:
        return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    return f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"


def _format_cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


# ------------------------------------------------------------------ bindings
_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_size_p = ctypes.POINTER(ctypes.c_size_t)
_vp = ctypes.c_void_p
_i = ctypes.c_int

_CUDART_PROTOS = {
    "cudaGetDeviceCount": (_i, [_c_int_p]),
    "cudaGetDevice": (_i, [_c_int_p]),
    "cudaRuntimeGetVersion": (_i, [_c_int_p]),
    "cudaDriverGetVersion": (_i, [_c_int_p]),
    "cudaDeviceGetAttribute": (_i, [_c_int_p, _i, _i]),
    "cudaGetErrorString": (ctypes.c_char_p, [_i]),
    "cudaGetErrorName": (ctypes.c_char_p, [_i]),
    "cudaMalloc": (_i, [ctypes.POINTER(_vp), ctypes.c_size_t]),
    "cudaFree": (_i, [_vp]),
    "cudaMemcpy": (_i, [_vp, _vp, ctypes.c_size_t, _i]),
    "cudaMemset": (_i, [_vp, _i, ctypes.c_size_t]),
    "cudaDeviceSynchronize": (_i, []),
}

_CUDNN_PROTOS = {
    "cudnnGetVersion": (ctypes.c_size_t, []),
    "cudnnGetCudartVersion": (ctypes.c_size_t, []),
    "cudnnGetErrorString": (ctypes.c_char_p, [_i]),
    "cudnnCreate": (_i, [ctypes.POINTER(_vp)]),
    "cudnnDestroy": (_i, [_vp]),
    "cudnnCreateRNNDescriptor": (_i, [ctypes.POINTER(_vp)]),
    "cudnnDestroyRNNDescriptor": (_i, [_vp]),
    "cudnnSetRNNDescriptor_v8": (_i, [_vp, _i, _i, _i, _i, _i, _i, _i, _i, ctypes.c_int32, ctypes.c_int32,
                                      ctypes.c_int32, ctypes.c_int32, _vp, ctypes.c_uint32]),
    "cudnnCreateDropoutDescriptor": (_i, [ctypes.POINTER(_vp)]),
    "cudnnDestroyDropoutDescriptor": (_i, [_vp]),
    "cudnnDropoutGetStatesSize": (_i, [_vp, _c_size_p]),
    "cudnnSetDropoutDescriptor": (_i, [_vp, _vp, ctypes.c_float, _vp, ctypes.c_size_t, ctypes.c_ulonglong]),
    "cudnnGetRNNWeightSpaceSize": (_i, [_vp, _vp, _c_size_p]),
    "cudnnCreateRNNDataDescriptor": (_i, [ctypes.POINTER(_vp)]),
    "cudnnDestroyRNNDataDescriptor": (_i, [_vp]),
    "cudnnSetRNNDataDescriptor": (_i, [_vp, _i, _i, _i, _i, _i, _c_int_p, _vp]),
    "cudnnCreateTensorDescriptor": (_i, [ctypes.POINTER(_vp)]),
    "cudnnDestroyTensorDescriptor": (_i, [_vp]),
    "cudnnSetTensorNdDescriptor": (_i, [_vp, _i, _i, _c_int_p, _c_int_p]),
    "cudnnGetRNNTempSpaceSizes": (_i, [_vp, _vp, _i, _vp, _c_size_p, _c_size_p]),
    "cudnnRNNForward": (_i, [_vp, _vp, _i, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp, _vp,
                             ctypes.c_size_t, _vp, ctypes.c_size_t, _vp, ctypes.c_size_t, _vp]),
}
_CUDNN_OPTIONAL = {"cudnnGetCudartVersion"}


def _bind(lib: ctypes.CDLL, protos: dict, optional=frozenset()) -> list:
    """Set restype/argtypes; return the names that are missing (optional ones excluded)."""
    missing = []
    for name, (restype, argtypes) in protos.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            if name not in optional:
                missing.append(name)
            continue
        fn.restype, fn.argtypes = restype, argtypes
    return missing


class _Libs:
    """The loaded libraries, one cuDNN handle, and what was learnt about them."""

    def __init__(self):
        self.cudart = None
        self.cudnn = None
        self.cudart_path = ""
        self.cudnn_path = ""
        self.cudart_source = ""
        self.cudnn_source = ""
        self.preloaded: list = []
        self.preload_failures: list = []
        self.handle = None
        self.device = 0
        self.gpu = ""
        self.compute_capability = ""
        self.cudnn_version = 0
        self.cudnn_cudart_version = 0
        self.cuda_runtime_version = 0
        self.driver_version = 0
        self.lock = threading.RLock()
        self.last_error_string = None

    # -- error helpers -------------------------------------------------------
    def cuda_check(self, status: int, fn: str, unavailable: bool = False) -> None:
        if status == 0:
            return
        name = self.cudart.cudaGetErrorName(status)
        text = self.cudart.cudaGetErrorString(status)
        msg = (f"{fn} failed: {name.decode() if name else 'cudaError'} ({status}): "
               f"{text.decode() if text else 'unknown CUDA error'}")
        if unavailable:
            raise ReferenceUnavailable(msg)
        raise CudaCallError(msg, function=fn, status=status)

    def cudnn_check(self, status: int, fn: str, unavailable: bool = False) -> None:
        if status == 0:
            return
        name = self.cudnn.cudnnGetErrorString(status)
        name = name.decode(errors="replace") if name else "unknown cuDNN status"
        detail = ""
        if self.last_error_string is not None:
            buf = ctypes.create_string_buffer(4096)
            try:
                self.last_error_string(buf, ctypes.c_size_t(len(buf)))
                detail = buf.value.decode(errors="replace").strip()
            except Exception:  # pragma: no cover - diagnostics only
                detail = ""
        msg = f"{fn} failed: {name} (status {status})" + (f"; cuDNN says: {detail}" if detail else "")
        if unavailable or status in _UNAVAILABLE_STATUSES:
            raise ReferenceUnavailable(msg)
        raise CudaCallError(msg, function=fn, status=status)

    # -- loading -------------------------------------------------------------
    def load_cudart(self) -> None:
        tried, seen = [], set()
        for source, path in _cudart_candidates():
            try:
                lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                tried.append(f"{path}: {e}")
                continue
            real = _loaded_path(lib, "cudaMalloc", path) if hasattr(lib, "cudaMalloc") else path
            if real in seen:
                continue
            seen.add(real)
            missing = _bind(lib, _CUDART_PROTOS)
            if missing:
                tried.append(f"{path}: lacks {', '.join(missing)}")
                continue
            count = ctypes.c_int(0)
            status = lib.cudaGetDeviceCount(ctypes.byref(count))
            if status != 0:
                text = lib.cudaGetErrorString(status)
                tried.append(f"{path}: cudaGetDeviceCount failed ({status}: "
                             f"{text.decode() if text else '?'})")
                continue
            if count.value < 1:
                tried.append(f"{path}: no CUDA device visible")
                continue
            self.cudart, self.cudart_source, self.cudart_path = lib, source, real
            return
        if not tried:
            raise ReferenceUnavailable(
                "no CUDA runtime library (libcudart.so) found: install the nvidia-cuda-runtime wheel, "
                f"or set {ENV_LIBCUDART} to its full path")
        raise ReferenceUnavailable("no usable CUDA runtime/GPU: " + "; ".join(tried))

    def _preload(self, path: str) -> bool:
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            self.preload_failures.append(f"{path}: {e}")
            return False
        self.preloaded.append(path)
        return True

    def _preload_helpers(self, cudnn_file: str) -> None:
        """For a wheel install: cuBLASLt/cuBLAS/NVRTC of cuDNN's CUDA major from the same nvidia tree."""
        lib_dir = os.path.dirname(os.path.realpath(cudnn_file))
        nvidia = os.path.dirname(os.path.dirname(lib_dir))
        if os.path.basename(nvidia) != "nvidia":
            return
        major = self.cudnn_cudart_version // 1000 if self.cudnn_cudart_version else None
        for stem in ("libcublasLt", "libcublas", "libnvrtc"):
            found = sorted(glob.glob(os.path.join(nvidia, "*", "lib", stem + ".so.[0-9]*")),
                           key=_soname_version, reverse=True)
            found = [p for p in found if re.search(re.escape(stem) + r"\.so(\.\d+)+$", p)]
            if major is not None:
                same = [p for p in found if _soname_version(p)[:1] == (major,)]
                found = same
            if found:
                self._preload(found[0])

    def load_cudnn(self) -> None:
        tried, seen = [], set()
        for source, path in _cudnn_candidates():
            try:
                lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                tried.append(f"{path}: {e}")
                continue
            real = _loaded_path(lib, "cudnnGetVersion", path) if hasattr(lib, "cudnnGetVersion") else path
            if real in seen:
                continue
            seen.add(real)
            missing = _bind(lib, _CUDNN_PROTOS, _CUDNN_OPTIONAL)
            if missing:
                tried.append(f"{path}: lacks {', '.join(missing)} (cuDNN >= 8 needed)")
                continue
            version = int(lib.cudnnGetVersion())
            if version < 8000:
                tried.append(f"{path}: cuDNN {version} is too old (the v8 RNN API needs cuDNN >= 8)")
                continue
            self.cudnn, self.cudnn_source, self.cudnn_version = lib, source, version
            self.cudnn_cudart_version = (int(lib.cudnnGetCudartVersion())
                                         if hasattr(lib, "cudnnGetCudartVersion") else 0)
            try:
                fn = lib.cudnnGetLastErrorString  # cuDNN >= 9
                fn.restype, fn.argtypes = None, [ctypes.c_char_p, ctypes.c_size_t]
                self.last_error_string = fn
            except AttributeError:
                self.last_error_string = None
            self.cudnn_path = real
            if os.environ.get(ENV_PRELOAD, "1") == "0":  # diagnostic: rely on cuDNN's own loading
                return
            self._preload_helpers(real)
            if version >= 90000:
                major = version // 10000
                lib_dir = os.path.dirname(real)
                for sub in _CUDNN_SUBLIBS:
                    cand = os.path.join(lib_dir, f"libcudnn_{sub}.so.{major}")
                    if os.path.exists(cand):
                        self._preload(cand)
            return
        if not tried:
            raise ReferenceUnavailable(
                "no cuDNN library (libcudnn.so) found: install the nvidia-cudnn wheel, "
                f"or set {ENV_LIBCUDNN} to its full path")
        raise ReferenceUnavailable("no usable cuDNN library: " + "; ".join(tried))

    def probe(self) -> None:
        rt = self.cudart
        dev, v = ctypes.c_int(0), ctypes.c_int(0)
        self.cuda_check(rt.cudaGetDevice(ctypes.byref(dev)), "cudaGetDevice", unavailable=True)
        self.device = dev.value
        self.cuda_check(rt.cudaRuntimeGetVersion(ctypes.byref(v)), "cudaRuntimeGetVersion", unavailable=True)
        self.cuda_runtime_version = v.value
        self.cuda_check(rt.cudaDriverGetVersion(ctypes.byref(v)), "cudaDriverGetVersion", unavailable=True)
        self.driver_version = v.value
        cc = []
        for attr in (_CUDA_DEV_ATTR_CC_MAJOR, _CUDA_DEV_ATTR_CC_MINOR):
            if rt.cudaDeviceGetAttribute(ctypes.byref(v), attr, self.device) == 0:
                cc.append(str(v.value))
        self.compute_capability = ".".join(cc) if len(cc) == 2 else ""
        self.gpu = self._device_name()
        handle = _vp()
        self.cudnn_check(self.cudnn.cudnnCreate(ctypes.byref(handle)), "cudnnCreate", unavailable=True)
        self.handle = handle
        # cudnnCreateRNNDescriptor lives in libcudnn_adv: this proves the sub-libraries load.
        desc = _vp()
        self.cudnn_check(self.cudnn.cudnnCreateRNNDescriptor(ctypes.byref(desc)),
                         "cudnnCreateRNNDescriptor", unavailable=True)
        self.cudnn.cudnnDestroyRNNDescriptor(desc)

    def _device_name(self) -> str:
        # cudaDeviceProp starts with char name[256] in every CUDA version; the struct itself
        # grows between versions, so a generous buffer is passed.
        for fn_name in ("cudaGetDeviceProperties_v2", "cudaGetDeviceProperties"):
            fn = getattr(self.cudart, fn_name, None)
            if fn is None:
                continue
            fn.restype, fn.argtypes = _i, [_vp, _i]
            buf = ctypes.create_string_buffer(1 << 16)
            if fn(ctypes.cast(buf, _vp), self.device) == 0:
                name = buf.raw[:256].split(b"\0", 1)[0].decode(errors="replace").strip()
                if name:
                    return name
        try:  # driver API fallback
            cu = ctypes.CDLL("libcuda.so.1")
            buf = ctypes.create_string_buffer(256)
            cu_dev = ctypes.c_int(0)
            if (cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(cu_dev), self.device) == 0
                    and cu.cuDeviceGetName(buf, 256, cu_dev) == 0):
                return buf.value.decode(errors="replace")
        except (OSError, AttributeError):
            pass
        return f"CUDA device {self.device}"

    def close(self) -> None:
        if self.handle is not None and self.cudnn is not None:
            try:
                self.cudnn.cudnnDestroy(self.handle)
            except Exception:  # pragma: no cover - interpreter shutdown
                pass
            self.handle = None

    def info(self) -> dict:
        return {
            "gpu": self.gpu,
            "cudnn_version": self.cudnn_version,
            "cuda_runtime_version": self.cuda_runtime_version,
            "driver_version": self.driver_version,
            "libcudnn": self.cudnn_path,
            "libcudart": self.cudart_path,
            "compute_capability": self.compute_capability,
            "device_index": self.device,
            "cudnn_cudart_version": self.cudnn_cudart_version,
            "libcudnn_source": self.cudnn_source,
            "libcudart_source": self.cudart_source,
            "preloaded": list(self.preloaded),
        }

    def summary(self) -> str:
        return (f"{self.gpu}, cuDNN {_format_cudnn_version(self.cudnn_version)}, "
                f"CUDA runtime {_format_cuda_version(self.cuda_runtime_version)}")


_STATE_LOCK = threading.Lock()
_STATE: Optional[_Libs] = None
_STATE_ERROR: Optional[GruconvError] = None


def _load() -> _Libs:
    """Load and probe the libraries once per process; raise ReferenceUnavailable if impossible."""
    global _STATE, _STATE_ERROR
    with _STATE_LOCK:
        if _STATE is not None:
            return _STATE
        if _STATE_ERROR is not None:
            raise _STATE_ERROR
        libs = _Libs()
        try:
            if sys.platform != "linux":
                raise ReferenceUnavailable(f"the cuDNN reference runs on Linux only (this is {sys.platform})")
            libs.load_cudart()
            libs.load_cudnn()
            libs.probe()
        except ReferenceUnavailable as e:
            libs.close()
            _STATE_ERROR = e
            raise
        except GruconvError as e:
            libs.close()
            _STATE_ERROR = ReferenceUnavailable(str(e))
            raise _STATE_ERROR from e
        except Exception as e:  # ctypes/OS surprises: still "cannot run here", never a crash
            libs.close()
            _STATE_ERROR = ReferenceUnavailable(f"loading cuDNN failed: {type(e).__name__}: {e}")
            raise _STATE_ERROR from e
        _STATE = libs
        atexit.register(libs.close)
        return libs


# ------------------------------------------------------------------ public API
def available() -> tuple:
    """``(True, "NVIDIA H200, cuDNN 9.19.0, CUDA runtime 13.0")`` or ``(False, reason)``; never raises."""
    try:
        libs = _load()
    except GruconvError as e:
        return False, str(e)
    except Exception as e:  # pragma: no cover - belt and braces: never raise
        return False, f"{type(e).__name__}: {e}"
    return True, libs.summary()


def library_info() -> dict:
    """GPU name, cuDNN/CUDA runtime/driver versions and library paths; raises ReferenceUnavailable."""
    return _load().info()


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


def _check_inputs(opaque, shape, x, h0, seq_lengths):
    if not isinstance(shape, StackShape):
        raise InputError(f"shape must be a gruconv.canonical.StackShape, got {type(shape).__name__}")
    opaque = np.asarray(opaque)
    if opaque.dtype not in (np.float16, np.float32, np.float64):
        raise InputError(f"opaque buffer must be float16, float32 or float64, got {opaque.dtype}")
    dtype = opaque.dtype
    opaque = np.ascontiguousarray(opaque.reshape(-1))
    x = np.asarray(x)
    if x.ndim != 3 or x.shape[2] != shape.input_size or x.shape[0] < 1 or x.shape[1] < 1:
        raise InputError(f"x must be time-major [T, B, {shape.input_size}] with T, B >= 1, "
                         f"got shape {tuple(x.shape)}")
    T, B = int(x.shape[0]), int(x.shape[1])
    x = np.ascontiguousarray(x, dtype=dtype)
    h_shape = (shape.num_pseudo_layers, B, shape.units)
    if h0 is None:
        h0 = np.zeros(h_shape, dtype=dtype)
    else:
        h0 = np.asarray(h0)
        if tuple(h0.shape) != h_shape:
            raise InputError(f"h0 must have shape [layers*dirs, B, H] = {list(h_shape)}, got {list(h0.shape)}")
        h0 = np.ascontiguousarray(h0, dtype=dtype)
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
    return opaque, dtype, x, h0, lengths, T, B


def run_gru(opaque: np.ndarray, shape: StackShape, x: np.ndarray, h0: Optional[np.ndarray] = None,
            seq_lengths: Optional[np.ndarray] = None, *, allow_tf32: bool = False) -> tuple:
    """Run cuDNN's GRU forward pass (inference) on an opaque weight buffer.

    ``opaque``: the weight space exactly as cuDNN holds it (1-D; its dtype,
    float16/32/64, selects the run's precision; ``shape.dtype`` is not
    consulted). ``x``: time-major ``[T, B, input_size]``; ``h0``:
    ``[layers*dirs, B, H]`` (zeros if None); ``seq_lengths``: ``[B]`` in
    ``1..T`` (all ``T`` if None).  Returns ``y [T, B, H*dirs]``,
    ``hy [layers*dirs, B, H]`` (dtype of ``opaque``) and an info dict
    (:func:`library_info` plus the math mode used and buffer sizes).

    Outputs past a sequence's length are cuDNN's padding fill (0).  The
    output buffers are poisoned with NaN bytes before the call, so anything
    cuDNN did not write shows up as NaN rather than as plausible numbers.
    """
    opaque, dtype, x, h0, lengths, T, B = _check_inputs(opaque, shape, x, h0, seq_lengths)
    libs = _load()
    attempts = []
    candidates = _math_candidates(dtype, allow_tf32)
    with libs.lock:
        for n, cand in enumerate(candidates):
            try:
                y, hy, info = _forward(libs, cand, opaque, shape, x, h0, lengths, T, B)
            except CudaCallError as e:
                if n + 1 < len(candidates) and _retryable(e.status):
                    attempts.append(f"{_DTYPE_NAMES[cand[1]]}/{_MATH_NAMES[cand[2]]}: {e}")
                    continue
                raise
            info.update(libs.info())
            info["allow_tf32"] = bool(allow_tf32)
            info["math_attempts_failed"] = attempts
            return y, hy, info
    raise AssertionError("unreachable")  # pragma: no cover


def _forward(libs: _Libs, cand, opaque, shape, x, h0, lengths, T, B):
    dn, rt = libs.cudnn, libs.cudart
    data_type, math_prec, math_type = cand
    H, L, D = shape.units, shape.num_layers, shape.num_directions
    itemsize = opaque.dtype.itemsize
    y_host = np.empty((T, B, H * D), dtype=opaque.dtype)
    hy_host = np.empty(h0.shape, dtype=opaque.dtype)
    fill = np.zeros(1, dtype=opaque.dtype)
    seq_host = (ctypes.c_int * B)(*[int(v) for v in lengths])

    with ExitStack() as stack:
        def malloc(nbytes: int, what: str):
            if nbytes == 0:
                return None
            p = _vp()
            libs.cuda_check(rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(nbytes)), f"cudaMalloc({what})")
            stack.callback(rt.cudaFree, p)
            return p

        def upload(arr: np.ndarray, what: str):
            p = malloc(arr.nbytes, what)
            if p is not None:
                libs.cuda_check(rt.cudaMemcpy(p, arr.ctypes.data_as(_vp), ctypes.c_size_t(arr.nbytes),
                                              _CUDA_MEMCPY_H2D), f"cudaMemcpy({what}, host to device)")
            return p

        def create(kind: str):
            d = _vp()
            libs.cudnn_check(getattr(dn, f"cudnnCreate{kind}")(ctypes.byref(d)), f"cudnnCreate{kind}")
            stack.callback(getattr(dn, f"cudnnDestroy{kind}"), d)
            return d

        handle = libs.handle

        # Dropout descriptor (dropout 0, but cuDNN still wants initialised RNG states).
        dropout = create("DropoutDescriptor")
        states_size = ctypes.c_size_t(0)
        libs.cudnn_check(dn.cudnnDropoutGetStatesSize(handle, ctypes.byref(states_size)),
                         "cudnnDropoutGetStatesSize")
        states = malloc(states_size.value, "dropout states")
        libs.cudnn_check(dn.cudnnSetDropoutDescriptor(dropout, handle, ctypes.c_float(0.0), states,
                                                      states_size, ctypes.c_ulonglong(0)),
                         "cudnnSetDropoutDescriptor")

        rnn = create("RNNDescriptor")
        libs.cudnn_check(dn.cudnnSetRNNDescriptor_v8(
            rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_GRU, CUDNN_RNN_DOUBLE_BIAS,
            CUDNN_BIDIRECTIONAL if shape.bidirectional else CUDNN_UNIDIRECTIONAL,
            CUDNN_SKIP_INPUT if shape.input_mode == "skip" else CUDNN_LINEAR_INPUT,
            data_type, math_prec, math_type,
            shape.input_size, H, H, L, dropout, CUDNN_RNN_PADDED_IO_ENABLED), "cudnnSetRNNDescriptor_v8")

        ws_size = ctypes.c_size_t(0)
        libs.cudnn_check(dn.cudnnGetRNNWeightSpaceSize(handle, rnn, ctypes.byref(ws_size)),
                         "cudnnGetRNNWeightSpaceSize")
        if ws_size.value != opaque.nbytes:
            raise InputError(
                f"opaque buffer has {opaque.size} {opaque.dtype} values ({opaque.nbytes} bytes), but cuDNN "
                f"{_format_cudnn_version(libs.cudnn_version)} needs a weight space of {ws_size.value} bytes "
                f"({ws_size.value // itemsize} values) for a {shape.describe()} GRU (the canonical layout "
                f"has {params_size(shape)}): the buffer was laid out for another shape or another cuDNN")

        x_desc = create("RNNDataDescriptor")
        libs.cudnn_check(dn.cudnnSetRNNDataDescriptor(
            x_desc, data_type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, T, B, shape.input_size,
            seq_host, fill.ctypes.data_as(_vp)), "cudnnSetRNNDataDescriptor(x)")
        y_desc = create("RNNDataDescriptor")
        libs.cudnn_check(dn.cudnnSetRNNDataDescriptor(
            y_desc, data_type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, T, B, H * D,
            seq_host, fill.ctypes.data_as(_vp)), "cudnnSetRNNDataDescriptor(y)")
        h_desc = create("TensorDescriptor")
        dims = (ctypes.c_int * 3)(L * D, B, H)
        strides = (ctypes.c_int * 3)(B * H, H, 1)
        libs.cudnn_check(dn.cudnnSetTensorNdDescriptor(h_desc, data_type, 3, dims, strides),
                         "cudnnSetTensorNdDescriptor(h)")

        work_size, reserve_size = ctypes.c_size_t(0), ctypes.c_size_t(0)
        libs.cudnn_check(dn.cudnnGetRNNTempSpaceSizes(handle, rnn, CUDNN_FWD_MODE_INFERENCE, x_desc,
                                                      ctypes.byref(work_size), ctypes.byref(reserve_size)),
                         "cudnnGetRNNTempSpaceSizes")

        d_weights = upload(opaque, "weight space")
        d_x = upload(x, "x")
        d_h0 = upload(h0, "hx")
        d_seq = upload(lengths, "devSeqLengths")
        d_y = malloc(y_host.nbytes, "y")
        d_hy = malloc(hy_host.nbytes, "hy")
        for p, n, what in ((d_y, y_host.nbytes, "y"), (d_hy, hy_host.nbytes, "hy")):
            # 0xFF bytes are NaN in float16/32/64: whatever cuDNN leaves unwritten shows up.
            libs.cuda_check(rt.cudaMemset(p, 0xFF, ctypes.c_size_t(n)), f"cudaMemset({what})")
        d_work = malloc(work_size.value, "workspace")
        d_reserve = malloc(reserve_size.value, "reserve space")

        libs.cudnn_check(dn.cudnnRNNForward(
            handle, rnn, CUDNN_FWD_MODE_INFERENCE, d_seq,
            x_desc, d_x, y_desc, d_y,
            h_desc, d_h0, d_hy,
            h_desc, None, None,
            ctypes.c_size_t(opaque.nbytes), d_weights,
            work_size, d_work, reserve_size, d_reserve), "cudnnRNNForward")
        libs.cuda_check(rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize (after cudnnRNNForward)")
        libs.cuda_check(rt.cudaMemcpy(y_host.ctypes.data_as(_vp), d_y, ctypes.c_size_t(y_host.nbytes),
                                      _CUDA_MEMCPY_D2H), "cudaMemcpy(y, device to host)")
        libs.cuda_check(rt.cudaMemcpy(hy_host.ctypes.data_as(_vp), d_hy, ctypes.c_size_t(hy_host.nbytes),
                                      _CUDA_MEMCPY_D2H), "cudaMemcpy(hy, device to host)")
        info = {
            "data_type": _DTYPE_NAMES[data_type],
            "math_precision": _DTYPE_NAMES[math_prec],
            "math_type": _MATH_NAMES[math_type],
            "algo": "CUDNN_RNN_ALGO_STANDARD",
            "weight_space_bytes": int(ws_size.value),
            "workspace_bytes": int(work_size.value),
            "reserve_space_bytes": int(reserve_size.value),
            "dropout_states_bytes": int(states_size.value),
        }
    return y_host, hy_host, info


# ------------------------------------------------------------------ self-report
def _main(argv=None) -> int:
    """``python -m gruconv.cudnn_ctypes [GOLDEN_DIR]``: report the libraries, and errors per golden file."""
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m gruconv.cudnn_ctypes", description=_main.__doc__)
    ap.add_argument("golden_dir", nargs="?", help="directory of cuDNN golden .npz files to check")
    ap.add_argument("--maps", action="store_true",
                    help="at the end, list the CUDA/cuDNN libraries this process has mapped")
    args = ap.parse_args(argv)
    ok, reason = available()
    print(f"available: {ok}: {reason}")
    if not ok:
        if args.maps:
            _print_maps()
        return 3
    print(json.dumps(library_info(), indent=2))
    if not args.golden_dir:
        return 0
    worst = 0.0
    for path in sorted(glob.glob(os.path.join(args.golden_dir, "*.npz"))):
        with np.load(path) as d:
            g = {k: d[k] for k in d.files}
        c = json.loads(str(g["config"]))
        shape = StackShape(c["I"], c["H"], c["L"], c["bidir"], "skip" if c["skip"] else "linear")
        y, hy, _ = run_gru(g["opaque"], shape, g["x"], g["h0"], g["seq_lengths"])
        yt, hyt, info_t = run_gru(g["opaque"], shape, g["x"], g["h0"], g["seq_lengths"], allow_tf32=True)
        y64, hy64, info64 = run_gru(g["opaque_f64"], shape, g["x"], g["h0"], g["seq_lengths"])
        strict = max(np.abs(y - g["y"]).max(), np.abs(hy - g["hy"]).max())
        worst = max(worst, float(strict))
        print(f"{os.path.basename(path)}: strict |y,hy - golden| {strict:.3e}  "
              f"strict-vs-f64 {np.abs(y - g['y_f64']).max():.3e}  "
              f"tf32-vs-f64 {np.abs(yt - g['y_f64']).max():.3e} "
              f"(golden default-math {np.abs(g['y_default_math'] - g['y_f64']).max():.3e})  "
              f"f64 |y,hy - y_f64| {max(np.abs(y64 - g['y_f64']).max(), np.abs(hy64 - g['hy_f64']).max()):.3e} "
              f"[{info64['math_type']}]")
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
