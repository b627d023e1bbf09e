#!/usr/bin/env python
"""``make bench``: measure gruconv side by side with the alternatives; write ``docs/benchmarks.md``.

Everything is generated under ``bench-out/`` (git-ignored) and measured in one run
on one machine.  Every figure is the median of several runs, each in a fresh
process: wall time from the parent (``time.perf_counter`` around spawn and exit)
and the child's peak RSS from ``os.wait4`` (the kernel's ``ru_maxrss`` of that
child and any workers it waited for -- what ``getrusage(RUSAGE_CHILDREN)`` would
report from a one-child wrapper).  Runs of the variants being compared are
interleaved (A B C, A B C, ...) so that load from other processes hits them
alike.

Sections (see docs/benchmarks.md for what each one means):

1. large model -- 3 x Bidirectional(CuDNNGRU(1024)) on input 512 (~47 M params):
   ``gruconv convert`` of the HDF5 file and of the TF1 checkpoint, the manual
   tf_keras route, the h5py/NumPy I/O floor, and ``import keras`` alone.
2. batch -- 100 small mixed models in one ``gruconv convert DIR --out-dir``
   (``--jobs 1`` and ``--jobs 2``) vs one process per file (timed on 20 files,
   extrapolated).
3. inspect latency -- ``gruconv inspect`` of the large files (whole process, and
   the in-process ``gruconv.api.inspect`` call) vs ``tf.train.list_variables``.
4. verify (issue 30) -- ``gruconv verify`` of the large model and of one small
   model, and ``convert --verify --jobs 2`` over 60 copies of a small model.
5. graph-onnx (issue 39) -- gruconv's whole-graph ONNX conversion of Keras 3 exports holding
   ``CudnnRNNV3`` vs ``python -m tf2onnx.convert --saved-model`` of the same SavedModels
   (bench/graph_onnx.py).
6. graph-savedmodel -- ``gruconv convert GRAPH cpu_model/`` (the SavedModel that serves on a CPU) vs a
   plain ``tf.saved_model.load`` + ``tf.saved_model.save`` of the same SavedModels (bench/graph_savedmodel.py).
7. wide -- peak RSS of ``gruconv convert`` of a (5, 50 M) Dense kernel in two chunk layouts, the gzip one
   being issue 45 item 7's hostile file (bench/wide.py).

A section whose tool is missing or fails is reported as "not measured: <reason>"
instead of stopping the run.

Usage::

    .venv/bin/python bench/run.py            # full run (about 8-11 minutes on 2 cores; the wide section ~2.5 of them)
    .venv/bin/python bench/run.py --quick    # 1 repetition, 20 batch models; writes bench-out/benchmarks-quick.md
    .venv/bin/python bench/run.py --regen    # rebuild the large inputs even if cached
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import io
import json
import os
import platform
import shutil
import statistics
from typing import Optional
import subprocess
import sys
import time
import zipfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench-out"
DOC = REPO / "docs" / "benchmarks.md"
BIN = Path(sys.executable).parent

sys.path.insert(0, str(REPO / "bench"))
import make_large  # noqa: E402  (bench/make_large.py: shape constants and param count)
import graph_onnx  # noqa: E402  (bench/graph_onnx.py: issue 39's whole-graph ONNX section)
import graph_savedmodel  # noqa: E402  (bench/graph_savedmodel.py: issue 39's CPU SavedModel section)
import wide  # noqa: E402  (bench/wide.py: the wide-tensor memory section, issue 45 item 7's chunk layout)

# Targets (issue 20: the streamed writer, no Keras on the convert path).
T_CONVERT_VS_MANUAL = 0.2     # convert wall time <= 0.2 x manual route (issue 20)
T_CONVERT_VS_MANUAL_47 = 0.1  # issue 47 item 4: the same at 0.1 x, near the h5py/NumPy floor (0.06-0.08 x)
T_VERIFY_VS_CONVERT = 3.5     # issue 47 item 4: verify big.h5 <= 3.5 x convert big.h5 (wall, whole process)
T_RSS_VS_PARAMS = 0.5         # peak RSS above `python -c pass` <= 0.5 x parameter bytes
T_BATCH_RATE = 150.0          # >= 150 models/s after start-up, --jobs 2
T_SINGLE_S = 0.5              # one `gruconv convert` of a small model <= 0.5 s, whole process
T_CHECK_LOAD = 1.2            # convert --check-load - convert <= 1.2 x a plain load_model of the output
T_INSPECT_S = 0.3             # gruconv inspect <= 0.3 s
# Targets (issue 30: verify at CI scale).
T_VERIFY_BATCH_RATE = 20.0    # convert --verify --jobs 2: >= 20 models/s after start-up
T_VERIFY_LARGE_S = 10.0       # gruconv verify big.h5 on the CPU <= 10 s
T_VERIFY_LARGE_RSS = 3.0      # its peak RSS above `import keras` <= 3 x parameter bytes
VERIFY_COPIES = 60            # copies of fixtures/keras/sequential.h5 in the verify batch (issue 30's case)

# Fixtures that convert without hints/config (the others need --num-units etc. or --config,
# or hold nothing to convert); the batch set is built from these.
KERAS_SKIP = {"weights_only.h5", "plain_gru.h5"}
TF1_SKIP = {"opaque_only_skip_uni", "opaque_only_skip_bidir", "tf14_opaque_only"}


# --------------------------------------------------------------------------- running things

#: The gruconv sources children import (bench/compare.py points this at a baseline's for its runs).
SRC = REPO / "src"


def child_env(src: Optional[Path] = None) -> dict:
    """The environment of every measured command.  Bytecode: an installed gruconv has its ``.pyc`` files
    (pip compiles them at install); a shell with ``PYTHONDONTWRITEBYTECODE=1`` (this project's sessions
    set it) made every measured process compile gruconv's sources again, ~0.15 s of each start-up here.
    So children may write bytecode (``__pycache__`` beside the sources, git-ignored; the warm-up runs
    write it), for every tree measured (bench/compare.py's baseline too).  Not ``PYTHONPYCACHEPREFIX``:
    with it Python ignores the installed packages' own ``.pyc`` files and would recompile TensorFlow."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    env.pop("TF_USE_LEGACY_KERAS", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src or SRC), env.get("PYTHONPATH")) if p)
    return env


def gruconv_cmd() -> list:
    exe = BIN / "gruconv"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "gruconv"]


_NOISE = ("WARNING: All log messages", "I0000", "W0000", "E0000", "To enable the following",
          "oneDNN custom operations")


def _reason(stderr: str, rc: int) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith(_NOISE)]
    if not lines:
        return f"exit code {rc}"
    # Prefer the exception line of a traceback, else the last line.
    for ln in reversed(lines):
        if ln.startswith(("gruconv: error", "ImportError", "ModuleNotFoundError")) or "Error" in ln.split(":")[0]:
            return ln[:300]
    return lines[-1][:300]


# A tiny wrapper process times the command and reads its rusage: the command is forked from
# the wrapper (about 10 MiB resident), not from this process, whose pages would otherwise be
# counted in the child's ru_maxrss (Linux records the RSS of the image an exec replaces).
WRAPPER = r'''
import json, os, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(cmd[0], cmd)
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
rc = os.waitstatus_to_exitcode(status)
with open(out, "w") as f:
    json.dump({"wall_s": wall, "maxrss_kb": ru.ru_maxrss, "rc": rc}, f)
sys.exit(rc if rc >= 0 else 128 - rc)
'''


def run_once(cmd: list, *, cwd=None, ok_codes=(0,), before=None, src: Optional[Path] = None) -> dict:
    """Run ``cmd`` once in a fresh process: wall seconds, peak RSS (MiB), rc, output tails.  ``src``:
    the gruconv sources to import (default this tree's, :data:`SRC`)."""
    if before is not None:
        before()
    stat = OUT / ".wrapper-result.json"
    if stat.exists():
        stat.unlink()
    p = subprocess.run([sys.executable, "-S", "-c", WRAPPER, str(stat)] + [str(c) for c in cmd], cwd=cwd,
                       env=child_env(src), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stderr = p.stderr.decode("utf-8", "replace")
    try:
        w = json.loads(stat.read_text())
    except (OSError, ValueError):
        w = {"wall_s": float("nan"), "maxrss_kb": None, "rc": p.returncode}
    res = {"wall_s": w["wall_s"], "rss_mib": None if w["maxrss_kb"] is None else w["maxrss_kb"] / 1024.0,
           "rc": w["rc"], "stdout": p.stdout.decode("utf-8", "replace")[-4000:], "stderr": stderr[-4000:]}
    if w["rc"] not in ok_codes:
        res["error"] = _reason(stderr, w["rc"])
    return res


def series(name: str, runs: list) -> dict:
    """Median figures of a list of run_once results (or the first error)."""
    errs = [r["error"] for r in runs if "error" in r]
    d = {"name": name, "runs": [round(r["wall_s"], 3) for r in runs],
         "rss_runs": [None if r["rss_mib"] is None else round(r["rss_mib"], 1) for r in runs]}
    if errs or not runs:
        d["error"] = errs[0] if errs else "no runs"
        return d
    d["wall_s"] = statistics.median(r["wall_s"] for r in runs)
    rss = [r["rss_mib"] for r in runs if r["rss_mib"] is not None]
    d["rss_mib"] = statistics.median(rss) if rss else None
    return d


def interleaved(variants: dict, reps: int, log) -> dict:
    """variants: name -> (cmd, kwargs).  Runs A B C, A B C, ... ``reps`` times; stops a variant at its
    first failure (a broken tool is not retried)."""
    runs = {k: [] for k in variants}
    broken = set()
    for i in range(reps):
        for name, (cmd, kw) in variants.items():
            if name in broken:
                continue
            r = run_once(cmd, **kw)
            runs[name].append(r)
            tag = f"{r['wall_s']:.2f} s" + (f", {r['rss_mib']:.0f} MiB" if r["rss_mib"] else "")
            log(f"  [{i + 1}/{reps}] {name}: {tag}" + (f"  FAILED: {r['error']}" if "error" in r else ""))
            if "error" in r:
                broken.add(name)
    return {k: series(k, v) for k, v in runs.items()}


# --------------------------------------------------------------------------- machine facts

def _cpu_model() -> str:
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_gib() -> float:
    try:
        for ln in Path("/proc/meminfo").read_text().splitlines():
            if ln.startswith("MemTotal:"):
                return int(ln.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return float("nan")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git(*args) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.rstrip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def machine_facts() -> dict:
    dirty = [ln[3:] for ln in _git("status", "--porcelain", "--", "src").splitlines() if len(ln) > 3]
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(), "cores": os.cpu_count(), "ram_gib": round(_ram_gib(), 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "tensorflow": _version("tensorflow"), "tf_keras": _version("tf-keras"), "keras": _version("keras"),
        "numpy": _version("numpy"), "h5py": _version("h5py"), "gruconv": _version("gruconv"),
        "commit": _git("rev-parse", "--short", "HEAD"), "src_uncommitted": dirty,
        "bytecode_written": True,
        "dont_write_bytecode": os.environ.get("PYTHONDONTWRITEBYTECODE", ""),
    }


# --------------------------------------------------------------------------- inputs

def _file_hash(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()[:16]


def large_inputs(out: Path, regen: bool, log) -> dict:
    """bench-out/large/{big.h5,big_ckpt/}; regenerated when make_large.py changed or --regen."""
    d = out / "large"
    stamp = d / "stamp.json"
    key = {"make_large": _file_hash(REPO / "bench" / "make_large.py"),
           "make_tf1_fixtures": _file_hash(REPO / "fixtures" / "make_tf1_fixtures.py")}
    h5, ckpt = d / "big.h5", d / "big_ckpt"
    info = {"h5": h5, "ckpt": ckpt, "generated": False}
    try:
        old = json.loads(stamp.read_text())
        cached = {k: old.get(k) for k in key} == key and h5.is_file() and (ckpt / "checkpoint").is_file()
        info["build_s"] = old.get("build_s")
    except (OSError, ValueError):
        cached = False
    if cached and not regen:
        log("large inputs: cached in bench-out/large (--regen to rebuild)")
        return info
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    t_build = time.perf_counter()
    for kind, target in (("h5", h5), ("ckpt", ckpt)):
        t0 = time.perf_counter()
        r = run_once([sys.executable, str(REPO / "bench" / "make_large.py"), kind, str(target)])
        if "error" in r:
            raise SystemExit(f"bench: cannot build the large {kind} input: {r['error']}\n{r['stderr']}")
        log(f"large inputs: built {target.relative_to(out)} in {time.perf_counter() - t0:.1f} s")
    info["build_s"] = round(time.perf_counter() - t_build, 1)
    stamp.write_text(json.dumps(dict(key, build_s=info["build_s"])))
    info["generated"] = True
    return info


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


def batch_inputs(out: Path, n: int) -> tuple:
    """``n`` renamed copies of the convertible fixtures in nested subdirectories; returns (root, list)."""
    fx = REPO / "fixtures"
    keras = sorted(p for p in (fx / "keras").glob("*.h5") if p.name not in KERAS_SKIP)
    tf1 = sorted(p for p in (fx / "tf1").iterdir()
                 if p.is_dir() and (p / "checkpoint").is_file() and p.name not in TF1_SKIP)
    # Interleave the two kinds so that every slice of the list is mixed.
    sources, ki, ti = [], 0, 0
    while ki < len(keras) or ti < len(tf1):
        if ki < len(keras) and (ti >= len(tf1) or ki * len(tf1) <= ti * len(keras)):
            sources.append(keras[ki]); ki += 1  # noqa: E702
        else:
            sources.append(tf1[ti]); ti += 1  # noqa: E702
    root = out / "batch-in"
    if root.exists():
        shutil.rmtree(root)
    items = []
    for i in range(n):
        src = sources[i % len(sources)]
        sub = root / f"team{i % 4}" / f"run{(i // 4) % 5}" / ("ckpts" if src.is_dir() else "h5")
        sub.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            dst = sub / f"m{i:03d}_{src.name}"
            shutil.copytree(src, dst)
        else:
            dst = sub / f"m{i:03d}_{src.stem}.h5"
            shutil.copy2(src, dst)
        items.append(dst)
    return root, items, len(keras), len(tf1)


# --------------------------------------------------------------------------- scripts run as children

MANUAL = r'''
# The manual Keras 2 route: build the GRU model by hand with tf_keras, read the CuDNNGRU
# HDF5 with h5py, transform each gate the way Keras 2's loader did, set_weights, save.
import os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import h5py, numpy as np
import tf_keras as K
src, dst, units, width, layers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
x_in = K.Input((None, width)); x = x_in
for i in range(layers):
    x = K.layers.Bidirectional(K.layers.GRU(units, return_sequences=True, reset_after=True,
                                            recurrent_activation="sigmoid"), name=f"bigru_{i}")(x)
model = K.Model(x_in, x)
def gru_weights(kernel, recurrent, bias):   # tf_keras hdf5_format._convert_rnn_weights, CuDNNGRU -> GRU
    k = np.hstack([g.T.reshape(g.shape, order="F") for g in np.hsplit(kernel, 3)])
    r = np.hstack([g.T for g in np.hsplit(recurrent, 3)])
    return [k, r, bias.reshape(2, -1)]
dec = lambda s: s.decode() if isinstance(s, bytes) else s
with h5py.File(src, "r") as f:
    g = f["model_weights"]
    for name in map(dec, g.attrs["layer_names"]):
        names = [dec(n) for n in g[name].attrs["weight_names"]]
        if names:
            w = [np.asarray(g[name][n]) for n in names]
            model.get_layer(name).set_weights(gru_weights(*w[:3]) + gru_weights(*w[3:]))
model.save(dst)
'''

FLOOR_H5 = r'''
# I/O floor: read every dataset of the HDF5 file with h5py, write them all to a new HDF5 file.
import sys, h5py
src, dst = sys.argv[1], sys.argv[2]
data = {}
with h5py.File(src, "r") as f:
    f.visititems(lambda n, o: data.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
with h5py.File(dst, "w") as g:
    for n, a in data.items():
        g.create_dataset(n, data=a)
'''

FLOOR_CKPT = r'''
# I/O floor for the checkpoint: read the whole data file with NumPy (opaque buffer + canonical
# tensors: what gruconv reads), write the parameters once (param_count float32) with h5py.
import sys, glob, h5py, numpy as np
ckpt, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = [np.fromfile(p, dtype=np.uint8) for p in sorted(glob.glob(ckpt + "/*.data-*"))]
with h5py.File(dst, "w") as g:
    g.create_dataset("params", data=data[0][: 4 * n].view(np.float32))
'''

INSPECT_INPROC = r'''
# In-process latency of gruconv.api.inspect: first call in a fresh process, then a second call.
import json, sys, time
t0 = time.perf_counter()
from gruconv import api
t1 = time.perf_counter()
api.inspect(sys.argv[1])
t2 = time.perf_counter()
api.inspect(sys.argv[1])
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "first_s": t2 - t1, "second_s": t3 - t2}))
'''

# What `convert --check-load` adds, done by hand: a plain load_model of the converted file.
LOAD_OUTPUT = ("import sys, os; os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3'); import keras; "
               "keras.saving.load_model(sys.argv[1])")

TF_LIST = "import sys, tensorflow as tf; tf.train.list_variables(sys.argv[1])"
H5_LIST = ("import sys, h5py; f = h5py.File(sys.argv[1], 'r'); "
           "f.visititems(lambda n, o: (n, o.shape, o.dtype) if hasattr(o, 'shape') else None)")


# --------------------------------------------------------------------------- sections

def rm(*paths):
    def _do():
        for p in paths:
            p = Path(p)
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
            for extra in Path(p.parent).glob(p.name + ".rest.npz"):
                extra.unlink()
    return _do


def arrays_in_keras_zip(path: Path) -> list:
    import h5py
    import numpy as np

    with zipfile.ZipFile(path) as z, h5py.File(io.BytesIO(z.read("model.weights.h5")), "r") as f:
        out = []
        f.visititems(lambda n, o: out.append(np.asarray(o)) if isinstance(o, h5py.Dataset) else None)
    return out


def same_arrays(a: list, b: list) -> bool:
    import numpy as np

    if len(a) != len(b):
        return False
    rest = list(b)
    for x in a:
        for j, y in enumerate(rest):
            if x.shape == y.shape and np.array_equal(x, y):
                del rest[j]
                break
        else:
            return False
    return True


def section_large(out: Path, big: dict, reps: int, reps_fast: int, log) -> dict:
    d = out / "large-out"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    py = sys.executable
    n = make_large.param_count()
    g = gruconv_cmd()
    # Keep the last output of each route for the equality check.
    variants = {
        "convert_h5": (g + ["convert", str(big["h5"]), str(d / "h5.keras")],
                       {"before": rm(d / "h5.keras")}),
        "load_output": ([py, "-c", LOAD_OUTPUT, str(d / "h5.keras")], {}),
        "convert_h5_check_load": (g + ["convert", str(big["h5"]), str(d / "h5_checked.keras"), "--check-load"],
                                  {"before": rm(d / "h5_checked.keras")}),
        "convert_ckpt": (g + ["convert", str(big["ckpt"]), str(d / "ckpt.keras")],
                         {"before": rm(d / "ckpt.keras")}),
        "manual_tf_keras": ([py, "-c", MANUAL, str(big["h5"]), str(d / "manual.keras"), str(make_large.UNITS),
                             str(make_large.INPUT), str(make_large.LAYERS)], {"before": rm(d / "manual.keras")}),
    }
    log("large model: convert (h5, ckpt) and the manual route, interleaved")
    res = interleaved(variants, reps, log)
    log("large model: floors and baselines")
    fast = {
        "floor_h5": ([py, "-c", FLOOR_H5, str(big["h5"]), str(d / "floor.h5")], {"before": rm(d / "floor.h5")}),
        "floor_ckpt": ([py, "-c", FLOOR_CKPT, str(big["ckpt"]), str(d / "floor_ckpt.h5"), str(n)],
                       {"before": rm(d / "floor_ckpt.h5")}),
        "import_keras": ([py, "-c", "import keras"], {}),
        "python_only": ([py, "-c", "pass"], {}),
    }
    res.update(interleaved(fast, reps_fast, log))
    check = None
    try:
        if (d / "h5.keras").is_file() and (d / "manual.keras").is_file():
            a, b = arrays_in_keras_zip(d / "h5.keras"), arrays_in_keras_zip(d / "manual.keras")
            check = {"arrays": len(a), "identical": same_arrays(a, b)}
    except Exception as e:  # noqa: BLE001 - a report line, not a failure of the benchmark
        check = {"error": f"{type(e).__name__}: {e}"}
    sizes = {"h5": _size(big["h5"]), "ckpt": _size(big["ckpt"])}
    for k in ("h5.keras", "ckpt.keras", "manual.keras"):
        if (d / k).exists():
            sizes[k] = _size(d / k)
    shutil.rmtree(d, ignore_errors=True)
    return {"series": res, "param_count": n, "param_bytes": 4 * n, "sizes": sizes, "manual_check": check}


def section_batch(out: Path, n_models: int, reps: int, n_single: int, log) -> dict:
    root, items, nk, nt = batch_inputs(out, n_models)
    g = gruconv_cmd()
    res = {"n": len(items), "n_keras_sources": nk, "n_tf1_sources": nt,
           "n_h5": sum(1 for p in items if p.is_file()), "n_ckpt": sum(1 for p in items if p.is_dir())}
    variants = {}
    for jobs in (1, 2):
        od, rep = out / f"batch-out-j{jobs}", out / f"batch-report-j{jobs}.json"
        variants[f"jobs{jobs}"] = (g + ["convert", str(root), "--out-dir", str(od), "--jobs", str(jobs),
                                        "--keep-going", "--report", str(rep)],
                                   {"before": rm(od, rep), "ok_codes": (0, 3)})
    log(f"batch: {len(items)} models, --jobs 1 and --jobs 2, interleaved")
    runs = {k: [] for k in variants}
    broken = set()
    reports = {k: [] for k in variants}
    for i in range(reps):
        for name, (cmd, kw) in variants.items():
            if name in broken:
                continue
            r = run_once(cmd, **kw)
            rep_path = out / f"batch-report-{name.replace('jobs', 'j')}.json"
            rep = None
            try:
                rep = json.loads(rep_path.read_text())
            except (OSError, ValueError):
                if "error" not in r:
                    r["error"] = "no JSON report written (" + _reason(r["stderr"], r["rc"]) + ")"
            if rep is not None:
                reports[name].append(rep)
                ok = rep["summary"].get("ok", 0)
                if ok == 0 and "error" not in r:
                    r["error"] = "no input converted: " + _reason(r["stderr"], r["rc"])
            runs[name].append(r)
            log(f"  [{i + 1}/{reps}] {name}: {r['wall_s']:.2f} s"
                + (f", {rep['summary']}" if rep else "") + (f"  FAILED: {r['error']}" if "error" in r else ""))
            if "error" in r:
                broken.add(name)
    res["series"] = {k: series(k, v) for k, v in runs.items()}
    res["reports"] = {}
    for k, reps_k in reports.items():
        if not reps_k:
            continue
        last = reps_k[-1]
        res["reports"][k] = {
            "summary": last["summary"], "duration_s": [r["duration_s"] for r in reps_k],
            "sum_seconds": [sum(x["seconds"] for x in r["inputs"]) for r in reps_k],
            # --jobs 1 converts in the calling process: its first conversion pays the Keras import
            # (workers of --jobs N pay it in their initializer, outside the per-input times).
            "steady_sum_seconds": [sum(x["seconds"] for x in r["inputs"]) - (
                max(x["seconds"] for x in r["inputs"]) if r["jobs"] == 1 and r["inputs"] else 0.0)
                for r in reps_k],
            "steady_n": len(last["inputs"]) - (1 if last["jobs"] == 1 else 0),
            "failed": [f"{x['input']}: {x.get('error')}" for x in last["inputs"] if x["status"] == "failed"][:5],
        }
    for jobs in (1, 2):
        shutil.rmtree(out / f"batch-out-j{jobs}", ignore_errors=True)
    # One process per file, on every 5th input (a mixed sample), extrapolated to all.
    sample = items[:: max(1, len(items) // n_single)][:n_single]
    sd = out / "single-out"
    if sd.exists():
        shutil.rmtree(sd)
    sd.mkdir()
    log(f"batch: one `gruconv convert` process per file, {len(sample)} files")
    # The batch's planned output for each input: a .keras file, or a directory for a checkpoint
    # holding several stacks (`gruconv convert IN DIR` then writes one model per stack).
    planned = {}
    for reps_k in reports.values():
        for r in reps_k[-1:]:
            for x in r["inputs"]:
                if x.get("output"):
                    planned[str(Path(x["input"]).resolve())] = Path(x["output"]).suffix
    singles = []
    for i, p in enumerate(sample):
        dst = sd / f"{i:03d}{planned.get(str(p.resolve()), '.keras')}"
        r = run_once(g + ["convert", str(p), str(dst)], before=rm(dst))
        singles.append(r)
        if "error" in r:
            log(f"  {p.name}: FAILED {r['error']}")
            break
    shutil.rmtree(sd, ignore_errors=True)
    s = series("single", singles)
    if "error" not in s:
        s["mean_s"] = statistics.fmean(r["wall_s"] for r in singles)
    s["files"] = len(sample)
    res["single"] = s
    log(f"  per file: median {s.get('wall_s', float('nan')):.2f} s, mean {s.get('mean_s', float('nan')):.2f} s")
    return res


def verify_inputs(out: Path, n: int) -> Path:
    """``n`` copies of ``fixtures/keras/sequential.h5`` (issue 30's measurement: one architecture, as a CI
    job verifying many conversions of one model family sees)."""
    root = out / f"verify-batch-{n}"
    src = REPO / "fixtures" / "keras" / "sequential.h5"
    if not root.is_dir() or len(list(root.glob("*.h5"))) != n:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        for i in range(n):
            shutil.copyfile(src, root / f"m{i:03d}.h5")
    return root


def verify_commands(big: dict, out: Path, n: int) -> dict:
    """name -> (make(out_dir) -> command): the verify cases, shared by :func:`section_verify` and
    ``bench/compare.py``."""
    g = gruconv_cmd()
    small = REPO / "fixtures" / "keras" / "sequential.h5"
    root = verify_inputs(out, n)
    return {
        "verify big.h5": lambda o: g + ["verify", str(big["h5"]), "--reference", "oracle", "--device", "cpu"],
        "verify one small model": lambda o: g + ["verify", str(small), "--reference", "oracle"],
        "convert --verify one small model": lambda o: g + ["convert", str(small), str(o / "small.keras"), "--verify"],
        f"convert --verify batch of {n}, --jobs 2": lambda o: g + ["convert", str(root), "--out-dir",
                                                                  str(o / "vbatch"), "--verify", "--jobs", "2"],
    }


def section_verify(out: Path, big: dict, reps: int, log) -> dict:
    """Issue 30: ``gruconv verify`` of the large model (time, peak RSS) and of one small model, and
    ``convert --verify --jobs 2`` over :data:`VERIFY_COPIES` small models, interleaved with ``import keras``
    (the RSS baseline: verify runs the converted model in Keras, whose import alone is 3.5x the large
    model's parameter bytes here)."""
    d = out / "verify-out"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    cmds = verify_commands(big, out, VERIFY_COPIES)

    def fresh(o):
        return lambda: (shutil.rmtree(o, ignore_errors=True), o.mkdir())

    variants = {name: (make(d / "o"), {"before": fresh(d / "o")}) for name, make in cmds.items()}
    variants["import keras"] = ([sys.executable, "-c", "import keras"], {})
    log(f"verify: large, one small, batch of {VERIFY_COPIES} with --verify, interleaved")
    res = interleaved(variants, reps, log)
    shutil.rmtree(d, ignore_errors=True)
    return {"series": res, "n": VERIFY_COPIES, "param_bytes": 4 * make_large.param_count()}


def render_verify(v: Optional[dict], verdicts: list) -> list:
    """The "Verify" section of docs/benchmarks.md, and its verdict rows (appended to ``verdicts``)."""
    L = []
    w = L.append
    mib = 1024 * 1024
    if not v:
        verdicts.append((f"verify: >= {T_VERIFY_BATCH_RATE:.0f} models/s after start-up, --jobs 2",
                         "not measured: section did not run", None))
        return L
    S, n, pb = v["series"], v["n"], v["param_bytes"]
    big, base = S.get("verify big.h5", {}), S.get("import keras", {})
    batch, one = S.get(f"convert --verify batch of {n}, --jobs 2", {}), S.get("convert --verify one small model", {})
    if "error" in big:
        verdicts.append((f"verify big.h5 <= {T_VERIFY_LARGE_S:.0f} s", f"not measured: {big['error']}", None))
    else:
        verdicts.append((f"verify big.h5 on the CPU <= {T_VERIFY_LARGE_S:.0f} s",
                         f"**{big['wall_s']:.2f} s** = {big['wall_s'] / T_VERIFY_LARGE_S:.2f}x the goal",
                         big["wall_s"] <= T_VERIFY_LARGE_S))
        if big.get("rss_mib") and base.get("rss_mib"):
            r = (big["rss_mib"] - base["rss_mib"]) * mib / pb
            verdicts.append((f"verify big.h5: peak RSS above `import keras` <= {T_VERIFY_LARGE_RSS:.0f} x parameter bytes",
                             f"{big['rss_mib']:.0f} - {base['rss_mib']:.0f} MiB vs {pb / mib:.0f} MiB = **{r:.2f}x** "
                             f"(whole process {big['rss_mib'] * mib / pb:.2f}x)", r <= T_VERIFY_LARGE_RSS))
    rate = None
    if "error" not in batch and "error" not in one and batch.get("wall_s", 0) > one.get("wall_s", 0):
        rate = n / (batch["wall_s"] - one["wall_s"])
    verdicts.append((f"convert --verify: >= {T_VERIFY_BATCH_RATE:.0f} models/s after start-up, --jobs 2",
                     f"not measured: {batch.get('error') or one.get('error')}" if rate is None else
                     f"**{rate:.1f} models/s** = {rate / T_VERIFY_BATCH_RATE:.2f}x the goal",
                     None if rate is None else rate >= T_VERIFY_BATCH_RATE))
    w("## Verify")
    w("")
    w(f"`gruconv verify` of the large model (float64 oracle, CPU) and of `fixtures/keras/sequential.h5`, and "
      f"`gruconv convert DIR --out-dir OUT --verify --jobs 2` over {n} copies of that file (issue 30), "
      "interleaved with `python -c 'import keras'`, the RSS baseline of anything that runs a Keras model. "
      "Models/s after start-up: models ÷ (batch wall − one `convert --verify` of one small model).")
    w("")
    w("| Command | Median wall (s) | Runs (s) | Peak RSS (MiB) |")
    w("|---|---:|---|---:|")
    for name, s in S.items():
        if "error" in s:
            w(f"| {name} | not measured: {s['error'][:80]} | | |")
        else:
            w(f"| {name} | {s['wall_s']:.2f} | {_runs(s)} | {_f(s.get('rss_mib'), 0)} |")
    w("")
    return L


def section_inspect(out: Path, big: dict, reps: int, log) -> dict:
    g = gruconv_cmd()
    py = sys.executable
    log("inspect: CLI, in-process api.inspect, tf.train.list_variables, h5py listing")
    variants = {
        "cli_h5": (g + ["inspect", str(big["h5"])], {}),
        "cli_ckpt": (g + ["inspect", str(big["ckpt"])], {}),
        "inproc_h5": ([py, "-c", INSPECT_INPROC, str(big["h5"])], {}),
        "inproc_ckpt": ([py, "-c", INSPECT_INPROC, str(big["ckpt"])], {}),
        "tf_list_variables": ([py, "-c", TF_LIST, str(big["ckpt"])], {}),
        "h5py_listing": ([py, "-c", H5_LIST, str(big["h5"])], {}),
    }
    runs = {k: [] for k in variants}
    broken = set()
    for i in range(reps):
        for name, (cmd, kw) in variants.items():
            if name in broken or (name == "tf_list_variables" and i >= 3):
                continue
            r = run_once(cmd, **kw)
            if name.startswith("inproc") and "error" not in r:
                try:
                    r["inproc"] = json.loads(r["stdout"].strip().splitlines()[-1])
                except (ValueError, IndexError):
                    r["error"] = "no timing printed: " + _reason(r["stderr"], r["rc"])
            runs[name].append(r)
            if "error" in r:
                log(f"  {name}: FAILED {r['error']}")
                broken.add(name)
    res = {k: series(k, v) for k, v in runs.items()}
    for k in ("inproc_h5", "inproc_ckpt"):
        if "error" not in res[k]:
            for f in ("import_s", "first_s", "second_s"):
                vals = [r["inproc"][f] for r in runs[k]]
                res[k][f] = statistics.median(vals)
                res[k][f + "_runs"] = [round(v, 3) for v in vals]
    for k, v in res.items():
        log(f"  {k}: " + (f"{v['wall_s']:.3f} s" if "wall_s" in v else v.get("error", "")))
    return res


# --------------------------------------------------------------------------- report

def _f(x, nd=2, unit=""):
    return "n/a" if x is None else f"{x:.{nd}f}{unit}"


def _runs(s, nd=2):
    return " / ".join(f"{v:.{nd}f}" for v in s["runs"])


def _met(ok) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def _row_or_missing(s, cells_fn):
    if "error" in s:
        return None, f"not measured: {s['error']}"
    return cells_fn(s), None


def render(facts, load, large, batch, insp, total_s, quick, n_models, reps, verify=None, gonnx=None,
           gsaved=None, wide_=None) -> tuple:
    L = []
    w = L.append
    mib = 1024 * 1024
    verdicts = []  # (target, measured, ok)
    verify_lines = render_verify(verify, verdicts)
    verify_lines += graph_onnx.render(gonnx, verdicts)
    verify_lines += graph_savedmodel.render(gsaved, verdicts)
    verify_lines += wide.render(wide_, verdicts)

    # ---- large
    S = large["series"] if large else {}
    pb = large["param_bytes"] if large else None
    base = S.get("python_only", {})   # issue 20: peak RSS above a bare interpreter
    manual = S.get("manual_tf_keras", {})

    def rss_ratio(s):
        if "error" in s or "error" in base or s.get("rss_mib") is None or base.get("rss_mib") is None:
            return None
        return (s["rss_mib"] - base["rss_mib"]) * mib / pb

    def time_ratio(s):
        if "error" in s or "error" in manual:
            return None
        return s["wall_s"] / manual["wall_s"]

    for key, label in (("convert_h5", "HDF5"), ("convert_ckpt", "TF1 checkpoint")):
        s = S.get(key, {"error": "section did not run"})
        tr, rr = time_ratio(s), rss_ratio(s)
        if "error" in s:
            verdicts.append((f"large {label}: convert time <= {T_CONVERT_VS_MANUAL} x manual route",
                             f"not measured: {s['error']}", None))
            verdicts.append((f"large {label}: peak RSS above `python -c pass` <= {T_RSS_VS_PARAMS} x parameter bytes",
                             f"not measured: {s['error']}", None))
            continue
        for goal in (T_CONVERT_VS_MANUAL, T_CONVERT_VS_MANUAL_47):
            verdicts.append((f"large {label}: convert time <= {goal} x manual route",
                             "n/a (manual route not measured)" if tr is None else
                             f"{s['wall_s']:.2f} s vs {manual['wall_s']:.2f} s = **{tr:.2f}x**",
                             None if tr is None else tr <= goal))
        verdicts.append((f"large {label}: peak RSS above `python -c pass` <= {T_RSS_VS_PARAMS} x parameter bytes",
                         "n/a" if rr is None else
                         f"{s['rss_mib'] - base['rss_mib']:.0f} MiB vs {pb / mib:.0f} MiB = **{rr:.2f}x**",
                         None if rr is None else rr <= T_RSS_VS_PARAMS))

    vs = (verify or {}).get("series") or {}
    vbig, ch, imp = vs.get("verify big.h5"), S.get("convert_h5"), vs.get("import keras")
    if vbig and ch and "error" not in vbig and "error" not in ch:
        r = vbig["wall_s"] / ch["wall_s"]
        # verify runs the converted model in Keras, whose import convert never pays: shown beside the ratio
        less = (f"; less `import keras` ({imp['wall_s']:.2f} s, which convert never pays): "
                f"**{(vbig['wall_s'] - imp['wall_s']) / ch['wall_s']:.2f}x**") if imp and "error" not in imp else ""
        verdicts.append((f"verify big.h5 <= {T_VERIFY_VS_CONVERT} x convert big.h5 (whole process, wall)",
                         f"{vbig['wall_s']:.2f} s vs {ch['wall_s']:.2f} s = **{r:.2f}x**{less}",
                         r <= T_VERIFY_VS_CONVERT))
    ck, lo, ch = S.get("convert_h5_check_load"), S.get("load_output"), S.get("convert_h5")
    if ck and lo and ch and not any("error" in x for x in (ck, lo, ch)):
        extra = ck["wall_s"] - ch["wall_s"]
        verdicts.append((f"large HDF5: `--check-load` adds <= {T_CHECK_LOAD} x a plain `load_model` of the output",
                         f"{ck['wall_s']:.2f} s - {ch['wall_s']:.2f} s = {extra:.2f} s vs {lo['wall_s']:.2f} s "
                         f"= **{extra / lo['wall_s']:.2f}x**", extra <= T_CHECK_LOAD * lo["wall_s"]))

    # ---- batch
    bS = batch["series"] if batch else {}
    single = batch.get("single", {"error": "section did not run"}) if batch else {"error": "section did not run"}
    startup = single.get("wall_s") if "error" not in single else None
    nb = batch["n"] if batch else n_models

    def rates(s, name):
        if "error" in s:
            return None
        wall = s["wall_s"]
        r = {"overall": nb / wall}
        r["after_startup"] = nb / (wall - startup) if startup is not None and wall > startup else None
        rep = batch["reports"].get(name)
        if rep:
            jobs = int(name[-1])
            t = statistics.median(rep["steady_sum_seconds"])
            r["in_worker"] = rep["steady_n"] * jobs / t if t > 0 else None
        return r

    brates = {k: rates(v, k) for k, v in bS.items()}
    j2 = bS.get("jobs2", {"error": "section did not run"})
    if "error" in j2:
        verdicts.append((f"batch: >= {T_BATCH_RATE:.0f} models/s after start-up, --jobs 2",
                         f"not measured: {j2['error']}", None))
    else:
        r2 = brates["jobs2"]["after_startup"]
        iw = brates["jobs2"].get("in_worker")
        extra = "" if iw is None else f" ({iw:.1f} models/s from the JSON report's per-input times)"
        verdicts.append((f"batch: >= {T_BATCH_RATE:.0f} models/s after start-up, --jobs 2",
                         "n/a (start-up not measured)" if r2 is None else f"**{r2:.1f} models/s**{extra}",
                         None if r2 is None else r2 >= T_BATCH_RATE))

    if "error" in single:
        verdicts.append((f"one `gruconv convert` of a small model <= {T_SINGLE_S} s (whole process)",
                         f"not measured: {single['error']}", None))
    else:
        verdicts.append((f"one `gruconv convert` of a small model <= {T_SINGLE_S} s (whole process)",
                         f"median **{single['wall_s']:.2f} s** over {single['files']} files",
                         single["wall_s"] <= T_SINGLE_S))

    # ---- inspect
    for key, label in (("cli_h5", "HDF5"), ("cli_ckpt", "TF1 checkpoint")):
        s = insp.get(key, {"error": "section did not run"}) if insp else {"error": "section did not run"}
        ip = insp.get(key.replace("cli", "inproc"), {}) if insp else {}
        if "error" in s:
            verdicts.append((f"inspect {label} <= {T_INSPECT_S} s", f"not measured: {s['error']}", None))
            continue
        extra = f" (in-process call {ip['first_s']:.3f} s)" if "first_s" in ip else ""
        verdicts.append((f"inspect {label} <= {T_INSPECT_S} s (whole process)",
                         f"**{s['wall_s']:.3f} s**{extra}", s["wall_s"] <= T_INSPECT_S))

    # ---- write
    w("# Benchmarks")
    w("")
    w("Generated by `make bench` (`bench/run.py`); do not edit by hand — rerun it. "
      + ("**Quick run (1 repetition, fewer models): figures are indicative only.** " if quick else "")
      + f"Every figure is the median of several runs ({reps} for the large conversions and the batch "
        "runs, more for the fast ones; all runs are listed), each run a fresh process; the variants being "
        "compared were interleaved (A B C, A B C, ...) in one `make bench` run on one machine. "
        "Wall time is measured by the parent around the whole process (start-up included); peak RSS is "
        "the child's `ru_maxrss` from `os.wait4` (covers worker processes it waited for).")
    w("")
    w("## Machine")
    w("")
    w(f"- {facts['date']}; {facts['cpu']}, {facts['cores']} cores, {facts['ram_gib']} GiB RAM; {facts['os']}")
    w(f"- Python {facts['python']}; TensorFlow {facts['tensorflow']}, tf_keras {facts['tf_keras']}, "
      f"Keras {facts['keras']}, NumPy {facts['numpy']}, h5py {facts['h5py']}; gruconv {facts['gruconv']} "
      f"at commit `{facts['commit']}`"
      + (f" with uncommitted changes in {', '.join('`' + p + '`' for p in facts['src_uncommitted'])}"
         if facts["src_uncommitted"] else ""))
    # The load average is reported as the number it is; what caused it is not known here (issue 20).
    w(f"- Load average (1/5/15 min) at start {'/'.join(f'{x:.2f}' for x in load['start'])}, "
      f"at end {'/'.join(f'{x:.2f}' for x in load['end'])}. Absolute times vary from run to run on this "
      "machine; the ratios come from interleaved runs.")
    if facts.get("bytecode_written"):
        w("- Bytecode: measured processes write and reuse gruconv's `.pyc` files (`__pycache__`, "
          "`PYTHONDONTWRITEBYTECODE` unset for them), as an installed package has them. The shell running "
          "this had `PYTHONDONTWRITEBYTECODE="
          f"{facts.get('dont_write_bytecode') or '(unset)'}`; runs before session 26 inherited it and every "
          "measured process compiled gruconv's sources again (~0.15 s of each start-up), so their start-up "
          "figures are not comparable with these.")
    cached = bool(large) and not large.get("generated")
    w(f"- Whole `bench/run.py` run: {total_s / 60:.1f} min"
      + ((" (the large inputs were cached from an earlier run"
          + (f"; building them takes {large['build_s']:.0f} s more" if large.get("build_s") else "") + ")")
         if cached else " (building the large inputs included)") + ".")
    w("")
    w("## Targets")
    w("")
    w("| Target | Measured | Verdict |")
    w("|---|---|---|")
    for t, m, ok in verdicts:
        w(f"| {t} | {m} | {_met(ok)} |")
    w("")

    # large table
    w("## Large model")
    w("")
    if large:
        sz = large["sizes"]
        w(f"Input: `Input((None, {make_large.INPUT}))` → 3 × `Bidirectional(CuDNNGRU({make_large.UNITS}, "
          f"return_sequences=True))`, {large['param_count']:,} parameters = {pb / mib:.1f} MiB float32, "
          "seeded random weights (`bench/make_large.py`). "
          f"`big.h5`: {sz['h5'] / mib:.1f} MiB, written by tf_keras's legacy HDF5 writer. "
          f"`big_ckpt/`: {sz['ckpt'] / mib:.1f} MiB, a TF 1.5+ `CudnnGRU` layer checkpoint for the same "
          "stack shape (opaque buffer + canonical tensors under TF1 names, `tf.raw_ops.SaveV2`, names and "
          "packing from `fixtures/make_tf1_fixtures.py`) — both forms, so twice the parameter bytes.")
        w("")
        w("| Route | Median wall (s) | Runs (s) | Peak RSS (MiB) | RSS above `python -c pass` (MiB) | "
          "÷ param bytes | Time ÷ manual |")
        w("|---|---:|---|---:|---:|---:|---:|")
        labels = {
            "convert_h5": "`gruconv convert big.h5 out.keras`",
            "convert_h5_check_load": "`gruconv convert big.h5 out.keras --check-load`",
            "load_output": "plain `keras.saving.load_model` of the converted `out.keras` (`import keras` included)",
            "convert_ckpt": "`gruconv convert big_ckpt out.keras`",
            "manual_tf_keras": "manual: tf_keras GRU model by hand + h5py + per-gate transform + set_weights + save",
            "floor_h5": "floor: h5py read all datasets + write them to a new .h5",
            "floor_ckpt": "floor: NumPy read of the checkpoint data file + h5py write of the parameters",
            "import_keras": "baseline: `python -c 'import keras'`",
            "python_only": "`python -c pass`",
        }
        for k, label in labels.items():
            s = S.get(k)
            if s is None:
                continue
            if "error" in s:
                w(f"| {label} | not measured: {s['error']} | | | | | |")
                continue
            tr = time_ratio(s)
            above = None if base.get("rss_mib") is None or s.get("rss_mib") is None else s["rss_mib"] - base["rss_mib"]
            above_txt = _f(above, 0)
            rr_txt = _f(None if above is None else above * mib / pb, 2, "×")
            if k in ("import_keras", "python_only"):
                above_txt = rr_txt = ""
            w(f"| {label} | {s['wall_s']:.2f} | {_runs(s)} | {_f(s.get('rss_mib'), 0)} | {above_txt} | {rr_txt} | "
              f"{'' if tr is None or k in ('import_keras', 'python_only') else f'{tr:.2f}×'} |")
        w("")
        w("Since issue 20 `gruconv convert` streams: no Keras, TensorFlow, JAX or torch is imported "
          "(`docs/streaming.md`); `--check-load` adds a plain `keras.saving.load_model` of the output and a "
          "digest comparison of every weight. RSS is compared with a bare interpreter (`python -c pass`) for "
          "every route.")
        w("")
        mc = large.get("manual_check")
        if mc and "identical" in mc:
            w(f"The manual route's saved weights and the streamed `gruconv convert big.h5`'s were compared array by array: "
              f"{mc['arrays']} arrays, {'bit-identical' if mc['identical'] else '**NOT identical**'} "
              "(so both routes did the same work).")
        elif mc:
            w(f"Weight comparison of the manual route and gruconv: could not run ({mc.get('error')}).")
        w("")
        w("The manual route is the one a Keras 2 user would take (Keras 2's loader cannot put a CuDNNGRU "
          "HDF5 file into a `GRU` model through `load_weights` when the layer classes differ in a "
          "hand-built model): import tf_keras, build `Bidirectional(GRU(1024, reset_after=True, "
          "recurrent_activation='sigmoid', return_sequences=True))` × 3, read the HDF5 file with h5py, "
          "transform each gate as Keras 2's `_convert_rnn_weights` does, `set_weights`, `model.save(...keras)`.")
        w("")
    else:
        w("not measured: section did not run")
        w("")

    # batch table
    w("## Batch")
    w("")
    if batch:
        w(f"{nb} small models ({batch['n_h5']} Keras HDF5 files, {batch['n_ckpt']} TF1 checkpoint directories): "
          f"renamed copies of the {batch['n_keras_sources']} Keras and {batch['n_tf1_sources']} TF1 fixtures that "
          "convert without options (`fixtures/keras/*.h5` except `weights_only.h5` and `plain_gru.h5`; "
          "`fixtures/tf1/*` except the three opaque-only ones that need shape hints), spread over nested "
          "subdirectories (`teamN/runM/{h5,ckpts}/`). One call: "
          "`gruconv convert batch-in --out-dir OUT --jobs N --keep-going --report r.json`.")
        w("")
        w("| Route | Median wall (s) | Runs (s) | Peak RSS, largest process (MiB) | Models/s overall | "
          "Models/s after start-up | Models/s inside workers |")
        w("|---|---:|---|---:|---:|---:|---:|")
        for k, label in (("jobs1", "one call, `--jobs 1`"), ("jobs2", "one call, `--jobs 2`")):
            s = bS.get(k)
            if s is None:
                continue
            if "error" in s:
                w(f"| {label} | not measured: {s['error']} | | | | | |")
                continue
            r = brates[k]
            w(f"| {label} | {s['wall_s']:.2f} | {_runs(s)} | {_f(s.get('rss_mib'), 0)} | {r['overall']:.1f} | "
              f"{_f(r['after_startup'], 1)} | {_f(r.get('in_worker'), 1)} |")
        if "error" in single:
            w(f"| one process per file | not measured: {single['error']} | | | | | |")
        else:
            total = single["mean_s"] * nb
            w(f"| one `gruconv convert IN OUT` process per file (timed on {single['files']} files, "
              f"extrapolated to {nb}) | {total:.1f} (est.) | per file: median {single['wall_s']:.2f}, "
              f"mean {single['mean_s']:.2f} | {_f(single.get('rss_mib'), 0)} | {nb / total:.2f} | | |")
        w("")
        if startup is not None:
            w(f"*Start-up* = the median wall time of one `gruconv convert IN OUT` process on one small model "
              f"({startup:.2f} s: interpreter, gruconv's imports (NumPy, h5py, Click: no Keras since issue 20), one "
              "conversion, exit). "
              "*Models/s after start-up* = models ÷ (batch wall time − start-up). "
              "*Inside workers* = models × jobs ÷ the sum of the per-input times in the batch's JSON "
              "report (the steady-state rate; for `--jobs 1` the first conversion, which pays the calling "
              "process's first imports, is left out). "
              "The one-process-per-file total is extrapolated: the mean wall time of "
              f"{single['files']} single-file runs (every {max(1, nb // single['files'])}th input, mixed formats) "
              f"× {nb}.")
        r1, r2 = brates.get("jobs1") or {}, brates.get("jobs2") or {}
        if r1.get("in_worker") and r2.get("in_worker") and r2["in_worker"] < 1.3 * r1["in_worker"]:
            w("")
            w(f"`--jobs 2` converted no faster inside its workers than `--jobs 1` "
              f"({r2['in_worker']:.1f} vs {r1['in_worker']:.1f} models/s): each of its two workers ran at about "
              f"half speed (load average {'/'.join(f'{x:.2f}' for x in load['start'])} at the start of the run).")
        for k, rep in batch.get("reports", {}).items():
            sm = rep["summary"]
            note = f"`{k}` report (last run): " + ", ".join(f"{n} {c}" for c, n in sm.items() if n)
            if rep["failed"]:
                note += "; failures: " + "; ".join(rep["failed"])
            w("")
            w(note + ".")
        w("")
    else:
        w("not measured: section did not run")
        w("")

    # inspect table
    w("## Inspect latency")
    w("")
    if insp:
        w("| Command | Median wall (s) | Runs (s) | Peak RSS (MiB) |")
        w("|---|---:|---|---:|")
        labels = {
            "cli_h5": "`gruconv inspect big.h5` (whole process)",
            "cli_ckpt": "`gruconv inspect big_ckpt` (whole process)",
            "inproc_h5": "in-process `gruconv.api.inspect('big.h5')` script: whole process (import + 2 calls)",
            "inproc_ckpt": "in-process `gruconv.api.inspect('big_ckpt')` script: whole process (import + 2 calls)",
            "tf_list_variables": "`python -c \"import tensorflow as tf; tf.train.list_variables(ckpt)\"`",
            "h5py_listing": "`python -c` h5py: open big.h5, list every dataset (shape, dtype)",
        }
        for k, label in labels.items():
            s = insp.get(k)
            if s is None:
                continue
            if "error" in s:
                w(f"| {label} | not measured: {s['error']} | | |")
                continue
            w(f"| {label} | {s['wall_s']:.3f} | {_runs(s, 3)} | {_f(s.get('rss_mib'), 0)} |")
        w("")
        for k, label in (("inproc_h5", "big.h5"), ("inproc_ckpt", "big_ckpt")):
            s = insp.get(k, {})
            if "first_s" in s:
                w(f"- `gruconv.api.inspect('{label}')` in a fresh process: `import gruconv.api` "
                  f"{s['import_s']:.3f} s, first call **{s['first_s']:.3f} s** "
                  f"(runs {' / '.join(f'{v:.3f}' for v in s['first_s_runs'])}), second call in the same process "
                  f"{s['second_s']:.3f} s.")
        w("")
        w("All inputs were just written, so they were in the page cache (warm-cache latency).")
        w("")
    else:
        w("not measured: section did not run")
        w("")
    cmp_path = OUT / "compare.json"  # bench/compare.py's before / after runs, when made
    if cmp_path.is_file():
        try:
            import compare

            L.extend(compare.render_section(json.loads(cmp_path.read_text())))
        except (ImportError, OSError, ValueError, KeyError, TypeError) as e:
            w(f"(bench-out/compare.json could not be rendered: {type(e).__name__}: {e})")
            w("")
    L.extend(verify_lines)
    profiles = REPO / "bench" / "profiles.md"  # measured by hand (cProfile, importtime): kept across reruns
    if profiles.is_file():
        L.extend(profiles.read_text(encoding="utf-8").rstrip("\n").splitlines())
        w("")
    w("## Reproduce")
    w("")
    w("```")
    w("make bench                      # = .venv/bin/python bench/run.py; writes docs/benchmarks.md")
    w(".venv/bin/python bench/run.py --quick   # 1 repetition, 20 models -> bench-out/benchmarks-quick.md")
    w(".venv/bin/python bench/run.py --render-only   # rewrite this page from bench-out/results.json")
    w(".venv/bin/python bench/compare.py   # before / after (base: git merge-base HEAD main), interleaved -> bench-out/compare.json, then this page")
    w("```")
    w("")
    w("Inputs and outputs live in `bench-out/` (git-ignored; the large inputs are cached there between runs, "
      "`--regen` rebuilds them); `bench-out/results.json` holds every run's raw figures.")
    return "\n".join(L) + "\n", verdicts


# --------------------------------------------------------------------------- main

#: The sections, in the order they run (``--only`` picks some).
SECTIONS = ("large", "batch", "inspect", "verify", "graph-onnx", "graph-savedmodel", "wide")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 repetition, 20 batch models; doc into bench-out/")
    ap.add_argument("--regen", action="store_true", help="rebuild the large inputs even if cached")
    ap.add_argument("--render-only", action="store_true",
                    help="measure nothing: rewrite docs/benchmarks.md from bench-out/results.json")
    ap.add_argument("--only", choices=SECTIONS, action="append",
                    help="run only these sections (repeatable); the doc then goes into bench-out/")
    args = ap.parse_args(argv)
    if args.render_only:
        raw = json.loads((OUT / "results.json").read_text())  # the last full run's
        doc, verdicts = render(raw["facts"], raw["load"], raw["large"], raw["batch"], raw["inspect"],
                               raw["total_s"], raw.get("quick", False), raw.get("n_models", 100), raw.get("reps", 3),
                               raw.get("verify"), raw.get("graph_onnx"), raw.get("graph_savedmodel"),
                               raw.get("wide"))
        target = OUT / "benchmarks-quick.md" if raw.get("partial") else DOC
        target.write_text(doc, encoding="utf-8")
        print(f"wrote {target.relative_to(REPO)} from bench-out/results.json")
        return 0
    t_start = time.perf_counter()
    load_start = os.getloadavg()
    OUT.mkdir(exist_ok=True)

    def log(msg):
        print(f"[{time.perf_counter() - t_start:6.1f}s] {msg}", flush=True)

    reps = 1 if args.quick else 3
    reps_fast = 1 if args.quick else 5
    n_models = 20 if args.quick else 100
    n_single = 5 if args.quick else 20
    sections = set(args.only or SECTIONS)
    facts = machine_facts()
    log(f"machine: {facts['cpu']}, {facts['cores']} cores, load {load_start}")

    # the large model (~47 M params, a minute or more to build on a fresh clone) only for the sections using it
    big = large_inputs(OUT, args.regen, log) if sections & {"large", "inspect", "verify"} else None
    # Warm-up (untimed): shared libraries and bytecode into the page cache.
    fx = REPO / "fixtures" / "keras" / "sequential.h5"
    warm = OUT / "warmup.keras"
    w = run_once(gruconv_cmd() + ["convert", str(fx), str(warm)], before=rm(warm))
    rm(warm)()
    log(f"warm-up convert: {w['wall_s']:.2f} s" + (f" FAILED: {w['error']}" if "error" in w else ""))
    # ... and the bytecode of what inspect and batch mode import
    warm_dir = OUT / "warmup-batch"
    run_once(gruconv_cmd() + ["inspect", str(fx)])
    run_once(gruconv_cmd() + ["convert", str(fx.parent / "bidir_concat.h5"), "--out-dir", str(warm_dir),
                              "--jobs", "2"], before=rm(warm_dir))
    rm(warm_dir)()

    large = batch = insp = ver = gonnx = gsaved = wd = None
    if "large" in sections:
        large = section_large(OUT, big, reps, reps_fast, log)
        large["generated"] = big["generated"]
        large["build_s"] = big.get("build_s")
    if "batch" in sections:
        batch = section_batch(OUT, n_models, reps, n_single, log)
    if "inspect" in sections:
        insp = section_inspect(OUT, big, 1 if args.quick else 5, log)
    if "verify" in sections:
        ver = section_verify(OUT, big, reps, log)
    if "graph-onnx" in sections:
        gonnx = graph_onnx.section(sys.modules[__name__], OUT, reps, log)
    if "graph-savedmodel" in sections:
        gsaved = graph_savedmodel.section(sys.modules[__name__], OUT, reps, log)
    if "wide" in sections:
        wd = wide.section(sys.modules[__name__], OUT, reps, log)
    load_end = os.getloadavg()
    total = time.perf_counter() - t_start
    load = {"start": load_start, "end": load_end}
    doc, verdicts = render(facts, load, large, batch, insp, total, args.quick, n_models, reps, ver, gonnx, gsaved,
                           wd)
    partial = args.quick or args.only
    target = OUT / "benchmarks-quick.md" if partial else DOC
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(doc, encoding="utf-8")
    os.replace(tmp, target)
    raw = {"facts": facts, "load": load, "large": large, "batch": batch, "inspect": insp, "verify": ver,
           "graph_onnx": gonnx, "graph_savedmodel": gsaved, "wide": wd, "total_s": total,
           "quick": args.quick, "n_models": n_models, "reps": reps, "partial": bool(partial)}
    results = OUT / ("results-quick.json" if partial else "results.json")
    results.write_text(json.dumps(raw, indent=1, default=str))
    log(f"wrote {target.relative_to(REPO)} and {results.relative_to(REPO)} in {total / 60:.1f} min")
    print()
    for t, m, ok in verdicts:
        print(f"  {_met(ok).strip('*'):>10}  {t}: {m.replace('**', '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
