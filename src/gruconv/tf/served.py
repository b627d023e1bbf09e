"""A SavedModel loaded by TensorFlow on the CPU, its signatures called with NumPy arrays and answering NumPy arrays.

Why one class: four places run a SavedModel's signatures -- the ``saved-model`` writer's serve check
(:func:`serves_on_cpu`), verify's end to end of a graph (:mod:`gruconv.verify.tfgraph`: the converted SavedModel
and the original with oracle nodes), verify's served tf.keras SavedModel (:mod:`gruconv.verify.reference.saved_model`,
through :func:`served_outputs`) -- and each needs the same three things: load on the CPU, the one probe loop
(:func:`gruconv.tf.runtime.first_run`), NumPy in and out.  Every one of them runs inside a child process of
:func:`gruconv.tf.bounded.run` (a signature is the user's program); nothing here starts one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class Loaded:
    """The SavedModel at ``path`` (``tf.saved_model.load`` on the CPU); TensorFlow's errors are the caller's."""

    def __init__(self, path):
        from .runtime import tensorflow

        self.tf = tf = tensorflow()
        with tf.device("/CPU:0"):
            self.loaded = tf.saved_model.load(str(path))

    def keys(self) -> list:
        return sorted(self.loaded.signatures.keys())

    def specs(self, key: str) -> dict:
        """``{input name: (shape with None for unknown dimensions, NumPy dtype)}`` of signature ``key``."""
        return {n: (s.shape.as_list() if s.shape.rank is not None else None, s.dtype.as_numpy_dtype)
                for n, s in self.loaded.signatures[key].structured_input_signature[1].items()}

    def outputs(self, key: str) -> list:
        return sorted(self.loaded.signatures[key].structured_outputs)

    def __call__(self, key: str, feed: dict, cast: bool = False) -> dict:
        """Signature ``key`` on ``feed`` (``{input name: array}``; ``cast``: each array to the input's dtype first)."""
        tf, fn = self.tf, self.loaded.signatures[key]
        if cast:
            specs = fn.structured_input_signature[1]
            feed = {n: np.asarray(a).astype(specs[n].dtype.as_numpy_dtype) for n, a in feed.items()}
        with tf.device("/CPU:0"):
            out = fn(**{n: tf.constant(a) for n, a in feed.items()})
        return {n: np.asarray(t.numpy()) for n, t in out.items()}

    def first_run(self, key: str, make, sizes) -> tuple:
        """``(feed, outputs)`` of signature ``key`` on ``make(specs, k)`` (:meth:`specs`' form; NumPy arrays) at
        the first of ``sizes`` it runs at (:func:`gruconv.tf.runtime.first_run`), or None when none does."""
        from .runtime import first_run

        tf = self.tf
        fn = self.loaded.signatures[key]
        try:
            feed, out = first_run(tf, fn, lambda specs, k: make(self.specs(key), k), sizes)
        except tf.errors.InvalidArgumentError:
            return None
        return feed, {n: np.asarray(t.numpy()) for n, t in out.items()}

    @property
    def variables(self) -> list:
        return list(self.loaded.variables)


def serves_on_cpu(path: Path, shown=None) -> list:
    """Load ``path`` with ``tf.saved_model.load`` and run every signature on the CPU on the probe inputs
    (:func:`gruconv.tf.runtime.first_run`); returns the keys run.  A failure is an
    :class:`~gruconv.errors.UnsupportedError` said of ``shown`` (the output's final path)."""
    from ..errors import UnsupportedError
    from .runtime import PROBE_WORDS, first_run, probe_feed, tensorflow, why

    tf = tensorflow("writing a SavedModel")
    try:
        with tf.device("/CPU:0"):
            loaded = tf.saved_model.load(str(path))
            keys = sorted(loaded.signatures.keys())
            for key in keys:
                first_run(tf, loaded.signatures[key], probe_feed(tf))
    except Exception as e:  # noqa: BLE001 - TensorFlow's errors, at its call: the output is not proven
        raise UnsupportedError(f"the converted SavedModel does not serve on a CPU ({type(e).__name__}: {why(e)}; "
                               f"run on {PROBE_WORDS}); nothing written", path=shown or path) from None
    return keys


def served_outputs(path, signature: str, inputs, outputs, feed: list, floor_runs=None) -> tuple:
    """A child process's work (:func:`gruconv.tf.bounded.run`) for verify's served tf.keras SavedModel:
    ``(error, reference, floors)``: ``error`` why it cannot be served (None: it can), ``reference`` signature
    ``signature``'s outputs ``outputs`` on ``feed`` (arrays in the order of the input names ``inputs``; None:
    the signature's own names, sorted), ``floors`` what ``floor_runs(model, feed)`` returns for the same model
    (verify's floor loop, handed in: :func:`gruconv.verify.floor.runs`), run here while the SavedModel is
    loaded (loading it again per perturbation costs seconds)."""
    from .runtime import import_quietly

    try:
        import_quietly("tensorflow")
    except ImportError:
        return "TensorFlow is not installed", None, None
    try:
        loaded = Loaded(path)
        got_in, got_out = sorted(loaded.specs(signature)), loaded.outputs(signature)
    except Exception as e:  # noqa: BLE001  third-party: TensorFlow refusing the SavedModel is a reason
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"TensorFlow cannot serve it ({type(e).__name__}: {first[:200]})", None, None
    inputs, outputs = inputs or got_in, outputs or got_out
    if sorted(inputs) != got_in or sorted(outputs) != got_out:
        return (f"its {signature!r} signature takes {got_in} and returns {got_out}, where the config's "
                f"model has inputs {sorted(inputs)} and outputs {sorted(outputs)}"), None, None
    model = _Variables(loaded, signature, inputs, outputs)
    reference = model(feed)
    floors = floor_runs(model, feed) if floor_runs is not None else None
    return None, reference, floors


class _Variables:
    """One signature of a :class:`Loaded` as verify's reference protocol (``__call__(feed)``,
    ``perturbed(rng, perturb)``, ``restore()``): every float variable moved by ``perturb`` (the floor's one-ulp
    rounding) from the file's values, and back."""

    def __init__(self, loaded: Loaded, key: str, inputs: list, outputs: list):
        self.loaded, self.key, self.inputs, self.outputs = loaded, key, inputs, outputs
        self._saved = None

    def __call__(self, feed: list) -> list:
        out = self.loaded(self.key, dict(zip(self.inputs, feed)), cast=True)
        return [out[k] for k in self.outputs]

    def perturbed(self, rng, perturb) -> "_Variables":
        if self._saved is None:
            self._saved = [v.numpy() for v in self.loaded.variables]
        self.restore()
        for v in self.loaded.variables:
            a = v.numpy()
            if a.dtype.kind == "f":
                v.assign(perturb(a, rng, dtype=a.dtype))
        return self

    def restore(self) -> None:
        if self._saved is not None:
            for v, a in zip(self.loaded.variables, self._saved):
                v.assign(a)
