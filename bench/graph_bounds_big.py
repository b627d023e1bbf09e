#!/usr/bin/env python
"""What a large real graph needs in the bounded child (docs/graph-bounds.md): a frozen ``CudnnRNN`` graph of a
2-layer bidirectional GRU (input 512, units 1024: 28.3 M params, a 108 MiB ``Const``) converted to a SavedModel, to
``.keras`` stacks (params evaluated) and to ONNX; per output the child's and the parent's peak resident set.

    PYTHONPATH=src .venv/bin/python bench/graph_bounds_big.py WORK_DIR
"""

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

I, H, L = 512, 1024, 2


def make(path: Path) -> None:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import numpy as np
    import tensorflow as tf

    from gruconv.model.canonical import StackShape
    from gruconv.model.cudnn_layout import params_size

    n = params_size(StackShape(I, H, L, True, "linear", "float32", "gru"))
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, None, I], name="x")
        h0 = tf.compat.v1.placeholder(tf.float32, [L * 2, None, H], name="h0")
        params = tf.constant(np.random.default_rng(0).uniform(-0.05, 0.05, n).astype(np.float32), name="params")
        out = tf.raw_ops.CudnnRNN(input=x, input_h=h0, input_c=tf.constant(0.0), params=params, rnn_mode="gru",
                                  direction="bidirectional", is_training=False, name="cudnn_gru")
        tf.identity(out[0], name="y")
        tf.identity(out[1], name="hy")
    path.write_bytes(g.as_graph_def().SerializeToString())


def measure(src: str, out: str) -> None:
    from gruconv import api

    t = time.time()
    try:
        api.convert(src, out, force=True)
        what = "ok"
    except Exception as e:  # noqa: BLE001 - reported
        what = f"{type(e).__name__}: {str(e)[:200]}"
    print(f"{Path(out).name}: {what}; {time.time() - t:.1f} s; parent peak "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB; child peak "
          f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MB", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--one":
        measure(sys.argv[2], sys.argv[3])
        sys.exit(0)
    work = Path(sys.argv[1])
    work.mkdir(parents=True, exist_ok=True)
    graph = work / "big_gru.pb"
    if not graph.exists():
        make(graph)
    for out in ("out_sm", "out.keras", "out.onnx"):  # one process each: RUSAGE_CHILDREN is per process
        subprocess.run([sys.executable, __file__, "--one", str(graph), str(work / out)], check=True)
