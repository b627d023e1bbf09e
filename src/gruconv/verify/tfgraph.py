"""A graph holding cuDNN ops, end to end: its two conversions against each other.

Why this check: the original graph cannot run here (TensorFlow has no CPU kernel for a cuDNN op), and each of
its cuDNN nodes is already checked as a bare stack against the reference (:func:`.subjects.tf_graph_subjects`).
What that leaves unchecked is the wiring around the nodes: which output a consumer reads, time- or batch-major
tensors, the states' layout, the signatures.  gruconv converts a graph two ways that share none of that code:
the SavedModel rewrite (each node a call of standard TensorFlow ops, :mod:`gruconv.writers.saved_model`) and
the whole graph as ONNX (tf2onnx with gruconv's handlers, run by onnxruntime's own GRU/LSTM kernels:
:mod:`gruconv.writers.onnx.tfgraph`).  Every ``serving_default`` output of the one is compared with the other's
on the same inputs; a wiring error in either shows as a failed row.  Both are compared with the real cuDNN
outputs of every golden file by the tests (``fixtures/graphs_golden``).

Inputs: each unknown dimension of a signature input is the same size ``k`` (the first of
:data:`PROBE_SIZES` the SavedModel runs at: a state of fixed rows may tie its batch to another size); float
inputs uniform in [-1, 1], integer inputs (``sequence_lengths``) uniform in [1, k].  The floor is the
SavedModel's own movement under one-ulp perturbations of its float inputs (:func:`.floor.perturb`).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

#: Sizes tried for every unknown dimension (as the writer's serve check does).
PROBE_SIZES = (4, 3, 2, 6, 8, 1)
#: The signature compared (the ONNX writer converts this one).
SIGNATURE = "serving_default"
LABEL = "end to end (SavedModel vs ONNX)"


def _feeds(tf, fn, rng) -> tuple:
    """``(inputs, outputs)`` of ``fn`` on random inputs at the first probe size it runs at, or None."""
    specs = fn.structured_input_signature[1]
    for k in PROBE_SIZES:
        feed = {}
        for name, spec in specs.items():
            shape = [k if d is None else d for d in spec.shape.as_list()]
            dt = spec.dtype.as_numpy_dtype
            if spec.dtype.is_integer:
                feed[name] = rng.integers(1, k + 1, size=shape).astype(dt)
            else:
                feed[name] = rng.uniform(-1, 1, size=shape).astype(dt)
        try:
            with tf.device("/CPU:0"):
                out = fn(**{n: tf.constant(a) for n, a in feed.items()})
            return feed, {n: np.asarray(t.numpy()) for n, t in out.items()}
        except tf.errors.InvalidArgumentError:
            continue
    return None


def _saved_model(tf, doc, converted, tmp: Path) -> Path:
    """The converted SavedModel: ``converted`` when it is one, else written here as ``convert`` writes it."""
    if converted is not None and Path(converted).is_dir():
        return Path(converted)
    from ..writers.saved_model import write

    out = tmp / "saved_model"
    out.mkdir()  # the writer fills an empty directory (:meth:`gruconv.files.outputs.Outputs.tree` makes it)
    write(doc.document(), SimpleNamespace(tmp=out, path=out, warnings=[]), None)
    return out


def _onnx(doc, converted):
    """The whole graph as ONNX: ``converted`` when it is a ``.onnx`` file, else built here."""
    import onnx

    if converted is not None and Path(converted).is_file() and Path(converted).suffix == ".onnx":
        return onnx.load(str(converted))
    from ..writers.onnx.tfgraph import build

    return build(Path(doc.document().source))[0]


def cross_check(doc, converted, engine, report, rng) -> None:
    """Every ``serving_default`` output of the converted SavedModel against the whole-graph ONNX's (module
    docstring); a note says why when it cannot run (tf2onnx missing, no such signature, names that differ)."""
    from ..errors import GruconvError
    from ..keras3.runtime import import_quietly
    from .floor import DEFAULT_SEEDS, perturb
    from .verdicts import judge

    def skip(why: str) -> None:
        report.notes.append(f"{LABEL}: not checked, {why}")

    try:
        tf = import_quietly("tensorflow")
        import onnxruntime as ort
        import_quietly("tf2onnx")
    except ImportError as e:
        return skip(f"{e.name or e} is not installed (pip install 'gruconv[graphs]')")
    from ..files.outputs import scratch_dir

    with scratch_dir(prefix="gruconv-verify-graph-") as tmp:
        try:
            sm_path = _saved_model(tf, doc, converted, Path(tmp))
            model = _onnx(doc, converted)
        except GruconvError as e:
            return skip(e.message)
        with tf.device("/CPU:0"):
            loaded = tf.saved_model.load(str(sm_path))
        if SIGNATURE not in loaded.signatures:
            return skip(f"the SavedModel has no {SIGNATURE!r} signature")
        fn = loaded.signatures[SIGNATURE]
        run = _feeds(tf, fn, rng)
        if run is None:
            return skip(f"no input size in {PROBE_SIZES} runs the SavedModel")
        feed, ref = run
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        names_in = [i.name for i in session.get_inputs()]
        names_out = [o.name.split(":")[0] for o in session.get_outputs()]
        if sorted(names_in) != sorted(feed) or sorted(names_out) != sorted(ref):
            return skip(f"the ONNX model takes {sorted(names_in)} and gives {sorted(names_out)}, the SavedModel's "
                        f"{SIGNATURE!r} takes {sorted(feed)} and gives {sorted(ref)}")
        got = dict(zip(names_out, session.run(None, {n: feed[n] for n in names_in})))
        worst = {k: 0.0 for k in ref}
        for seed in range(DEFAULT_SEEDS):
            prng = np.random.default_rng(seed)
            moved = {n: perturb(a, prng, dtype=a.dtype) if a.dtype.kind == "f" else a for n, a in feed.items()}
            with tf.device("/CPU:0"):
                out = fn(**{n: tf.constant(a) for n, a in moved.items()})
            for k in ref:
                worst[k] = max(worst[k], float(np.max(np.abs(np.asarray(out[k].numpy(), np.float64)
                                                             - ref[k].astype(np.float64)), initial=0.0)))
        del loaded, fn
    report.notes.append(f"{LABEL}: the converted SavedModel (TensorFlow's standard ops) and the whole graph as ONNX "
                        "(tf2onnx, onnxruntime's GRU/LSTM) on the same inputs, every serving_default output: two "
                        "conversions that share no wiring code; the original graph runs only on a GPU")
    for k in sorted(ref):
        dtype = "float16" if ref[k].dtype == np.float16 else "float32"
        report.checks.append(judge(report, f"{LABEL}: {k}", got[k], ref[k], None, dtype, worst[k]))
