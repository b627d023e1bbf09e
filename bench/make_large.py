#!/usr/bin/env python
"""Write the two large benchmark inputs (used by ``bench/run.py``; nothing here is committed).

* ``big.h5`` -- a tf_keras model ``Input((None, 512))`` -> 3 x
  ``Bidirectional(CuDNNGRU(1024, return_sequences=True))`` saved by tf_keras's own
  legacy HDF5 writer (``model.save("big.h5")``), the same route as
  ``fixtures/make_keras_fixtures.py``.  Built on the CPU (a CuDNNGRU builds and
  saves without a GPU; it only cannot run).  Every weight is overwritten from a
  seeded NumPy stream with ``set_weights``.
* ``big_ckpt/`` -- a TF 1.x ``CudnnGRU`` layer checkpoint for the same stack shape
  (3 layers, bidirectional, input 512, units 1024): the opaque cuDNN buffer
  ``model/encoder/cudnn_gru/opaque_kernel`` plus its canonical
  ``CudnnCompatibleGRUCell`` tensors under TF 1.5+ names, written by
  ``tf.raw_ops.SaveV2``.  Names, packing and the canonical transform are
  imported from ``fixtures/make_tf1_fixtures.py`` (``pack_cudnn919``,
  ``canonical_tf15``, ``_save``), so the file is exactly what the fixtures are,
  only bigger.

Usage::

    .venv/bin/python bench/make_large.py h5   OUT.h5
    .venv/bin/python bench/make_large.py ckpt OUT_DIR

Each kind runs in its own process (tf_keras and the TF1 writer both import
TensorFlow; ``bench/run.py`` starts them one after the other).
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

INPUT = 512
UNITS = 1024
LAYERS = 3
SEED = 20240


def param_count(input_size: int = INPUT, units: int = UNITS, layers: int = LAYERS, dirs: int = 2) -> int:
    total = 0
    for layer in range(layers):
        n_in = input_size if layer == 0 else units * dirs
        total += dirs * (3 * units * n_in + 3 * units * units + 6 * units)
    return total


def _uniform(rng, shape, scale):
    return (rng.random(shape, dtype=np.float32) * np.float32(2 * scale) - np.float32(scale)).astype(np.float32)


def make_h5(out: Path) -> None:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf_keras as K

    tf.get_logger().setLevel("ERROR")
    warnings.filterwarnings("ignore")
    CuDNNGRU = tf.compat.v1.keras.layers.CuDNNGRU
    K.backend.clear_session()
    x_in = K.Input((None, INPUT), name="features")
    x = x_in
    for i in range(LAYERS):
        x = K.layers.Bidirectional(CuDNNGRU(UNITS, return_sequences=True), name=f"bigru_{i}")(x)
    model = K.Model(x_in, x, name="big_cudnngru")
    rng = np.random.default_rng(SEED)
    values = []
    for w in model.weights:
        shape = tuple(w.shape)
        values.append(_uniform(rng, shape, 0.05 if len(shape) == 2 else 0.3))
    model.set_weights(values)
    n = sum(int(np.prod(v.shape)) for v in values)
    assert n == param_count(), (n, param_count())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp.h5")
    model.save(str(tmp))  # tf_keras legacy HDF5 writer (.h5 suffix)
    os.replace(tmp, out)


def make_ckpt(out: Path) -> None:
    sys.path.insert(0, str(REPO / "fixtures"))
    import make_tf1_fixtures as mk

    # A Golden-shaped object with seeded random weights (the fixture generator's class
    # reads a golden .npz; here every field is set directly).
    g = object.__new__(mk.Golden)
    g.name = "bench-large"
    g.I, g.H, g.L = INPUT, UNITS, LAYERS
    g.bidir, g.skip = True, False
    g.D = 2
    g.P = g.L * g.D
    rng = np.random.default_rng(SEED + 1)
    g.W, g.b = {}, {}
    for p in range(g.P):
        n_in = g.layer_input_size(p // g.D)
        for k in range(6):
            g.W[p, k] = _uniform(rng, (g.H, n_in if k < 3 else g.H), 0.05)
            g.b[p, k] = _uniform(rng, (g.H,), 0.3)
    opaque = mk.pack_cudnn919(g)
    assert opaque.size == param_count(), (opaque.size, param_count())
    g.opaque = opaque
    scope = "model/encoder/cudnn_gru"
    tensors = {f"{scope}/opaque_kernel": opaque}
    tensors.update(mk.canonical_tf15(g, scope))
    tensors["global_step"] = np.int64(1000)
    tf = mk._tf()
    out.mkdir(parents=True, exist_ok=True)
    mk._save(tf, out / mk.PREFIX, tensors)
    (out / "checkpoint").write_text(
        f'model_checkpoint_path: "{mk.PREFIX}"\nall_model_checkpoint_paths: "{mk.PREFIX}"\n')


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] not in ("h5", "ckpt"):
        print(__doc__, file=sys.stderr)
        return 2
    kind, out = argv[0], Path(argv[1])
    (make_h5 if kind == "h5" else make_ckpt)(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
