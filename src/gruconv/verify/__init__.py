"""Numerical parity: the ORIGINAL parameters through a reference GRU vs the converted Keras 3 model.

References (``--reference``):

``cudnn``
    The real cuDNN GRU on a GPU (:mod:`gruconv.verify.reference.cudnn_rnn`), fed the opaque
    buffer exactly as the original framework fed it: for a TF1 checkpoint the
    stored buffer itself; for a Keras ``CuDNNGRU`` the buffer its
    ``_process_batch`` builds (each direction a separate unidirectional
    cuDNN call, weights flattened in cuDNN gate order — see
    :mod:`gruconv.model.keras_layout`).  Strict fp32 (``CUDNN_FMA_MATH``) unless
    ``allow_tf32``: with TF32, cuDNN's own error against float64 is 1e-4–5e-4
    (``shared/cudnn-golden/README.md``), so a 1e-5 check would fail on
    correct weights.
``oracle``
    :mod:`gruconv.verify.reference.oracle`, float64 NumPy, on any machine.
``auto``
    ``cudnn`` when a GPU and libcudnn are usable, else ``oracle``; the report
    says which ran and why.

Every check also reports the reference's own error against float64, and
its verdict is floor-aware (``docs/verdicts.md``): it passes within
the absolute tolerance, or ``rtol`` of the reference's magnitude, or ``k``
times the measured float32 sensitivity floor (:mod:`gruconv.verify.floor`),
so a trained model's amplified rounding is not mistaken for a conversion
bug; each row says which bound decided.  Weights-only files without
``--config`` are checked layer by layer (:func:`.graph.verify_alone`), and so are models
whose custom layers Keras cannot rebuild without ``--custom-objects`` (:mod:`.partial`).

Checks: per converted recurrent layer (fed exactly the activations that reach
it in the converted model; every output compared: sequence/last output and
final states), plus end to end where the reference can produce the model's
outputs (a TF1 stack; a Sequential model).

The package: :mod:`.verdicts` (comparison and verdict rules), :mod:`.engines` (reference engines),
:mod:`.graph` (graph checks), :mod:`.stacks` (stack checks), :mod:`.subjects` (what each kind of
document is checked by, :data:`.subjects.CHECKS`); this module runs them on every device asked for.
"""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Optional

import numpy as np

from .. import readers
from ..errors import ReferenceUnavailable, UsageError
from ..files.inputs import reading_once
from ..options import Bounds, Options
from ..progress import step
from .engines import Engine, choose_reference
from .run import CURRENT_RUN
from .graph import check_user_inputs, verify_alone, verify_graph
from .partial import verify_partial
from .stacks import verify_stack
from .subjects import checks_after, nothing_to_verify, refuse_early, verify_subjects
from .verdicts import FLOAT16_TOLERANCE_FLOOR, Check, VerifyReport, compare

__all__ = ["verify", "Check", "VerifyReport", "compare", "FLOAT16_TOLERANCE_FLOOR", "DEVICES", "MAX_RANDOM_STEPS"]


DEVICES = ("auto", "cpu", "gpu", "both")


#: Random-input size bound (batch x steps): a parity check needs a few steps, and an unbounded request
#: would allocate before anything ran (``tests/cli/test_hostile.py``, ``verify_steps_huge``).
MAX_RANDOM_STEPS = 1_000_000


def _device_runs(device: str, report, probe=None) -> list:
    """[(label, math)] of the converted-side runs asked for; GPU runs only where the backend has one.

    ``auto``: ``both`` where a GPU is usable, else ``cpu`` with a note; ``gpu`` and ``both`` without
    a usable GPU are refused in one line.  Each GPU run is done twice: strict fp32
    (counts for the verdict) and the framework's default math (informational)."""
    from ..keras3 import runtime as keras3

    if device not in DEVICES:
        raise UsageError(f"--device must be one of {', '.join(DEVICES)}, got {device!r}")
    runs = [("cpu", None)] if device in ("auto", "cpu", "both") else []
    if device == "cpu":
        return runs
    if probe is not None:  # a target that runs itself says whether it has a GPU (writers.gpu_probe)
        ok, why, settings = probe()
        backend = why.split(" ")[0]
    else:
        ok, why = keras3.gpu_status()
        backend = keras3.keras().backend.backend()
        settings = keras3.MATH_SETTINGS.get(backend, {})
    if not ok:
        if device in ("gpu", "both"):  # asked for explicitly: refused; auto keeps the note
            raise ReferenceUnavailable(f"--device {device}: the {backend} backend has no usable GPU here ({why})")
        report.notes.append(f"GPU path not run: {why}")
        report.devices.append({"device": "gpu", "ran": False, "reason": why})
        return runs
    for math in ("strict", "default"):
        report.devices.append({"device": f"gpu {math}", "ran": True, "reason": why,
                               "math": settings.get(math, math), "kernels": {}})
        runs.append((f"gpu {math}", math))
    return runs


@reading_once
def verify(input, converted=None, options: Optional[Options] = None, *, bounds: Optional[Bounds] = None,
           reference: str = "auto", allow_tf32: bool = False, batch: int = 2, steps: int = 8, seed: int = 0,
           inputs=None, device: str = "cpu", int8_tolerance: Optional[float] = None, **kw) -> VerifyReport:
    """Run the original parameters through the reference and the converted model on the CPU; compare.

    Without ``converted``, the model ``convert`` would write, built in memory (a Keras graph: from the one
    translated config, :func:`gruconv.keras3.config.translate`, and the streamed writer's weight stream,
    :func:`gruconv.writers.keras_route.built`).  Never raises for a
    parity failure: the report says; the CLI decides.  ``bounds``: the verdict's (None: the defaults).
    """
    from ..keras3 import runtime as keras3

    opts = Options.of(options, **kw)
    input = Path(input)
    kind, reason = choose_reference(reference)
    engine = Engine(kind, allow_tf32)
    report = VerifyReport(
        input=str(input), converted=None if converted is None else str(converted), reference=kind,
        reference_reason=reason, bounds=Bounds() if bounds is None else bounds,
        math_mode=("float64" if kind == "oracle" else ("TF32 allowed (CUDNN_DEFAULT_MATH)" if allow_tf32
                                                      else "strict fp32 (CUDNN_FMA_MATH)")),
        seed=seed, batch=batch, steps=steps, int8_tolerance=int8_tolerance,
    )
    if batch * steps > MAX_RANDOM_STEPS:
        raise UsageError(f"--batch {batch} x --steps {steps} is {batch * steps} sequence steps, more than "
                         f"{MAX_RANDOM_STEPS} (a check needs a few; --inputs FILE.npz for real data)")
    user_inputs = _load_inputs(inputs) if inputs else None
    if user_inputs is not None and not user_inputs:
        raise UsageError("--inputs holds no arrays", path=inputs)
    if converted is not None and not Path(converted).is_dir():
        from ..files.inputs import regular_file

        regular_file(converted, "a converted model (.keras or weights .h5)")
    from .. import run_options, writers

    module = readers.module(run_options.reader_for(input, converted))

    run_options.refuse_unread(opts, run_options.accepted_options(module.FORMAT, list(writers.WRITERS)),
                              module.DESCRIPTION)
    doc = module.read(input, opts)
    refuse_early(doc)  # a document that never has anything to check says so before Keras is imported
    keras = keras3.keras()
    report.environment = {"keras": keras.__version__, "backend": keras.backend.backend(), **engine.info}
    probe = writers.gpu_probe(converted) if converted is not None else None
    runs = _device_runs(device, report, probe)
    for label, math in runs:
        scope = keras3.cpu() if math is None else keras3.on_gpu(math) if probe is None else contextlib.nullcontext()
        token = CURRENT_RUN.set((label, math))
        first = len(report.checks)
        with warnings.catch_warnings(), scope, keras3.rnn_kernel_probe() as kernels:
            warnings.simplefilter("ignore")
            try:
                done = _run_checks(doc, converted, opts, engine, report, np.random.default_rng(seed), user_inputs)
            finally:
                CURRENT_RUN.reset(token)
        for c in report.checks[first:]:
            c.device, c.counts = label, math != "default"
        for d in report.devices:
            if d.get("device") == label:
                d["kernels"] = _kernel_summary(kernels)
        if label == "cpu" and runs[1:]:
            report.notes.append(f"CPU run: recurrent kernels {_kernel_summary(kernels) or 'none recorded'}")
        if done:
            break
    report.environment.update(engine.info)
    return report


_NO_BUFFER = "%s: no stored opaque buffer; cuDNN was fed the canonical weights packed in this cuDNN's layout"


def _kernel_summary(seen: list) -> dict:
    """{'gru': {'cudnn': 2}, ...} from :func:`gruconv.keras3.runtime.rnn_kernel_probe`."""
    out: dict = {}
    for op, how in seen:
        out.setdefault(op, {}).setdefault(how, 0)
        out[op][how] += 1
    return out


def _every_model(doc, converted) -> bool:
    """Whether ``converted`` is a file whose writer converts models with no cuDNN layer too (``EVERY_MODEL``: the
    edge files) and ``doc`` is such a model (``nothing_forced``): ``convert`` wrote it, so ``verify`` checks it."""
    from .. import writers

    d = doc.document()
    name = None if Path(converted).is_dir() else writers.claimed_by(converted)
    return bool(name and writers.module(name).EVERY_MODEL and d.nothing and d.nothing_forced)


def _run_checks(doc, converted, opts, engine, report, rng, user_inputs) -> bool:
    """One run of every check on the current device; True when there was nothing to check.

    What to check is decided by what the document holds (:mod:`.subjects`: bare stacks, or a whole
    model with its Keras graph) and the writers say how to load what they wrote; no format is named
    here."""
    from ..keras3 import runtime as keras3

    note = nothing_to_verify(doc)
    if note is not None and converted is not None and _every_model(doc, converted):
        note = None  # an edge file of a model with no cuDNN layer (written without --force): checked all the same
    if note is not None:
        report.notes.append(note)
        report.nothing_to_convert = True
        return True
    for n, subject in enumerate(verify_subjects(doc, converted, opts), 1):
        if subject.graph is None:  # a bare stack (the graph checks report their layers themselves)
            step("verify", n, None, subject.name)
        if subject.in_memory:  # no converted file: the model convert would write, built here
            from .. import writers

            with keras3.custom_scope(subject.custom_objects):
                subject.model, _ = writers.offering("graph", "built").built(subject.graph)
        if subject.graph is not None and subject.model is None:  # weights-only: each layer alone
            # (a model with an architecture Keras cannot rebuild here, custom layers: each layer alone too)
            alone = verify_partial if getattr(subject.graph, "model_config", None) is not None else verify_alone
            alone(subject.graph, converted, engine, report, rng, user_inputs)
            continue
        if subject.graph is not None:
            if user_inputs:
                check_user_inputs(keras3.keras(), subject.model, user_inputs, report.input)
            verify_graph(subject.graph, _take_model(subject), engine, report, rng, user_inputs, whole=subject.whole)
            continue
        if subject.opaque is None and engine.kind == "cudnn" and report.notes.count(_NO_BUFFER % subject.name) == 0:
            report.notes.append(_NO_BUFFER % subject.name)
        verify_stack(subject.stack, subject.opaque, subject.model, engine, report, rng, user_inputs)
        if getattr(subject.model, "engine", None):  # a torch / onnx output: its own runtime ran it
            ran = report.environment.setdefault("converted_by", [])
            if subject.model.engine not in ran:
                ran.append(subject.model.engine)
    after = checks_after(doc)
    if after is not None and not engine.__dict__.get("checked_after"):  # once per verify, not per device run
        engine.__dict__["checked_after"] = True
        after(doc, converted, engine, report, rng)
    return False


def _take_model(subject):
    """``subject.model``, no longer held by ``subject``: the graph checks let it go once its forward pass
    is recorded (:func:`.graph.verify_graph`)."""
    model, subject.model = subject.model, None
    return model


def _load_inputs(path) -> list:
    from ..files.inputs import load_npz

    return list(load_npz(Path(path), what="verify inputs (.npz)").values())
