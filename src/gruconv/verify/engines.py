"""Reference engines: the original parameters run by real cuDNN on a GPU
(:mod:`gruconv.verify.reference.cudnn_rnn`) or by the float64 oracle (:mod:`gruconv.verify.reference.oracle`), and the choice
between them (``--reference``)."""

from __future__ import annotations

import copy

import numpy as np

from ..model.canonical import RNNStack
from ..errors import ReferenceUnavailable, UsageError


class Engine:
    """Runs a canonical stack; also returns its float64 run for the noise floor.

    An LSTM's initial cell state goes in as ``c0``; its final cell states, the
    reference's and the float64 oracle's, are left in ``cy`` and ``cy64``
    (None for a GRU) after each :meth:`run`.
    """

    #: runs are given the buffer the original layer gave cuDNN (``opaque``); :class:`gruconv.verify.floor.PerturbedEngine`'s are not
    uses_buffer = True

    def __init__(self, kind: str, allow_tf32: bool):
        self.kind = kind
        self.allow_tf32 = allow_tf32
        #: the cuDNN algorithm this engine runs (``gruconv.verify.reference.cudnn_rnn.ALGORITHMS``); the reference's is
        #: ``standard``, :meth:`variants` run the others
        self.algo = "standard"
        self.info: dict = {}
        self.cy = self.cy64 = None
        if kind == "cudnn":
            from .reference import cudnn_lib

            ok, reason = cudnn_lib.available()
            if not ok:
                raise ReferenceUnavailable(f"cuDNN reference unavailable: {reason}")
            self.info = cudnn_lib.library_info()

    def run(self, stack: RNNStack, x_tm: np.ndarray, h0=None, lengths=None, opaque=None, c0=None) -> tuple:
        """(y, hy, y64, hy64): reference outputs and the float64 oracle's, time-major."""
        from .reference.oracle import run_stack

        if self.algo != "standard":  # a variant (:meth:`variants`): cuDNN only, its float64 twin unused
            y, hy, self.cy = self._cudnn(stack, x_tm, h0, lengths, opaque, c0)
            self.cy64 = self.cy
            return y, hy, y, hy
        y64, hy64, cy64 = run_stack(stack, x_tm, h0, lengths, c0)
        self.cy64 = cy64
        if self.kind == "oracle":
            self.cy = cy64
            return y64, hy64, y64, hy64
        y, hy, self.cy = self._cudnn(stack, x_tm, h0, lengths, opaque, c0)
        return y, hy, y64, hy64

    def _cudnn(self, stack, x_tm, h0, lengths, opaque, c0) -> tuple:
        from .reference import cudnn_rnn
        from ..model.cudnn_layout import pack

        buf = pack(stack.params, stack.shape) if opaque is None else opaque
        cast = lambda a: None if a is None else np.asarray(a).astype(buf.dtype)  # noqa: E731
        y, hy, cy, info = cudnn_rnn.run(buf, stack.shape, x_tm.astype(buf.dtype), cast(h0), cast(c0),
                                        lengths, allow_tf32=self.allow_tf32, algo=self.algo)
        if self.algo == "standard":
            self.info.update(info)
        return y, hy, cy

    def variants(self) -> list:
        """[(algorithm, engine)]: this cuDNN reference run by each of cuDNN's other algorithms.

        Why: cuDNN's algorithms are all "the cuDNN path", and they round differently.  On the trained
        fixtures (H100, cuDNN 9, strict ``CUDNN_FMA_MATH``) the standard algorithm is 1.2e-6 from
        float64 at 100 steps and the persistent ones 3.3e-5; torch's own cuDNN call on unpacked
        input takes ``persist_static_small_h`` and matches it (``scripts/gpu_cudnn_variants.py``,
        docs/gpu-verification.md, 2026-11-27).  A converted model run through cuDNN by its framework
        is compared with the algorithm it matches best (:func:`gruconv.verify.verdicts.judge`).
        The float64 oracle has none."""
        if self.kind != "cudnn":
            return []
        from .reference.cudnn_rnn import ALGORITHMS

        out = []
        for name in ALGORITHMS:
            if name != "standard":
                twin = copy.copy(self)
                twin.algo, twin.info = name, {}
                out.append((name, twin))
        return out


def choose_reference(reference: str) -> tuple:
    if reference not in ("auto", "cudnn", "oracle"):
        raise UsageError(f"--reference must be auto, cudnn or oracle, got {reference!r}")
    if reference == "oracle":
        return "oracle", "requested"
    if reference == "cudnn":
        return "cudnn", "requested"
    cudnn_lib = None
    try:
        from .reference import cudnn_lib

        ok, reason = cudnn_lib.available()
    except Exception as e:  # noqa: BLE001 - availability probing must never fail verify
        ok, reason = False, str(e)
    if ok:
        return "cudnn", f"auto: {reason}"
    if cudnn_lib is not None and reason.startswith(cudnn_lib.NO_GPU):  # no GPU at all: said so, not the CUDA error it causes
        return "oracle", f"auto: {reason.split(';')[0]}; reference is the float64 oracle"
    short = reason.split(";")[0].split(": ")[-1][:80]
    return "oracle", f"auto: no usable GPU/cuDNN here: {short}; float64 oracle instead"
