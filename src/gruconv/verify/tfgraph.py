"""A graph holding cuDNN ops, end to end: the original graph against its two conversions.

The original graph cannot run here as it is (TensorFlow has no CPU kernel for a cuDNN op), so the
reference is the original with only its cuDNN nodes swapped for the float64 oracle, each fed the node's own
inputs and ``params`` as the graph computes them (:mod:`gruconv.verify.reference.tf_graph`; it matches real
cuDNN's outputs on every golden graph, ``tests/verify/test_graph_end_to_end.py``).  Against it, on the same
inputs, every ``serving_default`` output of

* the converted SavedModel (each node a call of standard TensorFlow ops, :mod:`gruconv.writers.saved_model`),
* the whole graph as ONNX (tf2onnx with gruconv's handlers, run by onnxruntime's own GRU/LSTM kernels:
  :mod:`gruconv.writers.onnx.tfgraph`).

What the reference shares with the outputs: exactly the rewrite, :mod:`gruconv.tf.rewrite` (its oracle nodes
replace the cuDNN nodes where the SavedModel output's equations do), with the SavedModel output; nothing with the
ONNX output (tf2onnx and gruconv's handlers, :mod:`gruconv.tf.to_onnx`).  Both conversions are made (when no
converted file is given) by the writers the registry hands ``convert`` (``writers.offering``), inside the same
bounded child as the reference.

What that checks beyond each node's own check (:func:`.subjects.tf_graph_subjects`, a bare stack on seeded
weights): the wiring around the nodes (which output a consumer reads, time- or batch-major tensors, the
states' layout, the signatures), the graph's own ``params`` and how the conversions read the nodes' attrs.

Inputs: each unknown dimension of a signature input is the same size ``k`` (the first of
:data:`PROBE_SIZES` the SavedModel runs at: a state of fixed rows may tie its batch to another size); float
inputs uniform in [-1, 1], integer inputs (``sequence_lengths``) uniform in [1, k].  The floor is the
converted SavedModel's own movement under one-ulp perturbations of its float inputs (:func:`.floor.perturb`).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from .. import writers

#: Sizes tried for every unknown dimension: the writer's serve check's (``gruconv.tf.runtime.PROBE_SIZES``), the smallest
#: batch of several sequences first (a size of 1 checks little of the batch's wiring).
PROBE_SIZES = (4, 3, 2, 6, 8, 1)
#: The signature compared (the ONNX writer converts this one).
from ..model.saved_model import SIGNATURE  # noqa: E402
#: The rows of each converted form.
SAVED_MODEL_ROWS, ONNX_ROWS = "end to end (converted SavedModel)", "end to end (whole graph as ONNX)"
LABELS = (SAVED_MODEL_ROWS, ONNX_ROWS)


def _random_feed(rng):
    """``make`` for :meth:`gruconv.tf.served.Loaded.first_run`: float inputs uniform in [-1, 1], integer
    inputs uniform in [1, k], every unknown dimension ``k``."""
    def make(specs, k):
        feed = {}
        for name, (shape, dt) in specs.items():
            shape = [k if d is None else d for d in shape or []]
            if np.issubdtype(dt, np.integer):
                feed[name] = rng.integers(1, k + 1, size=shape).astype(dt)
            else:
                feed[name] = rng.uniform(-1, 1, size=shape).astype(dt)
        return feed

    return make


def _saved_model(doc, converted, tmp: Path) -> Path:
    """The converted SavedModel: ``converted`` when it is one, else written here as ``convert`` writes it (the
    ``saved-model`` writer, through the registry)."""
    if converted is not None and Path(converted).is_dir():
        return Path(converted)
    out = tmp / "saved_model"
    out.mkdir()  # the writer fills an empty directory (:meth:`gruconv.files.outputs.Outputs.tree` makes it)
    writers.offering(doc.content).write(doc.document(), SimpleNamespace(tmp=out, path=out, warnings=[]), None)
    return out


def _onnx(doc, converted, tmp: Path):
    """The whole graph as ONNX: ``converted`` when it is a ``.onnx`` file, else written here as ``convert``
    writes it (the ``onnx`` writer's ``tf-graph-file`` kind, through the registry)."""
    import onnx

    if converted is not None and Path(converted).is_file() and Path(converted).suffix == ".onnx":
        return onnx.load(str(converted))
    out = tmp / "model.onnx"
    writers.offering("tf-graph-file").write(doc.document(), SimpleNamespace(kind="tf-graph-file", tmp=out, path=out,
                                                                 warnings=[]), None)
    return onnx.load(str(out))


def _onnx_outputs(doc, converted, feed: dict, ref: dict, tmp: Path):
    """``(outputs, None)`` of the whole-graph ONNX on ``feed`` run by onnxruntime, or ``(None, why not)``."""
    from ..errors import GruconvError
    from ..tf.runtime import missing

    try:
        import onnxruntime as ort
    except ImportError as e:
        return None, f"{e.name or e} is not installed (pip install 'gruconv[graphs]')"
    absent = missing("tf2onnx")
    if absent is not None:
        return None, f"{absent} is not installed (pip install 'gruconv[graphs]')"
    try:
        model = _onnx(doc, converted, tmp)
    except GruconvError as e:
        return None, e.message
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names_in = [i.name for i in session.get_inputs()]
    names_out = [o.name.split(":")[0] for o in session.get_outputs()]
    if sorted(names_in) != sorted(feed) or sorted(names_out) != sorted(ref):
        return None, (f"the ONNX model takes {sorted(names_in)} and gives {sorted(names_out)}, the SavedModel's "
                      f"{SIGNATURE!r} takes {sorted(feed)} and gives {sorted(ref)}")
    return dict(zip(names_out, session.run(None, {n: feed[n] for n in names_in}))), None


def _floor(loaded, key: str, feed: dict, got: dict) -> dict:
    """Per output, the most signature ``key``'s outputs move under one-ulp perturbations of its float inputs."""
    from .floor import DEFAULT_SEEDS, perturb

    worst = {k: 0.0 for k in got}
    for seed in range(DEFAULT_SEEDS):
        prng = np.random.default_rng(seed)
        moved = loaded(key, {n: perturb(a, prng, dtype=a.dtype) if a.dtype.kind == "f" else a
                             for n, a in feed.items()})
        for k in got:
            worst[k] = max(worst[k], float(np.max(np.abs(moved[k].astype(np.float64) - got[k].astype(np.float64)),
                                                  initial=0.0)))
    return worst


#: What the report says of the reference, once it ran.
REFERENCE_NOTE = ("end to end: the original graph run by TensorFlow on the CPU, each cuDNN node computed by "
                  "the float64 oracle from the node's own inputs and params (configured by its NodeDef, not "
                  "by gruconv's reading of it), against the converted SavedModel (every signature) and the "
                  f"whole graph as ONNX ({SIGNATURE}), every output; real cuDNN is not run inside the graph "
                  "(no machine here has both TensorFlow and a GPU)")


def _rows(doc, converted, rng) -> tuple:
    """The child process's work (:func:`gruconv.tf.bounded.run`): ``(rows, skips, ran)``: ``rows`` the
    ``(label, outputs, reference, floor)`` to judge, ``skips`` the ``(label, why)`` not checked, ``ran``
    whether the reference ran."""
    from ..errors import GruconvError, InputError
    from ..files.outputs import scratch_dir
    from ..tf.served import Loaded
    from .reference.tf_graph import original

    from ..tf.runtime import missing

    absent = missing("tensorflow")
    if absent is not None:
        return [], [(label, f"{absent} is not installed (pip install 'gruconv[tensorflow]')") for label in LABELS], False

    rows, skips = [], []  # rows: (label, outputs, reference, floor)
    with scratch_dir(prefix="gruconv-verify-graph-") as tmp:
        try:
            sm_path = _saved_model(doc, converted, Path(tmp))
            ref_path = original(doc.document().tf_graph, Path(tmp) / "original")
        except InputError:
            raise  # the graph itself is broken (TensorFlow cannot import it): verify fails as convert does
        except GruconvError as e:
            return [], [(label, e.message) for label in LABELS], False
        loaded, reference = Loaded(sm_path), Loaded(ref_path)
        keys = sorted(loaded.keys(), key=lambda k: (k != SIGNATURE, k))
        if SIGNATURE not in keys:
            skips.append((ONNX_ROWS, f"the SavedModel has no {SIGNATURE!r} signature"))
        for key in keys:
            run = loaded.first_run(key, _random_feed(rng), PROBE_SIZES)
            label = SAVED_MODEL_ROWS if key == SIGNATURE else f"{SAVED_MODEL_ROWS}: {key}"
            if run is None:
                skips.append((label, f"no input size in {PROBE_SIZES} runs signature {key!r}"))
                continue
            feed, got = run
            ref = reference(key, feed)
            worst = _floor(loaded, key, feed, got)
            rows.append((label, got, ref, worst))
            if key == SIGNATURE:
                onnx_out, why = _onnx_outputs(doc, converted, feed, ref, Path(tmp))
                if why is not None:
                    skips.append((ONNX_ROWS, why))
                else:
                    rows.append((ONNX_ROWS, onnx_out, ref, worst))
        del loaded, reference
    return rows, skips, True


def end_to_end(doc, converted, engine, report, rng) -> None:
    """Every output of every signature of the converted SavedModel, and every ``serving_default`` output of the
    whole-graph ONNX, against the original graph's (module docstring); a note says why a part cannot run
    (TensorFlow or tf2onnx missing, a signature no probe size runs, names that differ).  The graphs run in a
    child process within the graph's budget (:mod:`gruconv.tf.bounded`); the verdicts are judged here."""
    from ..tf.bounded import run
    from .verdicts import judge

    graph = doc.document().tf_graph
    rows, skips, ran = run(_rows, doc, converted, rng, budget=graph.budget, path=Path(doc.path),
                           doing="on verify's inputs", reuse=True)
    if not ran and not graph.rnns and skips:  # no node of its own to check (a graph that already serves on a
        # CPU): without the end-to-end rows nothing would be checked, which is no parity failure
        from ..errors import UnsupportedError

        raise UnsupportedError(f"nothing can be checked: the graph has no cuDNN node to replace, and end to end "
                               f"{skips[0][1]}", path=Path(doc.path))
    for label, why in skips:
        report.notes.append(f"{label}: not checked, {why}")
    if not ran:
        return
    report.notes.append(REFERENCE_NOTE)
    for label, outputs, ref, worst in rows:
        for k in sorted(ref):
            dtype = "float16" if ref[k].dtype == np.float16 else "float32"
            report.checks.append(judge(report, f"{label}: {k}", outputs[k], ref[k], None, dtype, worst[k]))
