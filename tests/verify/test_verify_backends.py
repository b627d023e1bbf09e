"""``gruconv verify`` on every Keras backend (issue 31, part 5): TensorFlow, JAX and torch, each in a fresh
process with ``KERAS_BACKEND``, over the fixtures that exercise how verify builds its Keras models: a
float16 weights-only file of cuDNN layers (``fixtures/float16_weights``, DeepZip's ``*_16bit.hdf5``
kind: checked layer by layer, each layer built by verify itself), float16 and mixed-precision whole
models, float32 weights-only files, a TF1 float16 stack, and two planted errors that must fail (exit 1)
on every backend.

Before the fix, the float16 weights-only file crashed on JAX (``Unsupported dtype float16``) and torch
(``"geqrf_cpu" not implemented for 'Half'``): Keras's Orthogonal initializer ran a float16 QR while
verify built the layer (:func:`gruconv.verify.graph._alone_shell`).

One child per backend runs every case through the CLI (``CliRunner``), so an uncaught exception shows
as ``exception`` instead of passing for exit 1.  Minutes on 2 loaded cores: ``slow``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import FIXTURES, planted_error_copy

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("test_verify_backends")]

BACKENDS = ("tensorflow", "jax", "torch")
F16 = FIXTURES / "float16_weights" / "deepzip_16bit.h5"

_CHILD = r'''
import json, sys
from click.testing import CliRunner
from gruconv.cli import main
import keras
out = {"backend": keras.backend.backend()}
for name, argv in json.loads(sys.argv[1]):
    res = CliRunner().invoke(main, ["verify", *argv, "--reference", "oracle"])
    lines = [l for l in res.output.splitlines() if l.strip()]
    exc = res.exception
    out[name] = {"exit": res.exit_code,
                 "exception": None if exc is None or isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}",
                 "parity": next((l for l in lines if l.startswith("parity: ")), ""),
                 "fail_rows": [l for l in lines if l.rstrip().endswith("FAIL")]}
print(json.dumps(out))
'''


def _plant_in_weights_file(good, bad) -> None:
    """A copy of the converted weights file with the LSTM's input and forget gates exchanged in its
    kernel and recurrent kernel (a gate-order bug; Keras's gate order is i, f, c, o)."""
    import shutil

    import h5py

    shutil.copyfile(good, bad)
    with h5py.File(bad, "r+") as f:
        for name in ("kernel:0", "recurrent_kernel:0"):
            ds = f[f"cu_dnnlstm/cu_dnnlstm/{name}"]
            a = ds[...]
            H = a.shape[1] // 4
            ds[...] = np.concatenate([a[:, H:2 * H], a[:, :H], a[:, 2 * H:]], axis=1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from gruconv import api

    tmp = tmp_path_factory.mktemp("verify_backends")
    f16_conv = tmp / "deepzip_converted.h5"
    api.convert(F16, f16_conv)
    f16_bad = tmp / "deepzip_planted.h5"
    _plant_in_weights_file(f16_conv, f16_bad)
    seq_bad = planted_error_copy(FIXTURES / "keras" / "sequential.h5", tmp)
    cases = [
        ("f16 weights-only", [str(F16)], 0),
        ("f16 weights-only, converted", [str(F16), str(f16_conv)], 0),
        ("f16 weights-only, planted", [str(F16), str(f16_bad)], 1),
        ("weights-only", [str(FIXTURES / "keras" / "weights_only.h5")], 0),
        ("lstm weights-only", [str(FIXTURES / "keras_lstm" / "weights_only.h5")], 0),
        ("f16 model", [str(FIXTURES / "keras" / "float16.h5")], 0),
        ("f16 lstm model", [str(FIXTURES / "keras_lstm" / "float16.h5")], 0),
        ("mixed_float16 model", [str(FIXTURES / "keras_user" / "mixed_float16.h5")], 0),
        ("tf1 float16", [str(FIXTURES / "tf1" / "float16")], 0),
        ("sequential, planted", [str(FIXTURES / "keras" / "sequential.h5"), str(seq_bad)], 1),
    ]
    out = {}
    for backend in BACKENDS:
        env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3",
                   JAX_PLATFORMS="cpu")
        res = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([(n, a) for n, a, _ in cases])], env=env,
                             capture_output=True, text=True, timeout=1500)
        assert res.returncode == 0, res.stderr[-3000:]
        out[backend] = json.loads(res.stdout.strip().splitlines()[-1])
        assert out[backend]["backend"] == backend
    return cases, out


@pytest.mark.parametrize("backend", BACKENDS)
def test_verify_runs_on_every_backend(backend, runs):
    cases, out = runs
    wrong = [(name, out[backend][name]) for name, _, want in cases
             if out[backend][name]["exception"] is not None or out[backend][name]["exit"] != want
             or not out[backend][name]["parity"].startswith("parity: PASS" if want == 0 else "parity: FAIL")]
    assert not wrong, (backend, wrong)


@pytest.mark.parametrize("backend", BACKENDS)
def test_planted_errors_name_their_layer_on_every_backend(backend, runs):
    _, out = runs
    planted = out[backend]["f16 weights-only, planted"]["fail_rows"]
    assert planted and all("cu_dnnlstm" in l for l in planted)  # the bidirectional GRU still passes
    assert any(l.strip().startswith("cu_dnngru:") for l in out[backend]["sequential, planted"]["fail_rows"])
