#!/usr/bin/env python
"""Streamed route (``gruconv.keras3.archive``, issue 20) vs today's ``gruconv convert``, on the large model.

Inputs: ``bench/make_large.py`` (``big.h5``: 3 x Bidirectional(CuDNNGRU(1024)), 47.2 M parameters;
``big_ckpt/``: the same stack as a TF1 checkpoint), cached in ``bench-out/``.  Each run is a fresh
process; the routes are interleaved (A B C D ..., A B C D ...); wall time is measured by this parent
around the whole process, peak RSS is the child's ``ru_maxrss`` from ``os.wait4``.  The load average
is printed as measured, before and after; nothing is inferred from it.

Usage: ``.venv/bin/python bench/stream_bench.py [--reps N] [--write docs/streaming.md]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench-out"
PY = str(REPO / ".venv" / "bin" / "python")
sys.path.insert(0, str(REPO / "bench"))

STREAM_H5 = ("import sys; from gruconv.readers import keras_h5; from gruconv.keras3 import archive as keras_archive; "
             "keras_archive.write_keras_h5_doc(keras_h5.read(sys.argv[1]), sys.argv[2])")
STREAM_CKPT = ("import sys; from gruconv.readers import tf1; from gruconv.keras3 import archive as keras_archive; "
               "d = tf1.read(sys.argv[1]); e = d.stacks[0]; "
               "keras_archive.write_stack(e.stack, sys.argv[2], name=e.scope or 'gru_stack', release=d.reader.release)")


def run(cmd: list) -> tuple:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), TF_CPP_MIN_LOG_LEVEL="3")
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{cmd} failed: {err[-800:]}")
    return wall, ru.ru_maxrss / 1024  # MiB


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--write", type=Path, default=None)
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    big_h5, big_ckpt = OUT / "big.h5", OUT / "big_ckpt"
    if not big_h5.exists():
        subprocess.run([PY, str(REPO / "bench" / "make_large.py"), "h5", str(big_h5)], check=True)
    if not big_ckpt.exists():
        subprocess.run([PY, str(REPO / "bench" / "make_large.py"), "ckpt", str(big_ckpt)], check=True)
    import make_large

    params = make_large.param_count()
    tgt = OUT / "stream_bench"
    tgt.mkdir(exist_ok=True)
    routes = {
        "gruconv convert big.h5 out.keras (today)": [PY, "-m", "gruconv", "convert", str(big_h5),
                                                     str(tgt / "a.keras"), "--force"],
        "streamed big.h5 -> out.keras": [PY, "-c", STREAM_H5, str(big_h5), str(tgt / "b.keras")],
        "gruconv convert big_ckpt out.keras (today)": [PY, "-m", "gruconv", "convert", str(big_ckpt),
                                                       str(tgt / "c.keras"), "--force"],
        "streamed big_ckpt -> out.keras": [PY, "-c", STREAM_CKPT, str(big_ckpt), str(tgt / "d.keras")],
        "python -c pass": [PY, "-c", "pass"],
    }
    load_start = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results = {k: [] for k in routes}
    for _ in range(args.reps):
        for name, cmd in routes.items():
            for f in tgt.iterdir():
                if f.is_file():
                    f.unlink()
            results[name].append(run(cmd))
    load_end = os.getloadavg()
    base_rss = statistics.median(r for _, r in results["python -c pass"])
    rows = []
    for name, runs in results.items():
        walls = [w for w, _ in runs]
        rss = max(r for _, r in runs)
        rows.append((name, statistics.median(walls), walls, rss, (rss - base_rss) * 2**20 / (params * 4)))
    today = {"h5": rows[0][1], "ckpt": rows[2][1]}
    lines = [f"- {started}; {os.cpu_count()} cores; Python {sys.version.split()[0]}",
             f"- load average (1/5/15 min) at start {'/'.join(f'{x:.2f}' for x in load_start)}, "
             f"at end {'/'.join(f'{x:.2f}' for x in load_end)}",
             f"- model: {params:,} parameters = {params * 4 / 2**20:.1f} MiB float32; {args.reps} interleaved runs",
             "", "| route | median wall (s) | runs (s) | peak RSS (MiB) | RSS above `python -c pass` / param bytes "
             "| wall / today's convert of the same input |", "|---|---:|---|---:|---:|---:|"]
    for name, med, walls, rss, ratio in rows:
        rel = "" if name == "python -c pass" else f"{med / today['h5' if 'h5' in name else 'ckpt']:.2f}x"
        lines.append(f"| {name} | {med:.2f} | {' / '.join(f'{w:.2f}' for w in walls)} | {rss:.0f} | "
                     f"{ratio:.2f}x | {rel} |")
    text = "\n".join(lines)
    print(text)
    (OUT / "stream_bench.json").write_text(json.dumps({"rows": rows, "load": [load_start, load_end]}, indent=1))
    if args.write:
        args.write.write_text(args.write.read_text().replace("<!-- BENCH -->", text)
                              if args.write.exists() and "<!-- BENCH -->" in args.write.read_text() else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
