"""Outputs load and compute the same on a backend other than the one that wrote them (issue 10).

gruconv converts with TensorFlow here; a fresh process with ``KERAS_BACKEND=jax`` (JAX on the CPU, light
enough for CI) loads each output with plain ``keras.saving.load_model`` and predicts on the same inputs.
float16 models are included: their files must not need a float16 QR to be built (JAX has none).
The full matrix over Keras versions and the torch backend is ``make compat`` (``docs/compatibility.md``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import FIXTURES

# Tier and scheduling (docs/testing.md): one module fixture runs a JAX child over every fixture (minutes on
# 2 loaded cores), so the module is `slow`; xdist_group keeps its tests on one worker (one child, not one per worker).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_backends")]

CASES = [
    ("keras/sequential.h5", 1e-5),
    ("keras/bidir_concat.h5", 1e-5),
    ("keras/float16.h5", 4e-3),
    ("keras/options.h5", 1e-5),             # compiled: optimizer + loss must load on JAX too
    ("keras_user/seq2seq.h5", 1e-5),
    ("keras_user/compiled_sparse_cce.h5", 1e-5),
    ("keras_lstm/mixed.h5", 1e-5),
    ("tf1/layer_bidir", 1e-5),
    ("tf1/float16", 4e-3),
    ("tf1_lstm/layer_bidir", 1e-5),
]

_PREDICT = r'''
import json, os, sys
import numpy as np
import keras
out = {}
for path, inputs in json.loads(sys.argv[1]):
    try:
        model = keras.saving.load_model(path)
        xs = [np.load(p) for p in inputs]
        ys = model.predict(xs if len(xs) > 1 else xs[0], verbose=0)
        ys = ys if isinstance(ys, (list, tuple)) else [ys]
        for i, y in enumerate(ys):
            np.save(path + f".{keras.backend.backend()}.{i}.npy", np.asarray(y, dtype=np.float64))
        out[path] = len(ys)
    except Exception as e:
        out[path] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
print(json.dumps(out))
'''


def _inputs(model_path: str, tmp) -> list:
    from gruconv.keras3 import runtime as keras3

    model = keras3.keras().saving.load_model(model_path)
    rng = np.random.default_rng(0)
    files = []
    for i, t in enumerate(model.inputs):
        shape = [3 if d is None and j == 0 else (5 if d is None else d) for j, d in enumerate(t.shape)]
        if "int" in str(t.dtype):
            x = rng.integers(0, 5, size=shape).astype(str(t.dtype))
        elif "bool" in str(t.dtype):
            x = np.ones(shape, dtype=bool)
        else:
            x = rng.uniform(-1, 1, size=shape).astype(str(t.dtype))
        p = tmp / f"{os.path.basename(model_path)}.x{i}.npy"
        np.save(p, x)
        files.append(str(p))
    return files


@pytest.fixture(scope="module")
def predictions(tmp_path_factory):
    from gruconv import api

    tmp = tmp_path_factory.mktemp("backends")
    jobs = []
    for name, _ in CASES:
        out = tmp / (name.replace("/", "_").replace(".h5", "") + ".keras")
        api.convert(FIXTURES / name, out)
        jobs.append((str(out), _inputs(str(out), tmp)))
    results = {}
    for backend in ("tensorflow", "jax"):
        env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3",
                   JAX_PLATFORMS="cpu")
        res = subprocess.run([sys.executable, "-c", _PREDICT, json.dumps(jobs)], env=env, capture_output=True,
                             text=True, timeout=900)
        assert res.returncode == 0, res.stderr[-3000:]
        results[backend] = json.loads(res.stdout.strip().splitlines()[-1])
    return jobs, results


@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[0] for c in CASES])
def test_output_loads_and_matches_on_jax(case, predictions):
    jobs, results = predictions
    path, _ = jobs[case]
    tol = CASES[case][1]
    for backend in ("tensorflow", "jax"):
        assert isinstance(results[backend][path], int), f"{backend}: {results[backend][path]}"
    n = results["tensorflow"][path]
    assert results["jax"][path] == n
    for i in range(n):
        a = np.load(f"{path}.tensorflow.{i}.npy")
        b = np.load(f"{path}.jax.{i}.npy")
        assert a.shape == b.shape
        assert np.isfinite(b).all()
        assert float(np.max(np.abs(a - b))) <= tol, (path, i, float(np.max(np.abs(a - b))))
