#!/usr/bin/env python
"""``make bench`` section "graph-savedmodel": ``gruconv convert GRAPH cpu_model/`` (the ``saved-model``
writer: each cuDNN node replaced by standard ops, the SavedModel then serves on a CPU) timed against a plain
TensorFlow ``tf.saved_model.load`` + ``tf.saved_model.save`` of the same SavedModel.  Goal: gruconv within 2x
of the plain load + save (issue 39's bar).

Inputs: the same two as the graph-onnx section (:mod:`graph_onnx`): ``fixtures/graphs/keras3_export`` (a
Keras 3 export holding four ``CudnnRNNV3``) and ``bench-out/graph-onnx/keras3_big`` (~3.2 M parameters, made
once by :func:`graph_onnx.make_big`; TensorFlow loads and re-saves both on a CPU without running them).
Both commands are whole processes (TensorFlow's start-up included on both sides), interleaved, through
``bench/run.py``'s ``interleaved`` (median wall time, each child's peak RSS).  Outputs go under
``bench-out/graph-savedmodel/``, each removed before the run that writes it.

Run alone: ``.venv/bin/python bench/graph_savedmodel.py [--reps N]`` (prints the table); ``bench/run.py
--only graph-savedmodel`` puts it into the benchmark page.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import graph_onnx  # noqa: E402  (bench/graph_onnx.py: the larger Keras 3 export, shared)

T_GRAPH_SAVEDMODEL_VS_PLAIN = 2.0  # gruconv convert to a CPU SavedModel <= 2 x tf.saved_model.load + save

#: The plain TensorFlow round trip of a SavedModel: what a user would run to re-save it (no cuDNN node
#: replaced, so its output still runs on a GPU only).
PLAIN = ("import sys, tensorflow as tf\nm = tf.saved_model.load(sys.argv[1])\n"
         "tf.saved_model.save(m, sys.argv[2], signatures=dict(m.signatures))\n")


def section(bench, out: Path, reps: int, log) -> dict:
    """Run the interleaved timings through ``bench`` (``bench/run.py``'s module: ``interleaved``,
    ``gruconv_cmd``, ``child_env``, ``rm``)."""
    d = out / "graph-savedmodel"
    d.mkdir(parents=True, exist_ok=True)
    big_dir = out / "graph-onnx"
    big_dir.mkdir(parents=True, exist_ok=True)
    inputs = {"keras3_export (fixture, 4 x CudnnRNNV3)": REPO / "fixtures" / "graphs" / "keras3_export",
              "keras3_big (~3.2 M params, 5 x CudnnRNNV3)": graph_onnx.make_big(big_dir, bench.child_env(), log)}
    results = {}
    for label, src in inputs.items():
        ours, plain = d / f"{src.name}.gruconv", d / f"{src.name}.plain"
        variants = {
            "gruconv convert": (bench.gruconv_cmd() + ["convert", str(src), str(ours)], {"before": bench.rm(ours)}),
            "tf.saved_model.load + save": ([sys.executable, "-c", PLAIN, str(src), str(plain)],
                                           {"before": bench.rm(plain)}),
        }
        log(f"graph-savedmodel: {label}, gruconv convert vs tf.saved_model.load + save, interleaved")
        results[label] = {"series": bench.interleaved(variants, reps, log)}
    return {"inputs": results}


def render(v, verdicts: list) -> list:
    """The "Graph to a CPU SavedModel" section of docs/benchmarks.md, and its verdict row."""
    L = []
    w = L.append
    goal = (f"graph to a CPU SavedModel: gruconv convert <= {T_GRAPH_SAVEDMODEL_VS_PLAIN} x "
            "tf.saved_model.load + save (largest input)")
    if not v:
        verdicts.append((goal, "not measured: section did not run", None))
        return L
    w("## Graph to a CPU SavedModel")
    w("")
    w("`gruconv convert GRAPH cpu_model/` (the `saved-model` writer: each cuDNN node replaced by standard ops) "
      "against a plain `tf.saved_model.load` + `tf.saved_model.save` of the same SavedModel (which keeps the "
      "cuDNN nodes), whole processes, TensorFlow's start-up included on both sides, interleaved.")
    w("")
    w("| Input | Command | Median wall (s) | Runs (s) | Peak RSS (MiB) |")
    w("|---|---|---:|---|---:|")
    last = None
    for label, r in v["inputs"].items():
        for name, s in r["series"].items():
            if "error" in s:
                w(f"| {label} | {name} | not measured: {s['error'][:80]} | | |")
            else:
                runs = " / ".join(f"{x:.2f}" for x in s["runs"])
                rss = "" if s.get("rss_mib") is None else f"{s['rss_mib']:.0f}"
                w(f"| {label} | {name} | {s['wall_s']:.2f} | {runs} | {rss} |")
        last = r
    w("")
    g, t = last["series"].get("gruconv convert", {}), last["series"].get("tf.saved_model.load + save", {})
    if "wall_s" in g and "wall_s" in t:
        ratio = g["wall_s"] / t["wall_s"]
        verdicts.append((goal, f"{g['wall_s']:.2f} s vs {t['wall_s']:.2f} s = **{ratio:.2f}x**",
                         ratio <= T_GRAPH_SAVEDMODEL_VS_PLAIN))
    else:
        verdicts.append((goal, f"not measured: {g.get('error') or t.get('error')}", None))
    return L


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    import run as bench

    bench.OUT.mkdir(exist_ok=True)
    v = section(bench, bench.OUT, args.reps, print)
    verdicts: list = []
    print("\n".join(render(v, verdicts)))
    for goal, measured, ok in verdicts:
        print(f"{'met' if ok else 'NOT met' if ok is not None else '?'}: {goal}: {measured}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
