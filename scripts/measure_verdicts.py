#!/usr/bin/env python3
"""Measure, on the trained fixtures, correct-conversion differences and planted errors against the floor.

The numbers behind :class:`gruconv.options.Bounds`' ``rtol``/``k`` and :data:`gruconv.verify.floor.DEFAULT_SEEDS`
(``docs/verdicts.md``).  For each fixture of ``fixtures/trained`` and each ``--steps``:

* Keras HDF5 (``X.h5``): converted with :func:`gruconv.api.convert` to a ``.keras`` file, loaded,
  and each converted RNN layer fed exactly what verify feeds it (random token ids through the
  converted model, ``verify._random_inputs`` / ``_activations_into``); also (``layer alone``)
  the same layer fed uniform(-1, 1) inputs directly, as per-layer verification of a
  weights-only file would;
* TF1 checkpoint (``X.tf1``): the model ``verify.subjects.stack_models`` builds, fed verify's random ``x``, ``h0``,
  ``c0`` (the same generator calls as ``verify._verify_stack``).

Reference: the float64 oracle (what ``verify --reference oracle`` compares with).  Per check:
max |diff|, max |ref|, the floor (:func:`gruconv.verify.floor.floors`), the ratios.  Then the
planted errors, each applied to the converted layer's weights (first direction of a
Bidirectional), measured the same way.  Runs on the CPU (TensorFlow backend).

Usage: ``PYTHONPATH=src .venv/bin/python scripts/measure_verdicts.py [--steps 25 100 400] [--json OUT]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np


def cpu_environment() -> None:
    """The measurement's environment (TensorFlow backend, CPU only, quiet), set when run as a script,
    before Keras is imported.  Never at import: ``tests/verify/test_sensitivity.py`` imports this module,
    and a ``CUDA_VISIBLE_DEVICES=""`` set during collection hid the GPU from every test of a
    ``pytest -m gpu`` run (issue 31)."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


class _VerifyInternals:
    """The verify internals this harness reruns, from the ``gruconv.verify`` package's modules."""

    def __getattr__(self, name):
        from gruconv.verify import engines, graph

        return getattr(engines if name == "Engine" else graph, name)


V = _VerifyInternals()  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TRAINED = REPO / "fixtures" / "trained"
FIXTURES = ("gru2", "lstm2", "bilstm")


# --------------------------------------------------------------------------- planted errors

def _blocks(a, H, axis=-1):
    return [np.take(a, range(j * H, (j + 1) * H), axis=axis) for j in range(a.shape[axis] // H)]


def plant(name: str, cell: str, w: list) -> list:
    """One planted conversion error on a Keras 3 GRU/LSTM's [kernel, recurrent_kernel, bias]."""
    k, r, b = (np.array(a, dtype=np.float32) for a in w)
    H = r.shape[0]
    gate = slice(2 * H, 3 * H)  # GRU candidate h / LSTM cell c'
    if name == "gate order swapped":  # GRU z<->r; LSTM f<->c (TF's i, c, f, o read as i, f, c, o)
        i, j = (0, 1) if cell == "gru" else (1, 2)
        def sw(a):
            bl = _blocks(a, H)
            bl[i], bl[j] = bl[j], bl[i]
            return np.concatenate(bl, axis=-1)
        k, r, b = sw(k), sw(r), sw(b)
    elif name == "matrix transposed":  # the candidate/cell gate's recurrent block transposed
        r[:, gate] = r[:, gate].T.copy()
    elif name == "biases exchanged":  # GRU only: input and recurrent bias rows exchanged
        b = b[::-1].copy()
    elif name == "bias 1e-4 relative":  # one bias vector scaled by 1 + 1e-4
        if cell == "gru":
            b[1, gate] *= np.float32(1 + 1e-4)  # recurrent candidate bias (inside r * (...))
        else:
            b[gate] *= np.float32(1 + 1e-4)
    elif name == "forget bias dropped":
        b[H:2 * H] = 0.0
    elif name == "float16 layer":
        k, r, b = (a.astype(np.float16).astype(np.float32) for a in (k, r, b))
    else:
        raise ValueError(name)
    return [k, r, b]


PLANTS = {"gru": ("gate order swapped", "matrix transposed", "biases exchanged", "bias 1e-4 relative",
                  "float16 layer"),
          "lstm": ("gate order swapped", "matrix transposed", "bias 1e-4 relative", "forget bias dropped",
                   "float16 layer")}


# --------------------------------------------------------------------------- helpers

def _row(fixture, path, steps, check, got, ref, floor, elapsed_floor=None):
    d = np.abs(np.asarray(got, np.float64) - np.asarray(ref, np.float64))
    mx = float(d.max())
    mag = float(np.abs(ref).max())
    return {"fixture": fixture, "path": path, "steps": steps, "check": check, "max_abs": mx, "magnitude": mag,
            "floor": floor, "ratio_floor": mx / floor if floor else float("inf"), "ratio_mag": mx / mag if mag else None,
            "floor_seconds": elapsed_floor}


def _planted(name, rows):
    """A planted error's rows: all of them (``rows``), and, at top level, the one furthest over its
    loosest bound at the default rule (``over`` = max_abs / max(tolerance 1e-5, rtol*|ref|, k*floor))."""
    from gruconv.options import Bounds

    b = Bounds()
    for z in rows:
        z["over"] = z["max_abs"] / max(b.tolerance, b.rtol * z["magnitude"], b.k * z["floor"])
    worst = max(rows, key=lambda z: z["over"])
    return dict(worst, plant=name, rows=rows)


def _listify(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def keras_rows(fixture, steps, seeds, batch=2, alone=False):
    from gruconv import api
    from gruconv.verify import floor as sensitivity
    from gruconv.keras3 import runtime as keras3
    from gruconv.readers import keras_h5

    keras = keras3.keras()
    src = TRAINED / f"{fixture}.h5"
    doc = keras_h5.read(src)
    rows, plants = [], []
    with tempfile.TemporaryDirectory() as td:
        out = Path(td) / "m.keras"
        api.convert(src, out)
        model = keras3.load(out)
        rng = np.random.default_rng(0)
        feed = V._random_inputs(keras, model, batch, steps, rng)
        eng = V.Engine("oracle", False)
        for rnn in doc.rnns:
            parts = rnn.path.split("/")
            if rnn.wrapper is not None:
                parts = parts[:-1]
            # the layer's call in one recorded run of the model (verify's own route: runtime.record_calls)
            found = keras3.find_layer(model, parts)
            calls, _ = keras3.record_calls(model, [found], feed)
            layer, args, kwargs = calls[id(found)].layer, calls[id(found)].args, calls[id(found)].kwargs
            x = np.asarray(args[0])
            if alone:
                x = np.random.default_rng(1).uniform(-1, 1, x.shape).astype(np.float32)
            x64 = x.astype(np.float64)
            _, ref64 = V._reference_rnn(rnn, x64, eng)
            t0 = time.perf_counter()
            fl = sensitivity.floors(lambda e: V._reference_rnn(rnn, x64, e)[0], ref64, seeds=seeds)
            tf = time.perf_counter() - t0
            names = V._output_names(rnn)
            got = [keras3.to_numpy(g) for g in _listify(layer(x))]
            where = "layer alone" if alone else "in model"
            for n, g, r, f in zip(names, got, ref64, fl):
                rows.append(_row(fixture, f"h5 {where}", steps, f"{rnn.path}: {n}", g, r, f, tf))
            inner = layer.forward_layer if hasattr(layer, "forward_layer") else layer
            w0 = [keras3.to_numpy(v) for v in inner.weights]
            for p in PLANTS[rnn.stack.shape.cell]:
                inner.set_weights(plant(p, rnn.stack.shape.cell, w0))
                got = [keras3.to_numpy(g) for g in _listify(layer(x))]
                inner.set_weights(w0)
                plants.append(_planted(p, [_row(fixture, f"h5 {where}", steps, f"{rnn.path}: {n}", g, r, f)
                                           for n, g, r, f in zip(names, got, ref64, fl)]))
    return rows, plants


def weights_only_layer(keras, rnn):
    """The converted RNN of a weights-only file (no architecture), built ALONE: Keras 3 GRU/LSTM with
    ``return_sequences`` and ``return_state`` (Bidirectional with ``merge_mode=None``, so both directions
    are compared apart), weights from :func:`gruconv.model.keras_layout.to_keras` (what ``convert`` writes).
    Returns ``(layer, reference view of rnn)``: the view has the options the layer was built with."""
    from types import SimpleNamespace

    from gruconv.model.keras_layout import to_keras

    s = rnn.stack.shape
    if s.cell == "gru":
        make = lambda: keras.layers.GRU(s.units, return_sequences=True, return_state=True, reset_after=True,  # noqa: E731
                                        recurrent_activation="sigmoid")
    else:
        make = lambda: keras.layers.LSTM(s.units, return_sequences=True, return_state=True,  # noqa: E731
                                         recurrent_activation="sigmoid")
    bidir = rnn.wrapper == "Bidirectional"
    layer = keras.layers.Bidirectional(make(), merge_mode=None) if bidir else make()
    layer.build((None, None, s.input_size))
    subs = [layer.forward_layer, layer.backward_layer] if bidir else [layer]
    for sub, p in zip(subs, rnn.stack.params):
        sub.set_weights(to_keras(p, s.cell, s.input_size))
    view = SimpleNamespace(stack=rnn.stack, shape=rnn.stack.shape, path=rnn.path, wrapper="Bidirectional" if bidir else None,
                           merge_mode=None, options={"return_sequences": True, "return_state": True,
                                                     "go_backwards": False})
    return layer, view


def weights_only_rows(fixture, steps, seeds, batch=2):
    """Per-layer verification of ``X_weights.h5`` without ``--config`` (the wiring plan's prototype)."""
    from gruconv.verify import floor as sensitivity
    from gruconv.keras3 import runtime as keras3
    from gruconv.readers import keras_h5

    keras = keras3.keras()
    doc = keras_h5.read(TRAINED / f"{fixture}_weights.h5")
    assert doc.model_config is None and doc.rnns, "weights-only file with recognisable CuDNN layers expected"
    eng = V.Engine("oracle", False)
    rows, plants = [], []
    rng = np.random.default_rng(0)
    for rnn in doc.rnns:
        layer, view = weights_only_layer(keras, rnn)
        x = rng.uniform(-1, 1, (batch, steps, rnn.stack.shape.input_size)).astype(np.float32)
        x64 = x.astype(np.float64)
        _, ref64 = V._reference_rnn(view, x64, eng)
        t0 = time.perf_counter()
        fl = sensitivity.floors(lambda e: V._reference_rnn(view, x64, e)[0], ref64, seeds=seeds)
        tf = time.perf_counter() - t0
        names = V._output_names(view)
        got = [keras3.to_numpy(g) for g in _listify(layer(x))]
        assert len(got) == len(ref64) == len(names)
        for n, g, r, f in zip(names, got, ref64, fl):
            rows.append(_row(fixture, "weights-only", steps, f"{rnn.path}: {n}", g, r, f, tf))
        inner = layer.forward_layer if hasattr(layer, "forward_layer") else layer
        w0 = [keras3.to_numpy(v) for v in inner.weights]
        for p in PLANTS[rnn.stack.shape.cell]:
            inner.set_weights(plant(p, rnn.stack.shape.cell, w0))
            got = [keras3.to_numpy(g) for g in _listify(layer(x))]
            inner.set_weights(w0)
            plants.append(_planted(p, [_row(fixture, "weights-only", steps, f"{rnn.path}: {n}", g, r, f)
                                       for n, g, r, f in zip(names, got, ref64, fl)]))
    return rows, plants


def tf1_rows(fixture, steps, seeds, batch=2):
    from gruconv.verify import floor as sensitivity
    from gruconv.keras3 import runtime as keras3
    from gruconv.readers.tf1 import reading
    from gruconv.verify.subjects import stack_models
    from gruconv.verify.reference.oracle import run_stack

    doc = reading.read(TRAINED / f"{fixture}.tf1")
    (entry, model), = stack_models(doc)
    s = entry.stack.shape
    rng = np.random.default_rng(0)  # verify._verify_stack's calls, in order
    x = rng.uniform(-1, 1, (batch, steps, s.input_size)).astype(s.dtype)
    h0 = rng.uniform(-0.5, 0.5, (s.num_pseudo_layers, batch, s.units)).astype(s.dtype)
    lstm = s.cell == "lstm"
    c0 = rng.uniform(-0.5, 0.5, (s.num_pseudo_layers, batch, s.units)).astype(s.dtype) if lstm else None
    args = [x]
    for i in range(s.num_pseudo_layers):
        args += [h0[i], c0[i]] if lstm else [h0[i]]
    xt = np.ascontiguousarray(x.transpose(1, 0, 2))
    y64, hy64, cy64 = run_stack(entry.stack, xt, h0, None, c0)
    refs = [y64.transpose(1, 0, 2)]
    names = ["output sequence"]
    for i in range(s.num_pseudo_layers):
        layer, d = divmod(i, s.num_directions)
        nm = f"final state l{layer} {'bw' if d else 'fw'}"
        refs += [hy64[i]] + ([cy64[i]] if lstm else [])
        names += [f"{nm} h", f"{nm} c"] if lstm else [nm]
    t0 = time.perf_counter()
    fd = sensitivity.stack_floors(entry.stack, xt, h0, None, c0, seeds=seeds)
    tf = time.perf_counter() - t0
    fl = [fd["y"]]
    for i in range(s.num_pseudo_layers):
        fl += [fd["hy"][i]] + ([fd["cy"][i]] if lstm else [])
    got = [keras3.to_numpy(o) for o in _listify(model(args))]
    rows = [_row(fixture, "tf1", steps, f"{entry.scope}: {n}", g, r, f, tf) for n, g, r, f in zip(names, got, refs, fl)]
    plants = []
    rnn_layers = [l for l in model.layers if hasattr(l, "forward_layer") or l.__class__.__name__ in ("GRU", "LSTM")]
    inner = rnn_layers[0].forward_layer if hasattr(rnn_layers[0], "forward_layer") else rnn_layers[0]
    w0 = [keras3.to_numpy(v) for v in inner.weights]
    for p in PLANTS[s.cell]:
        inner.set_weights(plant(p, s.cell, w0))
        got = [keras3.to_numpy(o) for o in _listify(model(args))]
        inner.set_weights(w0)
        plants.append(_planted(p, [_row(fixture, "tf1", steps, f"{entry.scope}: {n}", g, r, f)
                                   for n, g, r, f in zip(names, got, refs, fl)]))
    return rows, plants


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, nargs="*", default=[25, 100, 400])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--fixtures", nargs="*", default=list(FIXTURES))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    rows, plants = [], []
    for fx in args.fixtures:
        for steps in args.steps:
            for fn in (lambda: keras_rows(fx, steps, args.seeds), lambda: keras_rows(fx, steps, args.seeds, alone=True),
                       lambda: weights_only_rows(fx, steps, args.seeds), lambda: tf1_rows(fx, steps, args.seeds)):
                r, p = fn()
                rows += r
                plants += p
                for z in r:
                    print(f"{z['fixture']:7} {z['path']:15} T={z['steps']:<4} {z['check'][-34:]:34} "
                          f"diff {z['max_abs']:.2e} |ref| {z['magnitude']:.2e} floor {z['floor']:.2e} "
                          f"ratio {z['ratio_floor']:.2f} rel {z['ratio_mag']:.1e} ({z['floor_seconds']:.2f}s)",
                          flush=True)
                for z in p:
                    print(f"{z['fixture']:7} {z['path']:15} T={z['steps']:<4} PLANT {z['plant']:20} "
                          f"diff {z['max_abs']:.2e} floor {z['floor']:.2e} ratio {z['ratio_floor']:.3g} "
                          f"rel {z['ratio_mag']:.2e} over {z['over']:.3g} ({z['check'][-28:]})", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "plants": plants}, indent=1))
    return 0


if __name__ == "__main__":
    cpu_environment()
    sys.exit(main())
