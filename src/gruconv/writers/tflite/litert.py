"""Every TensorFlow, LiteRT and TensorFlow Lite Micro call of the ``tflite`` writer (one module, so that it can
move under the TensorFlow boundary package as a whole): the fixed-shape copy of a Keras 3 model, its conversion
by ``TFLiteConverter.from_keras_model`` (builtin ops only, resource variables for a stateful model, int8 with a
representative dataset), the file's metadata, its op list, and running it in LiteRT (``ai-edge-litert``) and in
TFLM (``tflite-micro``: the real C++ interpreter).

Routes not taken, measured broken (``shared/DESIGN.md`` "Edge targets"): Select-TF (Flex) ops, which neither
``tf.lite.Interpreter`` nor ai-edge-litert can run; ``from_concrete_functions``, whose files fail at invoke
(uninitialised variables: ``read_variable.cc:67 variable != nullptr``); int8 of a ``WHILE`` loop (the
converter segfaults).  The SavedModel route (``model.export`` then ``from_saved_model``) fails even with a fixed
batch when the time axis is left open (``TensorListReserve`` with a dynamic element shape, measured here on
``fixtures/keras/sequential.h5``); ``from_keras_model`` converts the same model (a ``WHILE`` loop).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Optional

import numpy as np

from ...errors import GruconvError, OutputError, UnsupportedError
from ...keras3.runtime import no_prints
from ...tf.runtime import quiet_fd2
from .profile import EXTRA, METADATA_NAME, fixed_config

#: Bytes of TFLM's tensor arena for the output-contract invoke and verify (the models gruconv writes for
#: microcontrollers are small; a larger one says so in TFLM's own message).
TFLM_ARENA = 64 << 20


#: Steps of the output-contract invoke where the file leaves the time axis open.
SMOKE_STEPS = 3


def _need(module: str):
    """An edge runtime module, or the one line naming the extra (exit 3)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise UnsupportedError(f"writing and running .tflite files needs TensorFlow, ai-edge-litert and "
                               f"tflite-micro ({e}): {EXTRA}") from None


def available() -> Optional[str]:
    """None when TensorFlow, LiteRT and TFLM are importable (found, not imported), else the one line."""
    import importlib.util

    for m in ("tensorflow", "ai_edge_litert", "tflite_micro"):
        try:
            if importlib.util.find_spec(m) is None:
                return f"{m} is not installed: {EXTRA}"
        except (ImportError, ValueError):
            return f"{m} is not installed: {EXTRA}"
    return None


def fixed_model(model, batch: int, timesteps: Optional[int], unroll: bool, micro: bool = False):
    """The same Keras 3 model with its inputs' batch (and time) fixed and its recurrent layers unrolled
    (:func:`gruconv.writers.tflite.profile.fixed_config`), its weights copied (same architecture, same order).
    ``micro``: every ``Embedding`` looks its rows up with a plain gather (:func:`_plain_gather`)."""
    config = fixed_config(model.get_config(), batch, timesteps, unroll)
    fixed = model.__class__.from_config(config)
    fixed.set_weights(model.get_weights())
    if micro:
        _plain_gather(fixed)
    return fixed


def _plain_gather(model) -> None:
    """Each ``Embedding`` of ``model`` (nested ones too) computes ``tf.gather(embeddings, ids)``: one ``GATHER``.

    Why: Keras 3's ``Embedding.call`` is ``ops.take``, which on the TensorFlow backend first wraps negative ids
    (``keras/src/backend/tensorflow/numpy.py`` ``take``: ``tf.where(i < 0, i + n, i)``), and that ``where``
    converts to ``LESS`` + ``SELECT``; TFLM registers ``SELECT_V2`` only (``Register_SELECT_V2`` is the one in
    ``tflite-micro``'s runtime), so every model with an Embedding failed to load there ("Didn't find op for
    builtin opcode 'SELECT'", ``fixtures/trained/gru2.h5``).  The same for every id a model is fed (``0 <= id <
    n``); a negative id, which Keras 3 wraps, is out of range for TFLite's ``GATHER`` as it was for the Keras 2
    / tf.keras ``Embedding`` the CuDNN model was trained with (``embedding_lookup``).  The converted file is
    checked against this model and the model's outputs against the original's, as for every file."""
    tf = _need("tensorflow")

    def walk(layer):
        yield layer
        for inner in getattr(layer, "layers", None) or ():
            yield from walk(inner)

    for layer in walk(model):
        if type(layer).__name__ == "Embedding":
            def call(inputs, _layer=layer):
                ids = inputs if inputs.dtype in (tf.int32, tf.int64) else tf.cast(inputs, tf.int32)
                return tf.cast(tf.gather(_layer.embeddings, ids), _layer.compute_dtype)
            layer.call = call


def convert(model, *, int8_batches: Optional[list] = None) -> bytes:
    """``model`` (fixed shapes) as a ``.tflite`` flatbuffer: builtin ops only (never Flex), resource variables
    kept (a stateful model's state), full-integer ops with ``int8_batches`` as the representative dataset
    (float inputs and outputs: QUANTIZE / DEQUANTIZE at the edges)."""
    tf = _need("tensorflow")
    conv = tf.lite.TFLiteConverter.from_keras_model(model)
    conv.experimental_enable_resource_variables = True
    if int8_batches is not None:
        conv.optimizations = [tf.lite.Optimize.DEFAULT]
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]

        # each input in the model's own dtype: an Embedding's ids are int32 (a float32 batch made the calibrator
        # refuse the model: "Got value of type FLOAT32 but expected type INT32", fixtures/trained/gru2.h5)
        dtypes = [np.dtype(getattr(t.dtype, "name", t.dtype)) for t in model.inputs]

        def representative():
            for feed in int8_batches:
                yield [np.asarray(a, dtype=d) for a, d in zip(feed, dtypes)]
        conv.representative_dataset = representative
    else:
        conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    import warnings

    try:
        # the calibrator's C++ lines ("Statistics ... expected"); Keras's export's "Saved artifact at" on stdout
        with warnings.catch_warnings(), quiet_fd2(), no_prints():
            warnings.simplefilter("ignore")
            return bytes(conv.convert())
    except Exception as e:  # the converter's own error: one line, its first meaningful one
        lines = [ln for ln in str(e).splitlines() if "error:" in ln] or str(e).splitlines() or [type(e).__name__]
        raise UnsupportedError(f"the TensorFlow Lite converter refused the model (builtin ops only): "
                               f"{lines[0].split('error:', 1)[-1].strip()[:300]}") from None


def _schema():
    return _need("ai_edge_litert.schema_py_generated")


def with_metadata(data: bytes, meta: dict) -> bytes:
    """The flatbuffer with one more metadata entry, ``gruconv``: ``meta`` as JSON (TFLite keeps named metadata
    buffers beside the model; LiteRT and TFLM ignore names they do not know)."""
    import flatbuffers

    s = _schema()
    model = s.ModelT.InitFromPackedBuf(bytearray(data), 0)
    buf = s.BufferT()
    buf.data = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    model.buffers.append(buf)
    entry = s.MetadataT()
    entry.name = METADATA_NAME
    entry.buffer = len(model.buffers) - 1
    model.metadata = (model.metadata or []) + [entry]
    builder = flatbuffers.Builder(len(data) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def describe_file(data: bytes) -> dict:
    """``{"meta": gruconv's metadata or None, "ops": sorted builtin op names over every subgraph}``."""
    s = _schema()
    model = s.ModelT.InitFromPackedBuf(bytearray(data), 0)
    names = {v: k for k, v in vars(s.BuiltinOperator).items() if not k.startswith("_")}
    ops = set()
    for g in model.subgraphs or []:
        for op in g.operators or []:
            code = model.operatorCodes[op.opcodeIndex]
            b = max(code.builtinCode, code.deprecatedBuiltinCode)
            ops.add(names.get(b, str(b)) if b != s.BuiltinOperator.CUSTOM else f"CUSTOM:{code.customCode}")
    meta = None
    for m in model.metadata or []:
        name = m.name.decode() if isinstance(m.name, bytes) else m.name
        if name == METADATA_NAME:
            meta = json.loads(bytes(model.buffers[m.buffer].data).decode())
    return {"meta": meta, "ops": sorted(ops)}


class LiteRT:
    """One ``.tflite`` file in LiteRT's interpreter (``ai_edge_litert.interpreter.Interpreter``): ``run(feed)``
    one invoke of the inputs in order (float32), returning the outputs in the model's order; the state of a
    stateful file is kept between calls, :meth:`reset` zeroes it."""

    name = "LiteRT"

    def __init__(self, data: bytes, names: Optional[list] = None):
        interp = _need("ai_edge_litert.interpreter")
        self.names = names
        self.data = data
        with quiet_fd2():  # "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." (C++ stderr)
            self.it = interp.Interpreter(model_content=data)
            self.it.allocate_tensors()
        self.inputs = sorted(self.it.get_input_details(), key=lambda d: d["index"])
        self.outputs = self.it.get_output_details()
        self._order()

    def _order(self) -> None:
        """Inputs and outputs in the Keras model's order (the signature's ``input_N``/``output_N`` keys where
        the converter kept them)."""
        sigs = self.it.get_signature_list()
        if sigs:
            sig = next(iter(sigs.values()))
            runner = self.it.get_signature_runner(next(iter(sigs)))
            ins, outs = runner.get_input_details(), runner.get_output_details()
            by_index = {d["index"]: d for d in self.it.get_input_details()}
            keys = list(sig["inputs"])  # the signature lists them sorted by name, not in the model's order
            if self.names and sorted(self.names) == sorted(keys):
                keys = list(self.names)
            self.inputs = [by_index[ins[k]["index"]] for k in keys]
            out_index = {d["index"]: d for d in self.it.get_output_details()}
            keys = sorted(sig["outputs"], key=lambda k: (len(k), k))
            self.outputs = [out_index[outs[k]["index"]] for k in keys]

    def shapes(self) -> list:
        return [tuple(int(v) for v in d["shape_signature"]) for d in self.inputs]

    def run(self, feed: list) -> list:
        try:
            feed = [np.asarray(a, dtype=d["dtype"]) for d, a in zip(self.inputs, feed)]
            resized = False
            for d, a in zip(self.inputs, feed):  # every resize before the one allocation: allocating
                if self.it.get_tensor(d["index"]).shape != a.shape:  # drops the inputs set before it
                    self.it.resize_tensor_input(d["index"], list(a.shape))
                    resized = True
            if resized:
                self.it.allocate_tensors()
            for d, a in zip(self.inputs, feed):
                self.it.set_tensor(d["index"], a)
            self.it.invoke()
        except (RuntimeError, ValueError) as e:
            raise UnsupportedError(f"LiteRT cannot run the file on inputs of shape "
                                   f"{[tuple(np.shape(a)) for a in feed]} (it takes {self.shapes()}): "
                                   f"{_first_line(e)}") from None
        return [np.array(self.it.get_tensor(d["index"])) for d in self.outputs]

    def reset(self) -> None:
        self.it.reset_all_variables()


class TFLM:
    """The same file in TensorFlow Lite Micro's interpreter (PyPI ``tflite-micro``, the C++ runtime): fixed
    shapes only; inputs by position, outputs by position (the flatbuffer's order, mapped to the Keras model's
    through ``order``: LiteRT's mapping of the same file)."""

    name = "TFLM"

    def __init__(self, data: bytes, order: Optional[list] = None, inputs: Optional[list] = None):
        runtime = _need("tflite_micro.python.tflite_micro.runtime")
        said: list = []
        try:
            with _captured_output(said):
                self.it = runtime.Interpreter.from_bytes(data, arena_size=TFLM_ARENA)
        except Exception as e:
            why = "; ".join(said[:2])
            raise UnsupportedError(f"TensorFlow Lite Micro cannot load the file: {_first_line(e)}"
                                   + (f" ({why})" if why else "")) from None
        self.order, self.input_positions = order, inputs
        self.n_outputs = len(_schema().ModelT.InitFromPackedBuf(bytearray(data), 0).subgraphs[0].outputs)

    def run(self, feed: list) -> list:
        try:
            for i, a in enumerate(feed):
                at = self.input_positions[i] if self.input_positions is not None else i
                # the file's own input type, as LiteRT's run does (an Embedding's ids are int32 there: a float
                # array was refused, "Got value of type FLOAT32 but expected type INT32")
                dtype = self.it.get_input_details(at)["dtype"]
                self.it.set_input(np.ascontiguousarray(a, dtype=dtype), at)
            self.it.invoke()
            outs = [np.array(self.it.get_output(i)) for i in range(self.n_outputs)]
        except Exception as e:
            raise UnsupportedError(f"TensorFlow Lite Micro cannot run the file: {_first_line(e)}") from None
        return [outs[i] for i in self.order] if self.order is not None else outs

    def reset(self) -> None:
        self.it.reset()


@contextlib.contextmanager
def _captured_output(lines: list):
    """File descriptors 1 and 2 into a temporary file for the duration, its lines appended to ``lines``: TFLM's
    C++ ``MicroPrintf`` says why a file cannot load ("Didn't find op for builtin opcode 'SELECT'") on the
    process's own output, and its Python error only "TFLM failed to allocate tensors"."""
    import os
    import sys

    from ...files.outputs import scratch_dir

    sys.stdout.flush()
    sys.stderr.flush()
    with scratch_dir(prefix="gruconv-tflm-") as where, open(Path(where) / "said", "w+b") as sink:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(sink.fileno(), 1)
            os.dup2(sink.fileno(), 2)
            yield
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            lines.extend(ln.strip() for ln in sink.read().decode("utf-8", "replace").splitlines() if ln.strip())


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:300]


def output_positions(data: bytes, litert: LiteRT) -> list:
    """For each output in LiteRT's (the Keras model's) order, its position among the flatbuffer's outputs
    (what TFLM numbers them by)."""
    s = _schema()
    model = s.ModelT.InitFromPackedBuf(bytearray(data), 0)
    flat = list(model.subgraphs[0].outputs)
    return [flat.index(d["index"]) for d in litert.outputs]


def input_positions(data: bytes, litert: LiteRT) -> list:
    """For each input in LiteRT's (the Keras model's) order, its position among the flatbuffer's inputs."""
    s = _schema()
    model = s.ModelT.InitFromPackedBuf(bytearray(data), 0)
    flat = list(model.subgraphs[0].inputs)
    return [flat.index(d["index"]) for d in litert.inputs]


def tflm_for(data: bytes, litert: LiteRT) -> TFLM:
    """The file in TFLM, fed and read in LiteRT's (the Keras model's) order."""
    return TFLM(data, output_positions(data, litert), input_positions(data, litert))


def smoke(data: bytes, micro: bool) -> None:
    """The output contract: the file loads and invokes in LiteRT (and, micro, in TFLM) on zeros of its input
    shapes, with finite outputs, before it is placed; else one line (exit 3)."""
    try:
        rt = LiteRT(data)
        feed = [np.zeros([d if d > 0 else SMOKE_STEPS for d in s], np.float32) for s in rt.shapes()]
        outs = rt.run(feed)
    except GruconvError:
        raise
    except Exception as e:
        raise OutputError(f"the written .tflite does not run in LiteRT: {_first_line(e)}") from None
    if not all(np.isfinite(o).all() for o in outs):
        raise OutputError("the written .tflite gives NaN/Inf in LiteRT on zero inputs")
    if micro:
        tflm_for(data, rt).run(feed)


#: The largest difference the output contract lets a float file have from the Keras model it was made from
#: (float32 files measured within 3e-7 of Keras, ``docs/edge.md``; a wrong shape or a baked-in size is O(1)).
SAME_AS_MODEL = 1e-4


def same_as_model(data: bytes, model) -> None:
    """The output contract's numbers: the float file computes what ``model`` (the fixed-shape Keras model it was
    made from) computes, on one seeded random input of the file's sizes (:data:`SMOKE_STEPS` where the time axis
    is open), in LiteRT; else one line (exit 3) -- a converter that bakes a size into the graph (measured: a
    ``TimeDistributed`` over a dynamic time axis gave outputs of 1 step) is caught before the file is placed."""
    import warnings

    rt = LiteRT(data, [t.name for t in model.inputs])
    rng = np.random.default_rng(0)
    feed = [np.zeros([d if d > 0 else SMOKE_STEPS for d in s], d_["dtype"]) if np.dtype(d_["dtype"]).kind in "iub"
            else rng.uniform(-1, 1, [d if d > 0 else SMOKE_STEPS for d in s]).astype(np.float32)
            for s, d_ in zip(rt.shapes(), rt.inputs)]
    got = rt.run(feed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = model(feed if len(feed) > 1 else feed[0])
    ref = [np.asarray(r) for r in (ref if isinstance(ref, (list, tuple)) else [ref])]
    for i, (g, r) in enumerate(zip(got, ref)):
        if g.shape != r.shape:
            raise OutputError(f"the converted .tflite gives output {i} shaped {g.shape} where the model gives "
                              f"{r.shape} (inputs {[a.shape for a in feed]}): the converter fixed a size the model "
                              "leaves open; pass --timesteps T to fix the time axis")
        err = float(np.max(np.abs(g.astype(np.float64) - r))) if g.size else 0.0
        if not err <= SAME_AS_MODEL:
            raise OutputError(f"the converted .tflite differs from the model it was made from by {err:.3g} "
                              f"(output {i}); not written")
