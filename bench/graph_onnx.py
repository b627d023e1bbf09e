#!/usr/bin/env python
"""``make bench`` section "graph-onnx" (issue 39): gruconv's whole-graph ONNX conversion of a SavedModel holding
cuDNN ops, timed against tf2onnx's own conversion of the same SavedModel (``python -m tf2onnx.convert
--saved-model``, its cuDNN handler left as it is).  Goal: gruconv within 1.5x of tf2onnx's time.

Inputs: ``fixtures/graphs/keras3_export`` (Keras 3 ``model.export`` traced on the cuDNN branch: 4
``CudnnRNNV3``) and a larger export made here once into ``bench-out/graph-onnx/keras3_big``
(``Embedding(5000, 128)`` -> 2 x ``Bidirectional(GRU(256))`` -> ``LSTM(256)`` -> ``Dense(10)``, ~3.2 M
parameters, traced the same way; :func:`make_big`).  Both commands are whole processes (TensorFlow's import
included: what a user waits for), interleaved.  gruconv's command is the library call
(:func:`gruconv.writers.onnx.tfgraph.write_graph_onnx`) until the CLI routes ``convert DIR model.onnx`` to it.
What tf2onnx wrote is recorded too: it exits 0 and says "Successfully converted" while its model still holds
the ``CudnnRNNV3`` nodes (it has no handler for them), which no ONNX runtime can run.

Run alone: ``.venv/bin/python bench/graph_onnx.py [--reps N]`` (prints the table); ``bench/run.py --only
graph-onnx`` puts it into the benchmark page.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
T_GRAPH_ONNX_VS_TF2ONNX = 1.5  # gruconv's whole-graph ONNX conversion <= 1.5 x tf2onnx's own, same SavedModel

GRUCONV = ("import sys; from gruconv.writers.onnx.tfgraph import write_graph_onnx; "
           "write_graph_onnx(sys.argv[1], sys.argv[2], force=True)")

#: One process, both conversions after one import and one untimed warm-up each, alternated: the conversion
#: alone (load, freeze, fold, convert, optimize; gruconv's checker and onnxruntime session included), free of
#: the import time that dominates the whole-process figures.
INPROC = r'''
import json, statistics, sys, time
from gruconv.writers.onnx import tfgraph
from gruconv.keras3.runtime import import_quietly
import_quietly("tf2onnx")
import logging
logging.getLogger("tf2onnx").setLevel(logging.CRITICAL)
from tf2onnx import convert, tf_loader
src, reps = sys.argv[1], int(sys.argv[2])

def ours():
    tfgraph.build(src)

def theirs():  # what `python -m tf2onnx.convert --saved-model SRC --opset 17` runs (tf2onnx/convert.py main)
    gd, i, o, rename = tf_loader.from_saved_model(src, None, None, return_tensors_to_rename=True)
    convert._convert_common(gd, name=src, opset=17, input_names=i, output_names=o, tensors_to_rename=rename)

times = {"gruconv": [], "tf2onnx": []}
ours(); theirs()
for _ in range(reps):
    for name, f in (("gruconv", ours), ("tf2onnx", theirs)):
        t = time.perf_counter(); f(); times[name].append(time.perf_counter() - t)
print(json.dumps(times))
'''

BIG = r'''
import os, sys
import numpy as np
import keras
sys.modules["keras.src.backend.tensorflow.rnn"]._is_gpu_available = lambda: True
L = keras.layers
inp = keras.Input((None,), dtype="int32", name="tokens")
x = L.Embedding(5000, 128)(inp)
x = L.Bidirectional(L.GRU(256, return_sequences=True))(x)
x = L.Bidirectional(L.GRU(256, return_sequences=True))(x)
x = L.LSTM(256)(x)
out = L.Dense(10)(x)
m = keras.Model(inp, out)
rng = np.random.default_rng(3990)
for v in m.weights:
    v.assign(rng.uniform(-0.1, 0.1, tuple(v.shape)).astype("float32"))
m.export(sys.argv[1], verbose=False)
'''


def make_big(out: Path, env: dict, log) -> Path:
    """The larger Keras 3 export (cached in ``out``)."""
    target = out / "keras3_big"
    if not (target / "saved_model.pb").is_file():
        shutil.rmtree(target, ignore_errors=True)
        log("graph-onnx: exporting bench-out/graph-onnx/keras3_big (Keras 3, cuDNN branch traced)")
        subprocess.run([sys.executable, "-c", BIG, str(target)], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return target


def _cudnn_ops(path: Path) -> str:
    """What an ONNX file holds of cuDNN ops ("none", or the op counts); "no file" when none was written."""
    if not path.is_file():
        return "no file"
    import onnx

    ops = [n.op_type for n in onnx.load(str(path)).graph.node if n.op_type.startswith("CudnnRNN")]
    return "none" if not ops else ", ".join(f"{op} x{ops.count(op)}" for op in sorted(set(ops)))


def section(bench, out: Path, reps: int, log) -> dict:
    """Run the interleaved timings through ``bench`` (``bench/run.py``'s module: ``run_once``, ``interleaved``,
    ``child_env``)."""
    d = out / "graph-onnx"
    d.mkdir(parents=True, exist_ok=True)
    inputs = {"keras3_export (fixture, 4 x CudnnRNNV3)": REPO / "fixtures" / "graphs" / "keras3_export",
              "keras3_big (~3.2 M params, 5 x CudnnRNNV3)": make_big(d, bench.child_env(), log)}
    results = {}
    for label, src in inputs.items():
        key = src.name
        ours, theirs = d / f"{key}.gruconv.onnx", d / f"{key}.tf2onnx.onnx"
        variants = {
            "gruconv": ([sys.executable, "-c", GRUCONV, str(src), str(ours)], {}),
            "tf2onnx": ([sys.executable, "-m", "tf2onnx.convert", "--saved-model", str(src), "--output", str(theirs),
                         "--opset", "17"], {}),
        }
        log(f"graph-onnx: {label}, gruconv vs tf2onnx, interleaved")
        res = bench.interleaved(variants, reps, log)
        results[label] = {"series": res, "gruconv_output": _cudnn_ops(ours), "tf2onnx_output": _cudnn_ops(theirs)}
        p = subprocess.run([sys.executable, "-c", INPROC, str(src), str(max(reps, 3))], env=bench.child_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            results[label]["in_process"] = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            results[label]["in_process"] = {"error": (p.stderr.strip().splitlines() or ["no output"])[-1][:200]}
        log(f"  in-process conversion: {results[label]['in_process']}")
    return {"inputs": results}


def render(v, verdicts: list) -> list:
    """The "Whole graph to ONNX" section of docs/benchmarks.md, and its verdict row."""
    L = []
    w = L.append
    goal = f"whole graph to ONNX: gruconv <= {T_GRAPH_ONNX_VS_TF2ONNX} x tf2onnx's own conversion (largest input)"
    if not v:
        verdicts.append((goal, "not measured: section did not run", None))
        return L
    w("## Whole graph to ONNX (issue 39)")
    w("")
    w("gruconv's whole-graph ONNX conversion (`gruconv.writers.onnx.tfgraph.write_graph_onnx`: tf2onnx as a "
      "library with gruconv's cuDNN handlers) against `python -m tf2onnx.convert --saved-model DIR --opset 17` "
      "(tf2onnx 1.17, its own cuDNN handling), whole processes, interleaved. \"cuDNN ops left\" is what each "
      "written model still holds.")
    w("")
    w("| Input | Command | Median wall (s) | Runs (s) | Peak RSS (MiB) | cuDNN ops left in its model |")
    w("|---|---|---:|---|---:|---|")
    last = None
    for label, r in v["inputs"].items():
        for name, s in r["series"].items():
            left = r[f"{name}_output"]
            if "error" in s:
                w(f"| {label} | {name} | not measured: {s['error'][:80]} | | | {left} |")
            else:
                runs = " / ".join(f"{x:.2f}" for x in s["runs"])
                rss = "" if s.get("rss_mib") is None else f"{s['rss_mib']:.0f}"
                w(f"| {label} | {name} | {s['wall_s']:.2f} | {runs} | {rss} | {left} |")
        last = r
    w("")
    w("The conversion alone, in one process after one import and an untimed warm-up of each (alternated; "
      "gruconv's includes `onnx.checker` and opening an onnxruntime session):")
    w("")
    w("| Input | gruconv median (s) | tf2onnx median (s) | ratio | runs gruconv / tf2onnx (s) |")
    w("|---|---:|---:|---:|---|")
    for label, r in v["inputs"].items():
        ip = r.get("in_process", {"error": "not run"})
        if "error" in ip:
            w(f"| {label} | not measured: {ip['error'][:80]} | | | |")
            continue
        a_, b_ = statistics.median(ip["gruconv"]), statistics.median(ip["tf2onnx"])
        runs = " / ".join(f"{x:.2f}" for x in ip["gruconv"]) + " ; " + " / ".join(f"{x:.2f}" for x in ip["tf2onnx"])
        w(f"| {label} | {a_:.2f} | {b_:.2f} | {a_ / b_:.2f}x | {runs} |")
    w("")
    g, t = last["series"].get("gruconv", {}), last["series"].get("tf2onnx", {})
    if "wall_s" in g and "wall_s" in t:
        ratio = g["wall_s"] / t["wall_s"]
        verdicts.append((goal, f"{g['wall_s']:.2f} s vs {t['wall_s']:.2f} s = **{ratio:.2f}x**",
                         ratio <= T_GRAPH_ONNX_VS_TF2ONNX))
    else:
        verdicts.append((goal, f"not measured: {g.get('error') or t.get('error')}", None))
    return L


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    import run as bench

    bench.OUT.mkdir(exist_ok=True)
    v = section(bench, bench.OUT, args.reps, print)
    verdicts: list = []
    print("\n".join(render(v, verdicts)))
    for goal, measured, ok in verdicts:
        print(f"{'met' if ok else 'NOT met' if ok is not None else '?'}: {goal}: {measured}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.exit(main())
