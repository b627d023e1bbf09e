"""Run Keras models on the GPU and record which kernel each recurrent layer took (issue 22).

Run as a script in a fresh process (the Keras backend is chosen by ``KERAS_BACKEND`` before import):
``KERAS_BACKEND=torch python tests/eligibility_probe.py CASES.json OUT.json``.  Prints nothing useful;
writes ``{case_id: {"config": model.to_json() dict, "observed": {layer_key: kernel}, "error": str|None}}``.

How the kernel is observed (Keras 3.15.1 source):
* ``GRU``/``LSTM`` layers call ``keras.src.backend.gru``/``lstm`` from ``inner_loop``
  (``keras/src/layers/rnn/gru.py``); each recurrent layer instance's ``inner_loop`` is wrapped to know
  which layer is running, so a layer whose ``inner_loop`` never reaches the backend op is ``fallback``.
* The backend op raising ``NotImplementedError`` -> ``fallback`` (Keras's step loop).
* The op returning, having called cuDNN inside -> ``cudnn``: torch ``_cudnn_gru``/``_cudnn_lstm`` and
  ``torch._VF.gru``/``lstm`` (the fused Bidirectional ops call it directly), TensorFlow
  ``_cudnn_gru``/``_cudnn_lstm``, JAX ``jax.experimental.rnn.lstm`` (cuDNN's LSTM).
* The op returning without cuDNN -> ``fused`` (torch ``_fallback_gru``, JAX's ``lax.scan`` GRU).
* A ``Bidirectional`` that runs ``backend.bidirectional_gru/lstm`` successfully gives both directions
  that kernel; if it declines, each direction's own call decides.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback


def install_probe(keras):
    """Patch the backend ops and cuDNN entry points; return (events, cudnn_hits, current)."""
    be = keras.backend.backend()
    top = importlib.import_module("keras.src.backend")
    impl = importlib.import_module(f"keras.src.backend.{be}.rnn")
    events: list = []
    hits: list = []
    current: list = []

    def marker(module, name):
        orig = getattr(module, name, None)
        if orig is None:
            return

        def wrapper(*a, **kw):
            hits.append(name)
            return orig(*a, **kw)

        setattr(module, name, wrapper)

    for n in ("_cudnn_gru", "_cudnn_lstm"):
        marker(impl, n)
    if be == "torch":
        import torch

        for n in ("gru", "lstm"):
            orig = getattr(torch._VF, n)

            def vf(*a, _orig=orig, _n=n, **kw):
                hits.append(f"_VF.{_n}")
                return _orig(*a, **kw)

            setattr(torch._VF, n, vf)
    if be == "jax":
        try:
            import jax.experimental.rnn as jrnn

            marker(jrnn, "lstm")
        except ImportError:
            pass

    for op in ("gru", "lstm", "bidirectional_gru", "bidirectional_lstm"):
        orig = getattr(top, op, None)
        if orig is None:
            continue

        def wrapped(*a, _orig=orig, _op=op, **kw):
            mark = len(hits)
            who = current[-1] if current else None
            try:
                out = _orig(*a, **kw)
            except NotImplementedError:
                events.append((who, _op, "fallback"))
                raise
            events.append((who, _op, "cudnn" if len(hits) > mark else "fused"))
            return out

        setattr(top, op, wrapped)
    return events, hits, current


def watch_layers(keras, model, current) -> dict:
    """Wrap each recurrent layer's inner_loop (and each Bidirectional's call) to attribute backend calls;
    returns {layer_key: instance}; keys match gruconv.eligibility paths' last component."""
    keys: dict = {}
    layers = list(model._flatten_layers(include_self=False, recursive=True))
    for layer in layers:
        if isinstance(layer, keras.layers.Bidirectional):
            keys[id(layer.forward_layer)] = f"{layer.name}[forward]"
            keys[id(layer.backward_layer)] = f"{layer.name}[backward]"
            orig = layer.call

            def call(*a, _orig=orig, _name=layer.name, **kw):
                current.append(("bi", _name))
                try:
                    return _orig(*a, **kw)
                finally:
                    current.pop()

            layer.call = call
    watched = {}
    for layer in layers + [lay for b in layers if isinstance(b, keras.layers.Bidirectional)
                           for lay in (b.forward_layer, b.backward_layer)]:
        if isinstance(layer, keras.layers.RNN) and id(layer) not in {id(v) for v in watched.values()}:
            key = keys.get(id(layer), layer.name)
            watched[key] = layer
            orig = layer.inner_loop

            def inner_loop(*a, _orig=orig, _key=key, **kw):
                current.append(("layer", _key))
                events_called.add(_key)
                try:
                    return _orig(*a, **kw)
                finally:
                    current.pop()

            layer.inner_loop = inner_loop
    return watched


events_called: set = set()


def observed(events, watched) -> dict:
    out: dict = {}
    for key in watched:
        mine = [how for who, op, how in events if who == ("layer", key)]
        if key.endswith("]"):
            bi = key.rsplit("[", 1)[0]
            fused = [how for who, op, how in events if who == ("bi", bi) and op.startswith("bidirectional")
                     and how != "fallback"]
            mine = fused + mine
        if mine:
            out[key] = sorted(set(mine))
        elif key in events_called:
            out[key] = ["fallback"]  # inner_loop ran but never called the backend op
        else:
            out[key] = ["not run"]
    return out


def inputs_for(keras, np, model, mask: bool):
    rng = np.random.default_rng(0)
    xs = []
    for t in model.inputs:
        shape = [4 if d is None else d for d in t.shape]
        if shape[1] is None or (len(shape) > 1 and t.shape[1] is None):
            shape[1] = 6
        if "int" in str(t.dtype):
            x = rng.integers(1, 20, size=shape).astype("int32")
            x[:2, -2:] = 0  # right padding
        else:
            x = rng.normal(size=shape).astype("float32")
            if mask:
                x[:2, -2:] = 0.0  # right padding, no fully masked row
        xs.append(x)
    return xs[0] if len(xs) == 1 else xs


def build(keras, case):
    L = keras.layers
    kw = dict(case.get("kwargs", {}))
    cls = getattr(L, case["layer"])
    if case.get("wrap") == "RNNCell":
        rec = L.RNN(getattr(L, case["layer"] + "Cell")(4, **kw), return_sequences=True, name="rec")
    else:
        rec = cls(4, return_sequences=True, name="rec", **kw)
    if case.get("wrap") == "Bidirectional":
        rec = L.Bidirectional(rec, name="bi")
    if case.get("wrap") == "TimeDistributed":
        rec = L.TimeDistributed(cls(4, name="rec", **kw), name="td")
        inp = keras.Input((2, 6, 3))
    else:
        inp = keras.Input((6, 3))
    x = inp
    if case.get("mask"):
        x = L.Masking(0.0, name="pad")(x)
    return keras.Model(inp, rec(x), name=case["id"])


def _set_field(obj, field, value):
    """Set ``field`` in the config of every GRU/LSTM layer inside ``obj``."""
    if isinstance(obj, dict):
        if obj.get("class_name") in ("GRU", "LSTM") and isinstance(obj.get("config"), dict):
            obj["config"][field] = value
        for v in obj.values():
            _set_field(v, field, value)
    elif isinstance(obj, list):
        for v in obj:
            _set_field(v, field, value)


_FIXTURE_MODELS: dict = {}


def fixture_models() -> dict:
    if not _FIXTURE_MODELS:
        import importlib.util as iu
        from pathlib import Path

        gen = Path(__file__).resolve().parent.parent / "fixtures" / "make_keras3_fixtures.py"
        spec = iu.spec_from_file_location("make_keras3_fixtures", gen)
        mod = iu.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _FIXTURE_MODELS.update(mod.keras3_models())
    return _FIXTURE_MODELS


def main(cases_path, out_path):
    import numpy as np

    import keras

    events, hits, current = install_probe(keras)
    cases = json.loads(open(cases_path).read())
    result = {}
    import os

    # ELIG_PROBE_DEVICE=cpu runs the same bookkeeping on a CPU (a dry run of this script, not a check)
    dev = os.environ.get("ELIG_PROBE_DEVICE") or ("cuda" if keras.backend.backend() == "torch" else "gpu:0")
    for case in cases:
        events.clear()
        events_called.clear()
        rec = {"config": None, "observed": {}, "error": None}
        try:
            with keras.device(dev):
                if "path" in case:
                    model = keras.saving.load_model(case["path"], compile=False)
                elif "builder" in case:  # the fixture models, built here by the same code on this backend
                    model = fixture_models()[case["builder"]]
                else:
                    model = build(keras, case)
                if "path" not in case:
                    # what a user who saves and loads this model gets: the config round trip (it drops
                    # use_cudnn, which GRU/LSTM.get_config do not write in Keras 3.15.1)
                    cfg = json.loads(model.to_json())
                    if "use_cudnn" in case.get("kwargs", {}):  # put it back: from_config passes it on
                        _set_field(cfg, "use_cudnn", case["kwargs"]["use_cudnn"])
                    model = keras.models.model_from_json(json.dumps(cfg))
                else:
                    cfg = json.loads(model.to_json())
                rec["config"] = cfg
                watched = watch_layers(keras, model, current)
                has_mask = any(isinstance(lay, (keras.layers.Masking, keras.layers.Embedding))
                               for lay in model._flatten_layers(include_self=False, recursive=True))
                model(inputs_for(keras, np, model, has_mask), training=False)
            rec["observed"] = observed(events, watched)
            rec["events"] = [[str(w), op, how] for w, op, how in events]
        except Exception as e:  # noqa: BLE001 - reported to the test, which fails on it
            rec["error"] = "".join(traceback.format_exception_only(type(e), e)).strip()[-2000:]
        result[case["id"]] = rec
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1, default=str)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
