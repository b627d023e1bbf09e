"""A written ``.tflite`` as ``verify`` drives it, in the runtimes it targets: LiteRT always, TensorFlow Lite
Micro too for a micro file (LiteRT passing does not mean TFLM passes: a ``WHILE`` model returning sequences
runs silently wrong in TFLM, ``shared/DESIGN.md`` "Edge targets").  A Keras graph's file is one
:class:`FileRunner` (whole model, every output); a bare stack's file is a
:class:`gruconv.writers.runner.StackRunner` per runtime, so the stack checks are the ones every target gets."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..runner import StackRunner
from . import litert


class FileRunner:
    """The whole model of a Keras graph's ``.tflite``: ``runtimes()`` -> ``[(name, run)]`` with ``run(feed,
    calls)`` -> ``[outputs per call]`` (a stateful file invoked ``calls`` times in a row from a zero state;
    a stateless one fed in chunks of its fixed batch).  ``batch``, ``timesteps``: the sizes the file fixes
    (``timesteps`` None: any); ``int8``, ``stateful``, ``profile`` from its metadata."""

    def __init__(self, data: bytes, meta: dict):
        self.data, self.meta = data, meta
        self.litert = litert.LiteRT(data, meta.get("inputs"))
        shapes = self.litert.shapes()
        self.batch = int(meta.get("batch") or shapes[0][0])
        steps = meta.get("timesteps")
        self.timesteps = int(steps) if steps else (shapes[0][1] if len(shapes[0]) > 1 and shapes[0][1] > 0 else None)
        self.int8 = bool(meta.get("int8"))
        self.stateful = bool(meta.get("stateful"))
        self.profile = meta.get("profile") or ("micro" if "WHILE" not in meta.get("ops", ["WHILE"]) else "mobile")
        self.n_inputs = len(shapes)

    def feed_size(self, batch: int, steps: int) -> tuple:
        """The (batch, steps) verify's inputs get: the file's fixed sizes where it fixes them; a stateless file
        takes any multiple of its batch (fed in chunks)."""
        b = batch if (not self.stateful and batch % self.batch == 0) else self.batch
        return b, self.timesteps or steps

    def runtimes(self) -> list:
        out = [("LiteRT", self.litert)]
        if self.profile == "micro":
            out.append(("TFLM", litert.tflm_for(self.data, self.litert)))
        return out

    def run(self, rt, feed: list, calls: int = 1) -> list:
        """``calls`` invokes of ``feed`` (each a list of outputs); chunks of the file's batch when stateless."""
        rt.reset()
        results = []
        for _ in range(calls):
            n = int(np.asarray(feed[0]).shape[0])
            chunks = [rt.run([np.asarray(a)[i:i + self.batch] for a in feed]) for i in range(0, n, self.batch)]
            results.append([np.concatenate([c[j] for c in chunks]) for j in range(len(chunks[0]))])
        return results


def stack_runners(data: bytes, meta: dict) -> dict:
    """``{name: StackRunner}`` run by LiteRT, plus ``{"<name> (TFLM)": StackRunner}`` for a micro file: the
    ``.keras`` stack model's interface (``x``, initial states, ``mask``; outputs ``y`` then every final
    state), fed in chunks of the file's batch."""
    from ...model.canonical import CELLS, StackShape

    shape = StackShape(**meta["shape"])
    name = meta.get("name") or f"{shape.cell}_stack"
    per = len(CELLS[shape.cell].states)
    state_inputs, mask_input = bool(meta.get("initial_state")), bool(meta.get("mask_input"))
    lite = litert.LiteRT(data, meta.get("inputs"))
    batch = int(meta.get("batch") or 1)
    engines = [("LiteRT", lite)]
    if meta.get("profile") == "micro":
        engines.append(("TFLM", litert.tflm_for(data, lite)))

    def make(rt, label):
        def run(x_tm, h0, c0, lengths, math):
            x = np.ascontiguousarray(np.asarray(x_tm).transpose(1, 0, 2), dtype=np.float32)
            B, T = x.shape[0], x.shape[1]
            feed = [x]
            if state_inputs:
                for i in range(shape.num_pseudo_layers):
                    feed.append(h0[i])
                    if per > 1:
                        feed.append(c0[i])
            if mask_input:
                feed.append(np.arange(T)[None, :] < np.asarray(lengths)[:, None])
            if B % batch:
                from ...errors import UsageError

                raise UsageError(f"the .tflite has a fixed batch of {batch}: pass --batch {batch} (or a multiple)")
            chunks = [rt.run([a[i:i + batch] for a in feed]) for i in range(0, B, batch)]
            outs = [np.concatenate([c[j] for c in chunks]) for j in range(len(chunks[0]))]
            y = outs[0].transpose(1, 0, 2)
            finals = outs[1:]
            hy = np.stack(finals[0::per])
            cy = np.stack(finals[1::per]) if per > 1 else None
            return y, hy, cy
        return StackRunner(name if label == "LiteRT" else f"{name} ({label})", shape, run,
                           state_inputs=state_inputs, mask_input=mask_input,
                           engine=lambda math, label=label: f"{label} (CPU)", steps=timesteps_of(meta))

    return {r.name: r for r in (make(rt, label) for label, rt in engines)}


def timesteps_of(meta: dict) -> Optional[int]:
    steps = meta.get("timesteps")
    return int(steps) if steps else None
