"""The Keras boundary: every Keras 3 call gruconv makes, and the ``.keras`` writer.

Nothing else in gruconv imports Keras: importing, backend choice and the
quiet start-up (:func:`keras`), loading (:func:`load`),
saving (:func:`save`), the CPU scope (:func:`cpu`), compiling from a legacy
training config, and building models from canonical stacks all live here,
so a Keras behaviour change is a change to this module alone.

A ``.keras`` file is a zip of ``config.json``, ``metadata.json`` and
``model.weights.h5`` (``keras/src/saving/saving_lib.py``); gruconv lets Keras
3 write it, so the file is exactly what ``keras.saving.load_model`` expects
on every backend, with no custom objects (unless the model carries a user's
custom layer: then with the classes the user supplies).

Models are built from a Keras 3 config dict, never through Keras's legacy loader:
:func:`from_config` of :func:`gruconv.keras3.config.translate`'s document (a Keras graph: the
Keras-built route and ``verify``, :func:`gruconv.writers.keras_route.built`) or of
:func:`gruconv.keras3.config.stack_model_config` (:func:`gruconv.keras3.build.build_stack_model`), zero
initializers, then the weights of the streamed writer's own array stream
(:func:`gruconv.keras3.build.assign`), compiled from :func:`gruconv.keras3.config.compile_config`
(:func:`compile`).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.util
import logging
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Optional

from ..tf.runtime import quiet_fd2
from ..errors import InputError, UnsupportedError, first_line

FORMAT = "keras"

#: Modules whose import is an ML framework's start-up (threads, GPU contexts, allocators): a process
#: holding one is never forked (TensorFlow is not fork-safe; ``gruconv.batch.work.start_method``).
FRAMEWORK_MODULES = ("tensorflow", "tf_keras", "keras", "jax", "jaxlib", "torch")


# --------------------------------------------------------------------------- import and backend

def pick_backend() -> None:
    """Keras's default backend is TensorFlow; GPU boxes often carry only PyTorch or JAX."""
    if os.environ.get("KERAS_BACKEND"):
        return
    for backend, module in (("tensorflow", "tensorflow"), ("torch", "torch"), ("jax", "jax")):
        if importlib.util.find_spec(module) is not None:
            os.environ["KERAS_BACKEND"] = backend
            return


def import_quietly(name: str):
    """Import module ``name`` (one that loads TensorFlow: ``tf_keras``, the reference of
    :mod:`gruconv.verify.reference.keras2`) with TensorFlow's C++ start-up lines silenced as :func:`keras`
    silences them (on the JAX or torch backend TensorFlow is first loaded here); its device probe too.
    ImportError is the caller's."""
    import importlib

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with warnings.catch_warnings(), quiet_fd2():
        warnings.simplefilter("ignore")
        module = importlib.import_module(name)
        import tensorflow as tf  # noqa: PLC0415

        tf.config.list_physical_devices()  # CUDA probing logs happen here, silenced
    logging.getLogger("absl").setLevel(logging.ERROR)
    return module


def keras():
    """Import and return the ``keras`` module (Keras 3), quietly.

    ``gruconv --help`` and ``gruconv inspect`` never get here
    (``tests/cli/test_cli.py`` checks ``sys.modules``)."""
    if "keras" in sys.modules and hasattr(sys.modules["keras"], "saving"):
        return sys.modules["keras"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    pick_backend()
    with warnings.catch_warnings(), quiet_fd2():
        warnings.simplefilter("ignore")
        try:
            import keras as _k  # noqa: PLC0415
        except ImportError as e:
            raise UnsupportedError(f"Keras 3 with a backend is needed here and could not be imported ({e}); "
                                   "install gruconv[tensorflow], gruconv[jax] or gruconv[torch]") from None
        if _k.backend.backend() == "tensorflow":
            import tensorflow as tf  # noqa: PLC0415

            tf.config.list_physical_devices()  # CUDA probing logs happen here, silenced
    logging.getLogger("absl").setLevel(logging.ERROR)
    for name in ("tensorflow", "jax._src.xla_bridge"):  # Python-level start-up warnings ("no GPU/TPU
        if logging.getLogger(name).level == logging.NOTSET:  # found"); a level the user set is kept
            logging.getLogger(name).setLevel(logging.ERROR)
    try:
        _k.utils.disable_interactive_logging()
    except AttributeError:
        pass
    return _k


_keras = keras


@contextlib.contextmanager
def no_prints():
    """Keras's own ``print`` lines off for the duration, as they were afterwards.

    ``TFLiteConverter.from_keras_model`` exports the model first, and Keras's export prints "Saved artifact at
    '/tmp/...'" and every endpoint's signature on **stdout** (``io_utils.print_msg``) unless interactive logging is
    off.  :func:`keras` turns it off when it imports Keras, but the switch is Keras's global state: per thread, reset
    by ``clear_session``, and never touched when the caller imported Keras first (a Python API user; a test run:
    CI at 229eab3 saw the lines in ``gruconv convert x.h5 model.tflite``'s output).  So the calls that print are
    scoped, and a caller's own choice is restored."""
    k = keras()
    was = k.utils.is_interactive_logging_enabled()
    k.utils.disable_interactive_logging()
    try:
        yield
    finally:
        if was:
            k.utils.enable_interactive_logging()


#: The device scope (:func:`cpu`, :func:`on_gpu`) in force: part of :func:`load`'s cache key, since a
#: model's variables live on the device it was built under.
_SCOPE = contextvars.ContextVar("gruconv_keras_scope", default=None)


@contextlib.contextmanager
def _scoped(label: str, context):
    token = _SCOPE.set(label)
    try:
        with context:
            yield
    finally:
        _SCOPE.reset(token)


def cpu():
    """A context that places the converted side on the CPU whatever the backend's default device.

    torch: ``"cpu:0"`` makes Keras 3.15 create the GRU's integer seed variable
    as a trainable Parameter ("Only Tensors of floating point ... can require
    gradients"); plain ``"cpu"`` does not.  TensorFlow and JAX take ``"cpu:0"``.
    """
    k = keras()
    try:
        return _scoped("cpu", k.device("cpu" if k.backend.backend() == "torch" else "cpu:0"))
    except Exception:  # noqa: BLE001 - older Keras without keras.device
        return _scoped("cpu", contextlib.nullcontext())


def load(path: Path, *, compile: bool = True, custom_objects: Optional[dict] = None):
    """``keras.saving.load_model(path)`` as a user calls it (safe mode, the user's ``custom_objects`` if
    any); failures are one-line errors.

    A ``.keras`` file whose ``config.json`` is byte-identical to one loaded before in this process
    (same backend, device scope and ``compile``; no ``custom_objects``) gets that model back with this
    file's weights (``model.load_weights``: every weight assigned from the file, by the same saving
    code; :func:`load_like_before`): ``verify`` in a batch worker loads many converted files of few
    architectures, and rebuilding one cost about a third of a small model's verify
    (``docs/benchmarks.md``).  Not cached:
    models with ``stateful`` layers (their states would carry over), models with the user's classes,
    and files whose weights exceed :data:`_MODEL_CACHE_BYTES`."""
    k = keras()
    handed = take_handed(path) if compile and not custom_objects else None  # convert --verify: see hand_over
    if handed is not None:
        return handed
    model = None if custom_objects else load_like_before(path, compile=compile)
    if model is not None:
        return model
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = k.saving.load_model(str(path), compile=compile, safe_mode=True, custom_objects=custom_objects)
    except Exception as e:  # noqa: BLE001 - any Keras failure means an unreadable model
        raise InputError(f"cannot load converted model ({first_line(e, 200)})", path=path) from None
    if not custom_objects:
        remember(path, model, compile=compile)
    return model


def load_like_before(path, *, compile: bool = True):
    """The model a plain ``load_model(path, compile=compile)`` builds, without building it again, or None:
    a ``.keras`` file whose ``config.json`` is byte-identical to one this process loaded before
    (:func:`remember`; same backend and device scope) gets that model back with this file's weights,
    loaded by Keras's own ``Model.load_weights(path)`` (``saving_lib.load_weights_only``: the archive's
    ``model.weights.h5`` by the object walk ``load_model`` loads it with, a compiled model's optimizer
    included).  The layers, compile and build configs are all in those bytes, so the same code builds
    the same model; what two such files can differ in is their weights.  The check-load compares every
    variable with what was written (:func:`gruconv.keras3.archive.check_load`), so a variable a file
    left unset cannot pass for loaded there.  When ``load_weights`` raises, the entry is dropped and None
    returned: the plain ``load_model`` then gives the verdict and its message.  A model handed over for
    its previous file (:func:`hand_over`) is no longer that file's: the hand-over is withdrawn."""
    key, _ = _model_cache_key(path, compile)
    model = _MODELS.pop(key, None) if key is not None else None
    if model is None:
        return None
    if _HANDED and _HANDED[0][-1] is model:
        _HANDED.clear()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.load_weights(str(path))
    except Exception:  # noqa: BLE001 - the plain load_model decides, with its own message
        return None
    _MODELS[key] = model
    return model


def remember(path, model, *, compile: bool = True) -> None:
    """Keep ``model``, just built by a plain ``load_model(path, compile=compile)``, for
    :func:`load_like_before` of files of the same config (not: files over :data:`_MODEL_CACHE_BYTES` of
    weights, stateful layers, anything but a ``.keras`` archive)."""
    key, cacheable = _model_cache_key(path, compile)
    if not cacheable:
        return
    _MODELS.pop(key, None)
    while len(_MODELS) >= _MODEL_CACHE_SIZE:
        _MODELS.pop(next(iter(_MODELS)))
    _MODELS[key] = model


#: Models of :func:`load` by (backend, device scope, compile, sha256 of ``config.json``); at most
#: :data:`_MODEL_CACHE_SIZE`, each with at most :data:`_MODEL_CACHE_BYTES` of weights.
_MODELS: dict = {}
_MODEL_CACHE_SIZE = 4
_MODEL_CACHE_BYTES = 16 << 20


def _model_cache_key(path, compile: bool) -> tuple:
    """``(key, cacheable)`` of a ``.keras`` file for :func:`load`'s cache; ``(None, False)`` for anything
    else (the file is then loaded as before, and Keras's own error reported)."""
    import hashlib
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            config = z.read("config.json")
            weights = z.getinfo("model.weights.h5").file_size
    except (OSError, KeyError, zipfile.BadZipFile, ValueError):
        return None, False
    key = (keras().backend.backend(), _SCOPE.get(), bool(compile), hashlib.sha256(config).hexdigest())
    return key, weights <= _MODEL_CACHE_BYTES and re.search(rb'"stateful"\s*:\s*true', config) is None


#: ``--custom-objects`` files imported in this process: {resolved path: module} (``verify`` after a
#: ``convert --check-load`` asks again; a user's module runs once).
_CUSTOM_MODULES: dict = {}


def custom_objects_from(path, needed) -> dict:
    """``{class name: class}`` for every name in ``needed`` (the custom layer classes an output carries),
    taken from the user's Python file ``path`` (``--custom-objects``).

    The one place gruconv runs code it did not ship, and only because the user named the file: it is
    imported as a module of its own (``importlib.util.spec_from_file_location``), after Keras (its classes
    subclass ``keras.layers.Layer``), never found or guessed, never from a model file.  Refused in one line
    when the path is not a readable ``.py`` file (:class:`UsageError`, exit 2), when importing it fails in
    any way (:class:`InputError`, exit 3: the user's code, its first line quoted) or when it lacks a class
    the output needs (:class:`InputError`, naming them)."""
    import importlib.util

    from ..errors import UsageError

    path = Path(path)
    if path.suffix != ".py" or not path.is_file():
        raise UsageError("--custom-objects takes a Python file (.py) defining your Keras 3 classes", path=path)
    key = str(path.resolve())
    module = _CUSTOM_MODULES.get(key)
    if module is None:
        keras()
        name = f"gruconv_custom_objects_{len(_CUSTOM_MODULES)}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise UsageError("--custom-objects: not importable as a Python module", path=path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling in the user's code look their module up
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                spec.loader.exec_module(module)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's code: any failure is theirs
            sys.modules.pop(name, None)
            raise InputError(f"--custom-objects: the file does not import ({type(e).__name__}: "
                             f"{first_line(e, 200)})", path=path) from None
        _CUSTOM_MODULES[key] = module
    found = {n: getattr(module, n) for n in needed if isinstance(getattr(module, n, None), type)}
    missing = [n for n in needed if n not in found]
    if missing:
        raise InputError(f"--custom-objects defines no class {', '.join(missing)} (the converted model's "
                         f"custom layer{'s' if len(missing) > 1 else ''})", path=path)
    return found


def custom_scope(objects: Optional[dict]):
    """``keras.saving.custom_object_scope(objects)``: every load inside it resolves the user's classes by
    name as ``load_model(custom_objects=...)`` does (``serialization_lib.deserialize_keras_object`` merges
    the scope's dict into ``custom_objects``); a plain context when there are none."""
    if not objects:
        return contextlib.nullcontext()
    return keras().saving.custom_object_scope(objects)


def load_weights(model, path: Path) -> None:
    try:
        model.load_weights(str(path))
    except Exception as e:  # noqa: BLE001
        raise InputError(f"cannot load converted weights ({first_line(e, 200)})", path=path) from None


#: The initializer every layer gets in :func:`from_config` (Keras 3's serialized form).
_ZEROS = {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": None}


def _zero_initializers(obj):
    if isinstance(obj, dict):
        return {k: (_ZEROS if k.endswith("_initializer") and isinstance(v, (dict, str)) else _zero_initializers(v))
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_zero_initializers(v) for v in obj]
    return obj


def from_config(config: dict):
    """The Keras 3 model of a ``config.json`` dict (the streamed writer's, :mod:`gruconv.keras3.config`),
    built with every initializer set to ``Zeros``: the caller loads the converted weights right after, so
    building draws no random weights -- which on a float16 model is an op some backends lack (torch:
    ``"geqrf_cpu" not implemented for 'Half'`` from Orthogonal; JAX: ``Unsupported dtype float16``).
    Safe mode stays on; a config Keras refuses is one :class:`InputError`."""
    k = keras()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return k.saving.deserialize_keras_object(_zero_initializers(config), safe_mode=True)
    except Exception as e:  # noqa: BLE001 - any Keras failure means a config Keras 3 cannot build
        raise InputError(f"Keras 3 cannot build the converted model ({first_line(e, 200)})") from None


def to_numpy(t):
    import numpy as np

    return np.asarray(keras().ops.convert_to_numpy(t))


def compile(model, compiled) -> None:
    """Compile ``model`` from :func:`gruconv.keras3.config.compile_config`'s ``compile_config`` (the one
    training-config translation) as ``keras.saving.load_model`` compiles a loaded file
    (``Model.compile_from_config``: deserialize, compile, build the optimizer), so the optimizer's fresh
    variables are saved with it.  A compile config Keras refuses is one :class:`UnsupportedError`."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.compile_from_config(compiled.compile_config)
    except Exception as e:  # noqa: BLE001 - Keras refuses the compile config: the caller writes uncompiled
        raise UnsupportedError(f"training config not accepted by Keras 3 ({first_line(e, 200)})") from None


#: The one documented config change for half-precision layers (``keras_portable``).
LOW_PRECISION_NOTE = ("{layers}: float16 recurrent layer(s) written with recurrent_initializer Identity in place of "
                      "Orthogonal (same gain): building an Orthogonal float16 kernel needs a float16 QR, which JAX "
                      "and torch lack, so the file would load on TensorFlow only; weights are unaffected")


def save(model, out_tmp: Path, *, config: Optional[dict] = None) -> list:
    """``model.save``, with the weights file staged on disk rather than in memory.

    Keras 3 (``keras/src/saving/saving_lib.py`` ``_save_model_to_fileobj``)
    builds ``model.weights.h5`` in a BytesIO — a second full copy of every
    weight — unless ``is_memory_sufficient(model)`` says no, in which case it
    writes a temporary file beside the output and zips that.  gruconv always
    asks for the disk path: same bytes, one model's worth of memory less
    (``docs/benchmarks.md``).  If a Keras version lacks the hook, the default
    path is used.  Keras puts that temporary file beside the file it is
    given, so the model is saved inside a private ``.gruconv-*`` directory
    and then moved onto ``out_tmp``: a killed process leaves no Keras
    ``tmpXXXX`` file among the user's files (``tests/files/test_crash_safety.py``).

    The written ``config.json`` is made portable (:mod:`gruconv.keras3.portable`: keys that hold
    their defaults and that Keras 3.8-3.14 do not know, backend-specific optimizer classes, and
    ``Orthogonal`` -> ``Identity`` in float16/bfloat16 layers so no half-precision QR is needed to
    load on JAX or torch), then loaded back with plain ``load_model`` (:func:`check_reload`).
    ``config``: the ``config.json`` to store instead of Keras's own serialization (the Keras-built
    route: :func:`gruconv.keras3.config.translate`'s document, so the file says what the streamed
    writer's says, original initializers included, not the ``Zeros`` the model was built with).
    """
    import os

    from .portable import rewrite_keras_zip
    from ..files.outputs import staging_dir

    try:
        from keras.src.saving import saving_lib
    except ImportError:  # pragma: no cover - another Keras layout
        saving_lib = None
    original = getattr(saving_lib, "is_memory_sufficient", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if original is not None:
            saving_lib.is_memory_sufficient = lambda model: False
        try:
            with staging_dir(Path(out_tmp).parent) as td:
                staged = Path(td) / "model.keras"
                _save_in(model, staged, td)
                # config.json as every Keras 3.8+ reads it (keras_portable: docs/compatibility.md)
                rewrite_keras_zip(staged, staged, qr_free_low_precision=True, config=config)
                os.replace(staged, out_tmp)
        finally:
            if original is not None:
                saving_lib.is_memory_sufficient = original
    return weight_digests(model)


def _save_in(model, staged: Path, td) -> None:
    """``model.save(staged)`` with every temporary file of Keras's inside ``td`` (the staging directory),
    and closed when saving fails.

    Keras 3.15's ``saving_lib._save_model_to_fileobj`` ends in a ``finally`` that closes the weights
    store, then the asset store (a ``tempfile.mkdtemp()`` directory in ``$TMPDIR``), then the
    ``NamedTemporaryFile`` weights file; when the first close fails (a full disk: h5py cannot flush)
    the other two are skipped.  Measured under ``RLIMIT_FSIZE``: the assets directory stayed
    in ``$TMPDIR``, and the weights file, still referenced by the traceback, was unlinked at exit after
    :func:`gruconv.files.outputs.staging_dir` had removed it ("Exception ignored ... FileNotFoundError" on
    stderr after gruconv's one line).  So ``tempfile.tempdir`` points into ``td`` while saving (removed
    with it), and on failure the temporary files the traceback's frames hold are closed while ``td``
    still exists."""
    import tempfile
    import traceback

    k = keras()
    filtering = k.config.is_traceback_filtering_enabled()  # Keras drops its own frames from tracebacks
    saved_tempdir = tempfile.tempdir
    tempfile.tempdir = str(td)
    try:
        if filtering:
            k.config.disable_traceback_filtering()
        model.save(str(staged))
    except BaseException as e:
        seen: list = []
        err = e
        while err is not None and len(seen) < 16:  # the chain: a failing close() raises over the first error
            seen.append(err)
            for frame, _ in traceback.walk_tb(err.__traceback__):
                for value in list(frame.f_locals.values()):
                    if type(value).__name__ == "_TemporaryFileWrapper" and hasattr(value, "close"):
                        try:
                            value.close()
                        except OSError:
                            pass
            err = err.__context__ if err.__context__ not in seen else None
        raise
    finally:
        tempfile.tempdir = saved_tempdir
        if filtering:
            k.config.enable_traceback_filtering()


def _release_freed_memory() -> None:
    """Hand the converted model's freed buffers back to the OS (glibc ``malloc_trim``) before Keras
    loads the written file: the load-back check then peaks at what a plain ``load_model`` of the
    output needs, not at that plus the freed model (``tests/files/test_memory.py``)."""
    import ctypes
    import ctypes.util

    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to hand back explicitly
        pass


def weight_digests(model) -> list:
    """``(path, shape, sha256)`` of every weight, one array in memory at a time: what
    :func:`check_reload` compares the written file with after the caller has let the model go
    (holding it while Keras loads a second copy would double the conversion's peak memory)."""
    import hashlib

    out = []
    for w in model.weights:
        a = to_numpy(w)
        out.append((w.path, tuple(a.shape), hashlib.sha256(a.tobytes()).hexdigest()))
        del a
    return out


def check_reload(path: Path, digests: list) -> None:
    """Prove the written file is what the user will get: plain ``keras.saving.load_model(path)``
    (default arguments: compiled, safe mode) opens it and every weight comes back bit for bit.

    The output contract (``shared/DESIGN.md``) promises exactly this; checking
    the file itself, not the in-memory model, also catches what a Keras
    version writes but cannot read back (a compile config it cannot
    deserialize, say).  Cost: ``docs/benchmarks.md``.
    """
    import gc

    k = keras()
    gc.collect()
    _release_freed_memory()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = k.saving.load_model(str(path))
    except Exception as e:  # noqa: BLE001 - the file is not what we promise: refuse it
        raise UnsupportedError(f"the converted model does not load back with keras.saving.load_model "
                               f"({first_line(e, 200)}); nothing written") from None
    got = weight_digests(loaded)
    del loaded
    if len(got) != len(digests):
        raise UnsupportedError(f"the converted model loads back with {len(got)} weights, expected "
                               f"{len(digests)}; nothing written")
    for (name, shape, digest), (_, shape2, digest2) in zip(digests, got):
        if shape != shape2 or digest != digest2:
            raise UnsupportedError(f"weight {name!r} does not load back unchanged from the converted "
                                   "model; nothing written")


# --------------------------------------------------------------------------- the GPU path

def gpu_status() -> tuple:
    """(usable, reason): can the installed Keras backend run models on a GPU here?"""
    k = keras()
    be = k.backend.backend()
    try:
        if be == "torch":
            import torch

            ok = torch.cuda.is_available()
            return ok, (f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}" if ok
                        else "torch sees no CUDA device")
        if be == "jax":
            import jax

            ok = jax.default_backend() == "gpu"
            return ok, (f"jax {jax.__version__}, {jax.devices()[0].device_kind}" if ok
                        else f"jax default backend is {jax.default_backend()}")
        if be == "tensorflow":
            import tensorflow as tf

            gpus = tf.config.list_physical_devices("GPU")
            return bool(gpus), (f"tensorflow {tf.__version__}, {len(gpus)} GPU(s)" if gpus
                                else "tensorflow sees no GPU")
    except Exception as e:  # noqa: BLE001 - probing must never fail verify
        return False, f"{be}: GPU probe failed ({first_line(e, 120)})"
    return False, f"backend {be} has no GPU path"


#: What "strict" and "default" math mean per backend, for reports and docs/verify.md.
MATH_SETTINGS = {
    "torch": {"strict": "torch.backends.cudnn.allow_tf32 = False, torch.backends.cuda.matmul.allow_tf32 = False",
              "default": "torch defaults (cuDNN may use TF32)"},
    "jax": {"strict": 'jax.config.update("jax_default_matmul_precision", "highest")',
            "default": "JAX default matmul precision (TF32/bf16 passes on GPU)"},
    "tensorflow": {"strict": "tf.config.experimental.enable_tensor_float_32_execution(False)",
                   "default": "TensorFlow default (TF32 enabled since 2.4)"},
}


@contextlib.contextmanager
def on_gpu(math: str):
    """Run the block on the backend's GPU with ``math`` = ``strict`` (no TF32, highest matmul
    precision) or ``default`` (the framework's own settings), restoring every setting after."""
    k = keras()
    be = k.backend.backend()
    undo = []
    if be == "torch":
        import torch

        saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
        if math == "strict":
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cuda.matmul.allow_tf32 = False
        undo.append(lambda: (setattr(torch.backends.cudnn, "allow_tf32", saved[0]),
                             setattr(torch.backends.cuda.matmul, "allow_tf32", saved[1])))
        device = "cuda"
    elif be == "jax":
        import jax

        saved_p = jax.config.jax_default_matmul_precision
        if math == "strict":
            jax.config.update("jax_default_matmul_precision", "highest")
        undo.append(lambda: jax.config.update("jax_default_matmul_precision", saved_p))
        device = "gpu:0"
    else:
        import tensorflow as tf

        saved_t = tf.config.experimental.tensor_float_32_execution_enabled()
        if math == "strict":
            tf.config.experimental.enable_tensor_float_32_execution(False)
        undo.append(lambda: tf.config.experimental.enable_tensor_float_32_execution(saved_t))
        device = "gpu:0"
    token = _SCOPE.set(f"gpu {math}")
    try:
        with k.device(device):
            yield
    finally:
        _SCOPE.reset(token)
        for f in undo:
            f()


@contextlib.contextmanager
def rnn_kernel_probe():
    """Record which implementation each recurrent layer call took: the backend's fused path
    (cuDNN on torch and TensorFlow; a ``lax.scan`` kernel on JAX, which has no cuDNN GRU; both
    directions of a ``Bidirectional`` in one backend call from Keras 3.14, ``bidirectional_gru``)
    or Keras's step-by-step loop (20x slower on a GPU, ``shared/DESIGN.md``).

    Keras 3 layers call ``keras.src.backend.gru``/``lstm``, which raise NotImplementedError to
    fall back; torch and TensorFlow call a module-level ``_cudnn_gru``/``_cudnn_lstm`` when they
    take cuDNN.  Yields a list that receives one ``(op, "cudnn" | "fused" | "fallback")`` per call.
    """
    import importlib

    k = keras()
    seen: list = []
    try:
        top = importlib.import_module("keras.src.backend")
        impl = importlib.import_module(f"keras.src.backend.{k.backend.backend()}.rnn")
    except ImportError:  # another Keras layout: nothing recorded, reported as unknown
        yield seen
        return
    patched = []

    def wrap(module, name, on_call):
        original = getattr(module, name, None)
        if original is None:
            return

        def wrapper(*a, **kw):
            return on_call(original, *a, **kw)

        setattr(module, name, wrapper)
        patched.append((module, name, original))

    # Keras 3.14+ also fuses both directions of a Bidirectional into one backend call.
    for op in ("gru", "lstm", "bidirectional_gru", "bidirectional_lstm"):
        def fused(original, *a, _op=op, **kw):
            mark = len(seen)
            try:
                out = original(*a, **kw)
            except NotImplementedError:
                seen.append((_op, "fallback"))
                raise
            if not any(o == _op and how == "cudnn" for o, how in seen[mark:]):
                seen.append((_op, "fused"))
            return out

        def cudnn(original, *a, _op=op, **kw):
            seen.append((_op, "cudnn"))
            return original(*a, **kw)

        wrap(top, op, fused)
        wrap(impl, f"_cudnn_{op}", cudnn)
    try:
        yield seen
    finally:
        for module, name, original in reversed(patched):
            setattr(module, name, original)


def mask_producers(model) -> list:
    """Names of the layers (nested models included) that attach a Keras mask: ``Masking`` and
    ``Embedding(mask_zero=True)``."""
    k = keras()
    out, todo = [], list(model.layers)
    while todo:
        layer = todo.pop(0)
        if isinstance(layer, k.Model):
            todo.extend(layer.layers)
        elif isinstance(layer, k.layers.Masking) or (isinstance(layer, k.layers.Embedding)
                                                       and getattr(layer, "mask_zero", False)):
            out.append(layer.name)
    return out


def save_weights(model, out_tmp: Path) -> None:
    """Keras 3's own weights file (``model.save_weights``; the name must end in ``.weights.h5``),
    checked by loading it back into the same model."""
    try:
        model.save_weights(str(out_tmp))
        load_weights(model, out_tmp)
    except InputError as e:
        raise UnsupportedError(f"the converted weights do not load back ({e.message})") from None


# --------------------------------------------------------------------------- graph probing (verify)
# Driving a converted model's layer graph (its nodes, a layer's call) is Keras knowledge: it stays
# behind this boundary; verify asks these functions for arrays.

def find_layer(model, parts: list):
    """The layer at path ``parts`` (nested model names first) of ``model``, or None."""
    layer = model
    try:
        for name in parts:
            layer = layer.get_layer(name)
    except ValueError:
        return None
    return layer


# --------------------------------------------------------------------------- recorded forward pass (verify)
# Verify fed each converted recurrent layer by re-running the model up to it (``layer_call``, one
# sub-model per layer, the earlier layers run again each time), then the layer, then the whole model for
# the end-to-end check and once more for the masks: five Keras forward passes for a two-layer model.  One
# run of the model, each checked layer's call recorded, gives the same arrays.

class LayerCall:
    """One recorded call of a layer in a model run (:func:`record_calls`), as NumPy arrays: ``args`` and
    ``kwargs`` as the model handed them to the layer (before the layer's own input conversion: a float16
    layer fed float32 activations records float32, as the removed ``layer_call`` gave them), the ``mask`` Keras
    passed on to its ``call`` (None without one) and ``outputs`` (a list, in the layer's output order)."""

    __slots__ = ("layer", "args", "kwargs", "mask", "outputs")

    def __init__(self, layer, args, kwargs, mask, outputs):
        self.layer, self.args, self.kwargs, self.mask, self.outputs = layer, args, kwargs, mask, outputs


def _as_arrays(value):
    """Tensors (possibly in lists) as NumPy arrays, structure kept; None and plain values unchanged."""
    if isinstance(value, (list, tuple)):
        return [_as_arrays(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return to_numpy(value)


def record_calls(model, layers: list, feed: list) -> tuple:
    """``({id(layer): LayerCall}, model outputs)`` of ONE run of ``model`` on ``feed``: for each of ``layers``
    its first call in that run (inputs, the mask Keras gave it, outputs), and the model's own outputs (a
    list of arrays).  The same arrays the removed ``layer_call`` and ``masks_received`` gave, a call of the layer on
    those inputs and a call of the model give (eager Keras on the same device: the same operations on the
    same values), from one forward pass instead of one per checked layer plus two.

    Each layer is watched for the one run: its class is swapped for a subclass whose ``__call__`` records
    (arguments before the layer's autocast, outputs after), and its ``call`` is wrapped for the mask;
    both are restored before returning, whatever happens."""
    seen: dict = {}
    masks: dict = {}
    swapped = []

    def watch(layer):
        cls = type(layer)

        def __call__(self, *a, **kw):
            out = cls.__call__(self, *a, **kw)
            if id(self) not in seen:
                given = {k: _as_arrays(v) for k, v in kw.items() if k in ("initial_state", "mask") and v is not None}
                outs = out if isinstance(out, (list, tuple)) else [out]
                seen[id(self)] = LayerCall(self, [_as_arrays(x) for x in a], given, None,
                                           [to_numpy(o) for o in outs])
            return out

        original = layer.call

        def call(*a, _layer=layer, _original=original, **kw):
            if id(_layer) not in masks:
                m = kw.get("mask")
                masks[id(_layer)] = None if m is None else np.asarray(to_numpy(m)).astype(bool)
            return _original(*a, **kw)

        spy = type(cls.__name__, (cls,), {"__call__": __call__, "__module__": cls.__module__})
        object.__setattr__(layer, "__class__", spy)
        layer.call = call
        swapped.append((layer, cls))

    import numpy as np

    try:
        for layer in layers:
            if id(layer) not in {id(l) for l, _ in swapped}:
                watch(layer)
        out = model(feed if len(feed) > 1 else feed[0])
        outputs = [to_numpy(o) for o in (out if isinstance(out, (list, tuple)) else [out])]
    finally:
        for layer, cls in reversed(swapped):
            object.__setattr__(layer, "__class__", cls)
            layer.__dict__.pop("call", None)
    for key, rec in seen.items():
        rec.mask = masks.get(key)
    return seen, outputs


# --------------------------------------------------------------------------- hand-over (convert --verify)
# ``convert --verify`` loads the output twice: ``--check-load``'s plain ``load_model`` (the output
# contract, proved on the written file, every weight compared by digest) and then verify's load of the same
# file.  The first model is handed to the second when nothing can tell them apart.

#: The one model handed over: ``(file identity, sha256 of the file, backend, device scope, model)``.
_HANDED: list = []
#: Only files this small are handed over (the model's weights are held from the check until verify).
HAND_OVER_BYTES = 16 << 20


def release_memory() -> None:
    """Collect what was let go (Keras layers hold reference cycles) and hand freed heap memory back to the
    OS (:func:`_release_freed_memory`), so the next phase's arrays do not stack on top of it."""
    import gc

    gc.collect()
    _release_freed_memory()


def _file_identity(path) -> Optional[tuple]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _file_sha256(path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def hand_over(path, model) -> None:
    """Keep ``model``, just opened from ``path`` by a plain ``keras.saving.load_model(path)`` (default
    arguments, no ``custom_objects``) and checked weight by weight against what was written, for the next
    :func:`load` of the same file (:func:`take_handed`).  Files over :data:`HAND_OVER_BYTES` and models with
    ``stateful`` layers are not kept; a later hand-over replaces an earlier one."""
    _HANDED.clear()
    ident = _file_identity(path)
    if ident is None or ident[2] > HAND_OVER_BYTES or _stateful(model):
        return
    _HANDED.append((ident, _file_sha256(path), keras().backend.backend(), _SCOPE.get(), model))


def _stateful(model) -> bool:
    todo = list(getattr(model, "layers", []))
    while todo:
        layer = todo.pop()
        if getattr(layer, "stateful", False):
            return True
        todo.extend(getattr(layer, "layers", []) or [])
        todo.extend(l for l in (getattr(layer, a, None) for a in ("layer", "forward_layer", "backward_layer"))
                    if l is not None)
    return False


_NO_GPU: list = []


def _no_gpu() -> bool:
    """The backend sees no GPU (then the CPU scope and no scope place variables alike)."""
    if not _NO_GPU:
        _NO_GPU.append(not gpu_status()[0])
    return _NO_GPU[0]


def take_handed(path):
    """The model :func:`hand_over` kept for ``path``, given once, or None: only when ``path`` is the same
    file (device, inode, size, modification time) with the same contents (SHA-256), under the same backend
    and a device scope that places variables alike (the same scope; or the CPU scope where the model was
    loaded without one on a machine whose backend sees no GPU).  Such a model is what a second
    ``load_model`` of the file would build: the same code on the same bytes, and its weights were just
    compared with the written file's."""
    if not _HANDED:
        return None
    ident, digest, backend, scope, model = _HANDED[0]
    if _file_identity(path) != ident:
        return None
    _HANDED.clear()
    here = _SCOPE.get()
    same_place = scope == here or (scope is None and here == "cpu" and _no_gpu())
    if backend != keras().backend.backend() or not same_place or _file_sha256(path) != digest:
        return None
    return model


# --------------------------------------------------------------------------- compiled recorded pass (verify)
# A batch verifies many files of one architecture; run eagerly, a small GRU model's forward pass
# cost ~150-350 ms (TensorFlow's eager while-loop, one Python step per time step) and ~1 s on JAX, against
# 2-14 ms (TensorFlow ``tf.function``) and <1 ms (``jax.jit``) compiled.  The compiled function takes the
# weights as arguments (``Model.stateless_call``), so one trace serves every model of the same config.

#: Backends whose compiled pass gave the eager pass's reports on every fixture (``scripts/verdict_parity.py``).
#: Not JAX: ``jax.jit`` lets XLA fuse a BatchNormalization's arithmetic, so a layer fed by one receives
#: inputs a few float32 ulps off the eager pass's (``keras_user/batchnorm_dropout.h5``: max diff 1.12e-7 ->
#: 1.22e-7, still judged against a reference fed the same inputs, but not the same report).
COMPILED_BACKENDS = ("tensorflow",)

#: Compiled probes: key -> (template model, probe model, compiled function, variable paths); at most
#: :data:`_PROBE_CACHE_SIZE`, only for models of at most :data:`_PROBE_CACHE_BYTES` of weights.
_PROBES: dict = {}
_PROBES_SEEN: set = set()
_PROBE_CACHE_SIZE = 4
_PROBE_CACHE_BYTES = 16 << 20


def _probe_key(model, layers: list, feed: list) -> Optional[tuple]:
    import hashlib
    import json

    try:
        config = json.dumps(model.get_config(), sort_keys=True, default=str)
    except Exception:  # noqa: BLE001 - a config Keras cannot give: the eager pass
        return None
    shapes = tuple((tuple(a.shape), str(a.dtype)) for a in feed)
    return (keras().backend.backend(), _SCOPE.get(), type(model).__name__, hashlib.sha256(config.encode()).hexdigest(),
            shapes, tuple(l.name for l in layers))


def _build_probe(model, layers: list):
    """``(probe, layout)``: a functional model on ``model``'s inputs whose outputs are the model's outputs,
    then each layer's call arguments (its one inbound node's tensors) and outputs; None where the graph
    does not allow it (a layer not at the top level, shared, or stateful; masks; no symbolic inputs)."""
    k = keras()
    if mask_producers(model) or _stateful(model) or not getattr(model, "inputs", None):
        return None
    graph = getattr(model, "_functional", None) or model  # a Sequential runs its Functional
    by_depth = getattr(graph, "_nodes_by_depth", None)
    if by_depth is None:
        return None
    graph_nodes = {id(n) for nodes in by_depth.values() for n in nodes}
    top = {id(l) for l in model.layers}
    outs = list(graph.outputs)
    layout = []
    for layer in layers:
        if id(layer) not in top:
            return None
        nodes = [n for n in getattr(layer, "_inbound_nodes", []) if id(n) in graph_nodes]
        if len(nodes) != 1:  # a shared layer: which call the eager pass records is its business
            return None
        node = nodes[0]
        ins = list(node.arguments.keras_tensors)
        node_outs = list(node.outputs)
        layout.append((layer, node, len(outs), ins, len(node_outs)))
        outs += ins + node_outs
    try:
        probe = k.Model(graph.inputs, outs)
    except Exception:  # noqa: BLE001 - a graph Keras will not re-wire: the eager pass
        return None
    return probe, layout


def compiled_calls(model, layers: list, feed: list) -> Optional[tuple]:
    """What :func:`record_calls` returns, computed by a compiled function of the model's weights
    (TensorFlow ``tf.function`` of ``Model.stateless_call``; the ``jax.jit`` branch is kept for
    :data:`COMPILED_BACKENDS`), or None when the eager pass is to be used: on JAX and torch, for models
    over :data:`_PROBE_CACHE_BYTES` of weights, where :func:`_build_probe` declines, and, on TensorFlow (whose
    trace costs several eager passes), for the first model of a config in this process.  The same layers and
    weights in the same precision; on TensorFlow every fixture's report equals the eager pass's
    (``scripts/verdict_parity.py``: 363 runs)."""
    import numpy as np

    k = keras()
    backend = k.backend.backend()
    if backend not in COMPILED_BACKENDS:
        return None
    if sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in model.weights) > _PROBE_CACHE_BYTES:
        return None
    key = _probe_key(model, layers, feed)
    if key is None:
        return None
    entry = _PROBES.get(key)
    if entry is None:
        if backend == "tensorflow" and key not in _PROBES_SEEN:
            _PROBES_SEEN.add(key)  # first of its config: eager (one trace costs more than one eager pass)
            return None
        built = _build_probe(model, layers)
        if built is None:
            return None
        probe, _ = built
        # each probe variable as its position in the model's own lists: a model of the same config lists
        # its variables in the same order (names alone may differ: Keras numbers seed generators)
        where = {id(v): ("t", i) for i, v in enumerate(model.trainable_variables)}
        where.update({id(v): ("n", i) for i, v in enumerate(model.non_trainable_variables)})
        try:
            paths = [where[id(v)] for v in probe.trainable_variables], [where[id(v)] for v in probe.non_trainable_variables]
        except KeyError:
            return None

        def run(tv, ntv, xs):
            return probe.stateless_call(tv, ntv, xs)[0]

        if backend == "tensorflow":
            import tensorflow as tf

            fn = tf.function(run, reduce_retracing=True)
        else:
            import jax

            fn = jax.jit(run)
        if len(_PROBES) >= _PROBE_CACHE_SIZE:
            _PROBES.pop(next(iter(_PROBES)))
        entry = _PROBES[key] = (model, built, fn, paths)
    template, (probe, layout), fn, (tpos, npos) = entry
    lists = {"t": model.trainable_variables, "n": model.non_trainable_variables}
    tlists = {"t": template.trainable_variables, "n": template.non_trainable_variables}
    if any(len(lists[c]) != len(tlists[c]) for c in lists):
        return None
    for c, i in tpos + npos:
        mine, theirs = lists[c][i], tlists[c][i]
        if tuple(mine.shape) != tuple(theirs.shape) or str(mine.dtype) != str(theirs.dtype):
            return None
    tv = [lists[c][i].value for c, i in tpos]
    ntv = [lists[c][i].value for c, i in npos]
    out = fn(tv, ntv, list(feed) if len(feed) > 1 else feed[0])
    values = [to_numpy(o) for o in (out if isinstance(out, (list, tuple)) else [out])]
    n_model = layout[0][2] if layout else len(values)
    # the layers of this model, matched to the template's by position
    mine = {l.name: l for l in model.layers}
    seen = {}
    for tlayer, node, start, ins, n_out in layout:
        args_values = values[start:start + len(ins)]
        args, kwargs = node.arguments.fill_in({id(t): v for t, v in zip(ins, args_values)})
        given = {kk: vv for kk, vv in kwargs.items() if kk in ("initial_state", "mask") and vv is not None}
        layer = mine.get(tlayer.name)
        if layer is None:
            return None
        seen[id(layer)] = LayerCall(layer, list(args), given, None, values[start + len(ins):start + len(ins) + n_out])
    return seen, values[:n_model]
