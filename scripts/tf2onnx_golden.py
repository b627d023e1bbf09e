#!/usr/bin/env python
"""tf2onnx's own cuDNN handler against the real-cuDNN golden files, next to gruconv's handlers (issue 39).

Reproduces the measurement in ``shared/DESIGN.md`` ("Graphs that hold cuDNN ops"): each golden file of
``fixtures/cudnn-golden`` (GRU) and ``fixtures/cudnn-golden-lstm`` (LSTM) is wrapped as a frozen TF1 graph --
placeholders ``x`` ``[T, B, I]``, ``h0`` (``c0``) ``[layers*dirs, B, H]``, ``lengths`` for V3, one ``CudnnRNN``
(every file without variable lengths) or ``CudnnRNNV3`` (every file, time-major, ``sequence_lengths`` the
golden's) whose ``params`` is a ``Const`` of the file's ``opaque`` buffer, ``y``/``hy`` (``cy``) identities --
and converted twice:

* **tf2onnx 1.17** as its users call it, ``tf2onnx.convert.from_graph_def`` (its own ``CudnnRNN`` handler,
  ``tf2onnx/onnx_opset/rnn.py``; the function converts with ``continue_on_error=True``, so a node its handler
  refuses is left in the graph and the model fails to load: the reason is the handler's logged error);
* **gruconv**, :func:`gruconv.writers.onnx.tfgraph.build` (tf2onnx with gruconv's handlers).

Each model runs in onnxruntime (CPU) on the golden ``x``/``h0``/``c0``; the figure is the max abs error
of ``y`` and of the final states against cuDNN's strict-fp32 outputs.  LSTM projection (``*_proj``) files are
left out (neither converts them: gruconv refuses ``num_proj`` in one line).

Run: ``.venv/bin/python scripts/tf2onnx_golden.py [--json OUT.json] [--markdown]`` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
GOLDEN = [REPO / "fixtures" / "cudnn-golden", REPO / "fixtures" / "cudnn-golden-lstm"]
OPSET = 17


def cases() -> list:
    out = []
    for d in GOLDEN:
        for p in sorted(d.glob("*.npz")):
            z = np.load(p)
            cfg = json.loads(str(z["config"]))
            if cfg.get("P", cfg["H"]) != cfg["H"]:
                continue
            for op in (["CudnnRNN"] if not cfg["varlen"] else []) + ["CudnnRNNV3"]:
                out.append((p, op))
    return out


def graph(path: Path, op: str):
    """``(GraphDef, feeds, expected)`` of one golden file wrapped in one ``op`` node."""
    import tensorflow as tf

    z = np.load(path)
    cfg = json.loads(str(z["config"]))
    lstm = "c0" in z.files
    D = 2 if cfg["bidir"] else 1
    v1 = tf.compat.v1
    g = tf.Graph()
    feeds = {"x:0": z["x"], "h0:0": z["h0"]}
    with g.as_default():
        x = v1.placeholder(tf.float32, [None, None, cfg["I"]], name="x")
        h0 = v1.placeholder(tf.float32, [cfg["L"] * D, None, cfg["H"]], name="h0")
        c0 = v1.placeholder(tf.float32, [cfg["L"] * D, None, cfg["H"]], name="c0") if lstm else tf.constant(0.0)
        if lstm:
            feeds["c0:0"] = z["c0"]
        kw = dict(input=x, input_h=h0, input_c=c0, params=tf.constant(z["opaque"], name="params"),
                  rnn_mode="lstm" if lstm else "gru", is_training=False, name="cudnn_rnn",
                  direction="bidirectional" if cfg["bidir"] else "unidirectional",
                  input_mode="skip_input" if cfg["skip"] else "linear_input")
        if op == "CudnnRNNV3":
            kw["sequence_lengths"] = v1.placeholder(tf.int32, [None], name="lengths")
            feeds["lengths:0"] = z["seq_lengths"].astype(np.int32)
        out = getattr(tf.raw_ops, op)(**kw)
        tf.identity(out[0], name="y")
        tf.identity(out[1], name="hy")
        expected = {"y:0": z["y"], "hy:0": z["hy"]}
        if lstm:
            tf.identity(out[2], name="cy")
            expected["cy:0"] = z["cy"]
    return g.as_graph_def(), feeds, expected


def run(model, feeds: dict, expected: dict) -> str:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    try:
        s = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime's load errors
        return "invalid ONNX: " + str(e).splitlines()[0].split("] ")[-1][:120]
    names = {i.name for i in s.get_inputs()}
    feed = {k.replace(":0", ""): v for k, v in feeds.items()}
    feed = {k: v for k, v in {**feed, **feeds}.items() if k in names}
    try:
        outs = dict(zip([o.name for o in s.get_outputs()], s.run(None, feed)))
    except Exception as e:  # noqa: BLE001
        return "onnxruntime refuses to run it: " + str(e).split("Status Message: ")[-1].splitlines()[0][:120]
    errs = []
    for k, want in expected.items():
        got = outs.get(k, outs.get(k.replace(":0", "")))
        if got is None:
            return f"no output {k}"
        if got.shape != want.shape:
            return f"{k} shape {list(got.shape)}, cuDNN's {list(want.shape)}"
        errs.append(float(np.abs(got - want).max()))
    return f"{max(errs):.2g}"


def _why(gd, feeds, expected) -> str:
    """Why tf2onnx left a cuDNN node: its handler's exception (the conversion redone as ``from_graph_def``
    does it, with ``continue_on_error=False``), or no handler for the op at all."""
    import tensorflow as tf
    from tf2onnx import tf_loader
    from tf2onnx.tfonnx import process_tf_graph

    with tf.Graph().as_default() as g:
        frozen = tf_loader.tf_optimize(list(feeds), list(expected), gd)
    with tf.Graph().as_default() as g:
        tf.import_graph_def(frozen, name="")
        try:
            process_tf_graph(g, continue_on_error=False, opset=OPSET, input_names=list(feeds),
                             output_names=list(expected))
        except Exception as e:  # noqa: BLE001 - the handler's own exception
            return "its handler fails: " + (str(e).strip().splitlines() or [type(e).__name__])[0][:100]
    return "no handler for the op"


def tf2onnx_own(gd, feeds, expected) -> str:
    import tf2onnx

    try:
        model, _ = tf2onnx.convert.from_graph_def(gd, input_names=list(feeds), output_names=list(expected),
                                                  opset=OPSET)
    except Exception as e:  # noqa: BLE001 - tf2onnx's own errors
        return "conversion fails: " + str(e).splitlines()[0][:120]
    left = sorted({n.op_type for n in model.graph.node if n.op_type.startswith("CudnnRNN")})
    if left:
        return f"not converted, {', '.join(left)} left in the model ({_why(gd, feeds, expected)})"
    return run(model, feeds, expected)


def gruconv(gd, feeds, expected, tmp: Path) -> str:
    from gruconv.errors import GruconvError
    from gruconv.writers.onnx import tfgraph

    p = tmp / "g.pb"
    p.write_bytes(gd.SerializeToString())
    try:
        model, _ = tfgraph.build(p, opset=OPSET)
    except GruconvError as e:
        return "refused: " + e.message
    return run(model, feeds, expected)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    sys.path.insert(0, str(REPO / "src"))
    from gruconv.keras3.runtime import import_quietly

    import_quietly("tf2onnx")
    import tf2onnx

    logging.getLogger("tf2onnx").setLevel(logging.CRITICAL)
    rows = []
    from gruconv.files.outputs import scratch_dir

    with scratch_dir(prefix="tf2onnx-golden-") as tmp:
        for path, op in cases():
            gd, feeds, expected = graph(path, op)
            row = {"golden": path.name, "op": op, "tf2onnx": tf2onnx_own(gd, feeds, expected),
                   "gruconv": gruconv(gd, feeds, expected, Path(tmp))}
            rows.append(row)
            if not args.markdown:
                print(f"{row['golden']:28s} {op:11s} tf2onnx: {row['tf2onnx']:60s} gruconv: {row['gruconv']}",
                      flush=True)
    if args.markdown:
        print(f"| golden file | op | tf2onnx {tf2onnx.__version__} own handler: max abs error | "
              "gruconv's handlers: max abs error |")
        print("|---|---|---|---:|")
        for r in rows:
            print(f"| `{r['golden']}` | {r['op']} | {r['tf2onnx']} | {r['gruconv']} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
