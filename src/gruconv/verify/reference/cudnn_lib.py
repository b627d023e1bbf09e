"""Find, load and bind libcudnn and the CUDA runtime through ctypes: the library, not the RNN call.

No maintained Python binding exposes cuDNN's RNN API (CuPy 14 dropped cuDNN,
cuDNN Frontend has no RNN), so gruconv calls ``libcudnn``'s C API and the
CUDA runtime directly.  This module never imports torch, jax or tensorflow.
The RNN call itself (descriptors, weight-space queries, ``cudnnRNNForward``)
is :mod:`gruconv.verify.reference.cudnn_rnn`.

Public API::

    available() -> (bool, str)        # never raises
    library_info() -> dict            # raises ReferenceUnavailable
    load() -> Libraries               # the loaded, probed libraries; raises ReferenceUnavailable
    Resources(libs)                   # device memory and descriptors of one call, freed on exit
    CudaCallError                     # a cuDNN/CUDA call failed (function, status)

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
error string.  :class:`Resources` releases all device memory and descriptors
on every path.
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

from ...errors import GruconvError, ReferenceUnavailable

__all__ = ["available", "library_info", "load", "Libraries", "Resources", "CudaCallError",
           "ENV_LIBCUDNN", "ENV_LIBCUDART", "ENV_PRELOAD", "format_cudnn_version", "format_cuda_version"]

ENV_LIBCUDNN = "GRUCONV_LIBCUDNN"
ENV_LIBCUDART = "GRUCONV_LIBCUDART"
#: Diagnostic: ``0`` turns off preloading cuDNN's sub-libraries and cuBLAS/NVRTC.
ENV_PRELOAD = "GRUCONV_CUDNN_PRELOAD"

# cuda_runtime_api.h
_CUDA_MEMCPY_H2D, _CUDA_MEMCPY_D2H = 1, 2
_CUDA_DEV_ATTR_CC_MAJOR, _CUDA_DEV_ATTR_CC_MINOR = 75, 76
#: ``cudaGetDeviceCount`` statuses (``cudaError_t``) that can mean "no GPU here" rather than a broken
#: install: cudaErrorNoDevice (no device, or none visible: ``CUDA_VISIBLE_DEVICES=""``) always;
#: cudaErrorInsufficientDriver only where the machine has no NVIDIA device node (:func:`no_gpu_device`:
#: no driver at all), since with a GPU it means a driver older than the runtime, a real problem.
_CUDA_ERROR_NO_DEVICE, _CUDA_ERROR_INSUFFICIENT_DRIVER = 100, 35
#: The start of :func:`available`'s reason when there is no GPU to use at all (read by
#: ``gruconv.verify.engines.choose_reference`` to say so instead of the CUDA error)
NO_GPU = "no GPU"

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


def format_cudnn_version(v: int) -> str:
    if v >= 90000:
        return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    return f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"


def format_cuda_version(v: int) -> str:
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
    "cudnnGetRNNWeightParams": (_i, [_vp, _vp, ctypes.c_int32, ctypes.c_size_t, _vp, ctypes.c_int32, _vp,
                                     ctypes.POINTER(_vp), _vp, ctypes.POINTER(_vp)]),
    "cudnnCreateRNNDataDescriptor": (_i, [ctypes.POINTER(_vp)]),
    "cudnnDestroyRNNDataDescriptor": (_i, [_vp]),
    "cudnnSetRNNDataDescriptor": (_i, [_vp, _i, _i, _i, _i, _i, _c_int_p, _vp]),
    "cudnnCreateTensorDescriptor": (_i, [ctypes.POINTER(_vp)]),
    "cudnnDestroyTensorDescriptor": (_i, [_vp]),
    "cudnnSetTensorNdDescriptor": (_i, [_vp, _i, _i, _c_int_p, _c_int_p]),
    "cudnnGetTensorNdDescriptor": (_i, [_vp, _i, _c_int_p, _c_int_p, _c_int_p, _c_int_p]),
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


class Libraries:
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
        tried, seen, statuses = [], set(), []
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
            statuses.append(status if count.value > 0 or status != 0 else _CUDA_ERROR_NO_DEVICE)
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
        absent = no_gpu_device()
        no_gpu = (f"{NO_GPU}: no NVIDIA GPU device on this machine (no /dev/nvidia*); " if absent else
                  f"{NO_GPU}: the CUDA runtime sees no device (cudaErrorNoDevice); "
                  if statuses and all(st == _CUDA_ERROR_NO_DEVICE for st in statuses) else "")
        if not tried:
            raise ReferenceUnavailable(
                f"{no_gpu}no CUDA runtime library (libcudart.so) found: install the nvidia-cuda-runtime wheel, "
                f"or set {ENV_LIBCUDART} to its full path")
        raise ReferenceUnavailable(f"{no_gpu}no usable CUDA runtime/GPU: " + "; ".join(tried))

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
        return (f"{self.gpu}, cuDNN {format_cudnn_version(self.cudnn_version)}, "
                f"CUDA runtime {format_cuda_version(self.cuda_runtime_version)}")


class Resources:
    """Device memory and cuDNN descriptors of one call, all released when the ``with`` block ends.

    Every allocation and descriptor is registered for release the moment it
    exists, so an error at any step frees everything made before it::

        with Resources(libs) as res:
            d_x = res.upload(x, "x")
            desc = res.create("TensorDescriptor")
            ...
            res.download(d_y, y_host, "y")
    """

    def __init__(self, libs: Libraries):
        self.libs = libs
        self._stack = ExitStack()

    def __enter__(self) -> "Resources":
        self._stack.__enter__()
        return self

    def __exit__(self, *exc) -> bool:
        return self._stack.__exit__(*exc)

    def malloc(self, nbytes: int, what: str):
        """``cudaMalloc`` (None for 0 bytes); freed on exit."""
        if nbytes == 0:
            return None
        p = ctypes.c_void_p()
        self.libs.cuda_check(self.libs.cudart.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(nbytes)),
                             f"cudaMalloc({what})")
        self._stack.callback(self.libs.cudart.cudaFree, p)
        return p

    def upload(self, arr: np.ndarray, what: str):
        """A device copy of a C-contiguous host array (None if empty)."""
        p = self.malloc(arr.nbytes, what)
        if p is not None:
            self.libs.cuda_check(self.libs.cudart.cudaMemcpy(p, arr.ctypes.data_as(ctypes.c_void_p),
                                                             ctypes.c_size_t(arr.nbytes), _CUDA_MEMCPY_H2D),
                                 f"cudaMemcpy({what}, host to device)")
        return p

    def download(self, ptr, out: np.ndarray, what: str) -> np.ndarray:
        """Copy ``out.nbytes`` bytes from the device into the C-contiguous host array ``out``."""
        if out.nbytes:
            self.libs.cuda_check(self.libs.cudart.cudaMemcpy(out.ctypes.data_as(ctypes.c_void_p), ptr,
                                                             ctypes.c_size_t(out.nbytes), _CUDA_MEMCPY_D2H),
                                 f"cudaMemcpy({what}, device to host)")
        return out

    def memset(self, ptr, byte: int, nbytes: int, what: str) -> None:
        if ptr is not None and nbytes:
            self.libs.cuda_check(self.libs.cudart.cudaMemset(ptr, byte, ctypes.c_size_t(nbytes)),
                                 f"cudaMemset({what})")

    def create(self, kind: str):
        """``cudnnCreate<kind>`` (e.g. ``"RNNDescriptor"``); ``cudnnDestroy<kind>`` on exit."""
        dn = self.libs.cudnn
        d = ctypes.c_void_p()
        self.libs.cudnn_check(getattr(dn, f"cudnnCreate{kind}")(ctypes.byref(d)), f"cudnnCreate{kind}")
        self._stack.callback(getattr(dn, f"cudnnDestroy{kind}"), d)
        return d

    def synchronize(self, after: str) -> None:
        self.libs.cuda_check(self.libs.cudart.cudaDeviceSynchronize(), f"cudaDeviceSynchronize (after {after})")


_STATE_LOCK = threading.Lock()
_STATE: Optional[Libraries] = None
_STATE_ERROR: Optional[GruconvError] = None


def load() -> Libraries:
    """Load and probe the libraries once per process; raise ReferenceUnavailable if impossible."""
    global _STATE, _STATE_ERROR
    with _STATE_LOCK:
        if _STATE is not None:
            return _STATE
        if _STATE_ERROR is not None:
            raise _STATE_ERROR
        libs = Libraries()
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
def no_gpu_device() -> bool:
    """True on a Linux machine without an NVIDIA GPU device node: the driver makes ``/dev/nvidia0``,
    ``/dev/nvidia1``, ... per GPU (and WSL2 its ``/dev/dxg``).  There, ``cudaGetDeviceCount``'s
    cudaErrorInsufficientDriver (35) means "no driver, no GPU", not an old driver."""
    return sys.platform == "linux" and not glob.glob("/dev/nvidia[0-9]*") and not os.path.exists("/dev/dxg")


def available() -> tuple:
    """``(True, "NVIDIA H200, cuDNN 9.19.0, CUDA runtime 13.0")`` or ``(False, reason)``; never raises."""
    try:
        libs = load()
    except GruconvError as e:
        return False, str(e)
    except Exception as e:  # pragma: no cover - belt and braces: never raise
        return False, f"{type(e).__name__}: {e}"
    return True, libs.summary()


def library_info() -> dict:
    """GPU name, cuDNN/CUDA runtime/driver versions and library paths; raises ReferenceUnavailable."""
    return load().info()
