"""Time ``gruconv convert GRAPH cpu_model/`` (the ``saved-model`` writer) against a plain TensorFlow
``tf.saved_model.load`` + ``tf.saved_model.save`` of the same SavedModel (issue 39's bar: within 2x).

    .venv/bin/python bench/graph_savedmodel.py [--reps 3] [SAVEDMODEL_DIR]

Each measurement is a fresh process (TensorFlow's start-up included on both sides), the two interleaved;
figures are the median wall time and the peak RSS of each (``resource.getrusage`` of the children).  The
default input is ``fixtures/graphs/keras3_export`` (a Keras 3 export holding four ``CudnnRNNV3``; TensorFlow
loads and re-saves it on a CPU without running it).  Outputs go under a temporary directory, removed after.
No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _timed(cmd: list, env: dict) -> tuple:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{cmd[:4]}... failed ({r.returncode}): {r.stderr[-2000:]}")
    return wall, max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("input", nargs="?", default=str(ROOT / "fixtures" / "graphs" / "keras3_export"))
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    plain = ("import sys, tensorflow as tf\nm = tf.saved_model.load(sys.argv[1])\n"
             "tf.saved_model.save(m, sys.argv[2], signatures=dict(m.signatures))\n")
    times: dict = {"gruconv convert": [], "tf.saved_model.load + save": []}
    with tempfile.TemporaryDirectory() as td:
        for i in range(a.reps):
            out = Path(td) / f"g{i}"
            times["gruconv convert"].append(_timed([sys.executable, "-m", "gruconv", "convert", a.input, str(out)], env))
            out = Path(td) / f"p{i}"
            times["tf.saved_model.load + save"].append(_timed([sys.executable, "-c", plain, a.input, str(out)], env))
            shutil.rmtree(out, ignore_errors=True)
    med = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    for k, v in times.items():
        print(f"{k:30s} median {med[k]:6.1f} s  (runs: {', '.join(f'{w:.1f}' for w, _ in v)})")
    print(f"ratio gruconv / plain load+save: {med['gruconv convert'] / med['tf.saved_model.load + save']:.2f} "
          "(peak RSS of the children, whichever largest: "
          f"{max(m for v in times.values() for _, m in v) / 1024:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
