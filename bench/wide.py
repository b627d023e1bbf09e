#!/usr/bin/env python
"""The wide-tensor case: a legacy Keras HDF5 model whose largest weight is a ``(5, 50_000_000)`` Dense kernel
(and its 50 M bias, 1.2 GB in all, gzip-stored), converted to ``.keras``: peak RSS must stay at most
0.5 x the parameter bytes (``T_RSS_VS_PARAMS`` of ``bench/run.py``), as for the large GRU model, whatever
the shape of the largest tensor (a block is bounded by bytes, not by rows: ``files/hdf5.py`` ``blocks``).

The input is built once into ``bench-out/wide/wide.h5`` from ``fixtures/keras/options.h5`` (written by
tf_keras's own legacy HDF5 writer: ``fixtures/make_keras_fixtures.py``): its groups, attributes and
``weight_names`` are kept; the CuDNNGRU is made 5 units wide and the Dense layer 50 M units (the config and
the datasets, seeded values; the kernel and bias gzip-compressed, as the issue's file was), the training
config and optimizer weights dropped (a compiled model's optimizer slots would add two more copies of the
output's size, which is not what this case measures).  Not committed: it is 1.2 GB uncompressed.

    .venv/bin/python bench/wide.py                        # this tree, 3 runs
    .venv/bin/python bench/wide.py --base /path/to/src    # interleaved with another tree's sources
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
UNITS_IN, WIDE = 5, 50_000_000
SOURCE = HERE.parent / "fixtures" / "keras" / "options.h5"
#: The Dense layer's kernel and bias (the 5-unit CuDNNGRU's few hundred bytes are left out).
PARAM_BYTES = (UNITS_IN * WIDE + WIDE) * 4
T_WIDE_RSS = 0.5  # peak RSS above `python -c pass` <= 0.5 x the parameter bytes (bench/run.py's T_RSS_VS_PARAMS)


#: The chunk layouts measured: ``rows``, one leading-axis row per chunk run (``(1, 1 Mi)`` elements, h5py
#: writing the values); ``gzip``, the hostile file of issue 45 item 7 (``gzip_bomb_1gb.h5``): chunks of
#: ``(5, 262_144)`` elements spanning every row (5 MiB each decompressed), gzip level 1, zeros: ~5 MB stored
#: for 1.2 GB declared.  Its small stored size is the point: a file under ``keras3/archive.py``'s
#: ``IN_MEMORY_MAX`` (8 MiB) was taken for a small model by its size alone and assembled in memory
#: (2.4 GB peak RSS before the size hint counted the declared bytes).
LAYOUTS = ("rows", "gzip")
GZIP_CHUNK = 262_144


def build(path: Path, layout: str = "rows") -> None:
    import h5py
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.h5")
    shutil.copyfile(SOURCE, tmp)
    rng = np.random.default_rng(0)
    with h5py.File(tmp, "r+") as f:
        cfg = json.loads(f.attrs["model_config"])
        for layer in cfg["config"]["layers"]:
            if layer["class_name"] == "CuDNNGRU":
                layer["config"]["units"] = UNITS_IN
            elif layer["class_name"] == "Dense":
                layer["config"]["units"] = WIDE
        f.attrs["model_config"] = json.dumps(cfg).encode("utf-8")
        del f.attrs["training_config"]
        del f["optimizer_weights"]
        gru = f["model_weights/regularized_gru/regularized_gru"]
        inp = gru["kernel:0"].shape[0]
        for name, shape in (("kernel:0", (inp, 3 * UNITS_IN)), ("recurrent_kernel:0", (UNITS_IN, 3 * UNITS_IN)),
                            ("bias:0", (6 * UNITS_IN,))):
            del gru[name]
            gru.create_dataset(name, data=rng.uniform(-0.3, 0.3, shape).astype("float32"))
        dense = f["model_weights/dense/dense"]
        del dense["kernel:0"], dense["bias:0"]
        if layout == "gzip":
            _gzip_bomb(dense)
            tmp.replace(path)
            return
        k = dense.create_dataset("kernel:0", shape=(UNITS_IN, WIDE), dtype="float32", compression="gzip",
                                 compression_opts=1, chunks=(1, 1 << 20))
        row = (np.arange(WIDE, dtype=np.int64) % 251).astype("float32") / 251.0  # compressible, not constant
        for i in range(UNITS_IN):
            k[i] = row * (i + 1)
        dense.create_dataset("bias:0", data=row[::-1], compression="gzip", compression_opts=1, chunks=(1 << 20,))
    tmp.replace(path)


def _gzip_bomb(dense) -> None:
    """The Dense kernel ``(5, 50 M)`` in ``(5, 262_144)``-element gzip-1 chunks of zeros and its bias in
    ``(262_144,)`` chunks, written pre-compressed (``write_direct_chunk``: one compressed chunk, 191 times;
    building takes a second)."""
    import zlib

    kblob = zlib.compress(bytes(UNITS_IN * GZIP_CHUNK * 4), 1)
    bblob = zlib.compress(bytes(GZIP_CHUNK * 4), 1)
    k = dense.create_dataset("kernel:0", shape=(UNITS_IN, WIDE), dtype="float32", compression="gzip",
                             compression_opts=1, chunks=(UNITS_IN, GZIP_CHUNK))
    b = dense.create_dataset("bias:0", shape=(WIDE,), dtype="float32", compression="gzip", compression_opts=1,
                             chunks=(GZIP_CHUNK,))
    for j in range(0, WIDE, GZIP_CHUNK):
        k.id.write_direct_chunk((0, j), kblob, 0)
        b.id.write_direct_chunk((j,), bblob, 0)


def _input(out: Path, layout: str, log=print) -> Path:
    src = out / "wide" / ("wide.h5" if layout == "rows" else f"wide_{layout}.h5")
    if not src.is_file():
        log(f"wide: building {src}")
        build(src, layout)
    return src


def section(bench, out: Path, reps: int, log) -> dict:
    """``make bench``'s "Wide tensors" section: ``gruconv convert`` of each layout's file to ``.keras``,
    interleaved with ``python -c pass`` (the baseline the memory target is measured above), through
    ``bench`` (``bench/run.py``'s module: ``run_once``, ``interleaved``)."""
    variants = {"python_only": ([sys.executable, "-c", "pass"], {})}
    for layout in LAYOUTS:
        src = _input(out, layout, log)
        dst = out / "wide" / f"out_{layout}.keras"
        variants[layout] = (bench.gruconv_cmd() + ["convert", str(src), str(dst), "--force"],
                            {"before": bench.rm(dst)})
    log("wide: convert of each layout to .keras vs python -c pass, interleaved")
    res = bench.interleaved(variants, reps, log)
    for layout in LAYOUTS:
        bench.rm(out / "wide" / f"out_{layout}.keras")()
    return {"series": res, "param_bytes": PARAM_BYTES,
            "stored": {k: (out / "wide" / ("wide.h5" if k == "rows" else f"wide_{k}.h5")).stat().st_size
                       for k in LAYOUTS}}


def render(v, verdicts: list) -> list:
    """The "Wide tensors" section of docs/benchmarks.md, and one verdict row per layout."""
    L = []
    w = L.append
    mib = 2**20
    goal = "wide Dense ({}): peak RSS above `python -c pass` <= {} x parameter bytes"
    if not v:
        for layout in LAYOUTS:
            verdicts.append((goal.format(layout, T_WIDE_RSS), "not measured: section did not run", None))
        return L
    S, pb = v["series"], v["param_bytes"]
    base = S.get("python_only", {})
    w("## Wide tensors (issue 45 item 7)")
    w("")
    w(f"A legacy Keras HDF5 model whose largest weight is a `({UNITS_IN}, {WIDE:,})` float32 Dense kernel (and its "
      f"bias: {pb / mib:,.0f} MiB of parameters), converted to `.keras` (`bench/wide.py`). Layouts: `rows`, gzip "
      "in `(1, 1 Mi)`-element chunks, values written by h5py; `gzip`, the hostile file of issue 45 item 7: gzip-1 "
      "zeros in `(5, 262,144)`-element chunks spanning every row (a file far smaller than its weights, which the "
      ".keras writer once took for a small model and assembled in memory: 2.4 GB peak RSS at 208fb0b).")
    w("")
    w("| Layout | File (MiB) | Median wall (s) | Runs (s) | Peak RSS (MiB) | RSS above `python -c pass` (MiB) "
      "| ÷ param bytes |")
    w("|---|---:|---:|---|---:|---:|---:|")
    for layout in LAYOUTS:
        s = S.get(layout, {"error": "not run"})
        size = v["stored"].get(layout, 0) / mib
        if "error" in s or s.get("rss_mib") is None or base.get("rss_mib") is None:
            why = s.get("error") or base.get("error") or "no RSS"
            w(f"| `{layout}` | {size:.1f} | not measured: {why[:80]} | | | | |")
            verdicts.append((goal.format(layout, T_WIDE_RSS), f"not measured: {why[:80]}", None))
            continue
        above = s["rss_mib"] - base["rss_mib"]
        ratio = above * mib / pb
        runs = " / ".join(f"{x:.2f}" for x in s["runs"])
        w(f"| `{layout}` | {size:.1f} | {s['wall_s']:.2f} | {runs} | {s['rss_mib']:.0f} | {above:.0f} | {ratio:.2f}× |")
        verdicts.append((goal.format(layout, T_WIDE_RSS), f"{above:.0f} MiB vs {pb / mib:.0f} MiB = **{ratio:.2f}x**",
                         ratio <= T_WIDE_RSS))
    w("")
    return L


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, help="another gruconv source tree, measured interleaved with this one")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--layout", choices=LAYOUTS, default="rows", help="the kernel's chunk layout (LAYOUTS)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(HERE))
    import run as R  # bench/run.py: run_once, the child environment

    R.OUT.mkdir(exist_ok=True)
    src = _input(R.OUT, args.layout)
    out = R.OUT / "wide" / "out.keras"
    trees = {"head": R.SRC} if args.base is None else {"base": args.base, "head": R.SRC}
    res = {k: [] for k in trees}
    for i in range(args.reps):
        for name, tree in trees.items():
            r = R.run_once(R.gruconv_cmd() + ["convert", str(src), str(out), "--force"], src=tree)
            res[name].append(r)
            print(f"[{i + 1}/{args.reps}] {name}: {r['wall_s']:.1f} s, {r['rss_mib']:.0f} MiB"
                  + (f"  FAILED: {r['error']}" if "error" in r else ""), flush=True)
    param_mib = PARAM_BYTES / 2**20
    for name, runs in res.items():
        ok = [r for r in runs if "error" not in r]
        if ok:
            rss = statistics.median(r["rss_mib"] for r in ok)
            print(f"{name}: median {statistics.median(r['wall_s'] for r in ok):.1f} s, peak RSS {rss:.0f} MiB "
                  f"= {rss / param_mib:.2f} x the {param_mib:.0f} MiB of parameters")
    out.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
