#!/usr/bin/env python3
"""Compatibility matrix: do gruconv's ``.keras`` outputs load and compute the same numbers
on other Keras 3 releases and backends?

Run with the project venv (``make compat`` = ``$(PY) scripts/compat.py``; the venv that runs the script
is the project's).  Steps (each also a subcommand; ``all``, the default, runs build, convert, reference,
original, check and report in that order):

``build``      one virtual environment per (Keras version, backend) of the matrix (:func:`matrix`:
               :data:`KERAS_VERSIONS` x :data:`BACKENDS`, and Keras 3.4-3.7 with one backend each,
               :data:`ONE_BACKEND`) under ``.compat/envs/`` (git-ignored): ``keras==X`` plus a CPU
               backend.  TensorFlow: the project's own TensorFlow, reused through a ``.pth`` file naming
               the project venv's site-packages (the env's own site-packages comes first on ``sys.path``,
               so its ``keras==X`` wins); JAX: ``jax`` + ``jaxlib`` of the Keras release's era
               (:data:`JAX_FOR`); torch: the CPU-only wheel (``torch==2.13.0+cpu``, from pip's
               find-links here) installed once into ``.compat/_torch`` and shared through a ``.pth`` file.
               Built once: an env whose stamp records the same spec (:func:`env_spec`) is reused as it is.
``convert``    every fixture with something to convert (:func:`conversions`: fixtures/keras, keras_lstm,
               keras_user, trained, tf1, tf1_lstm, tf2, and the later kinds of :data:`LATER`: Keras 2 /
               tf.keras dialects, the legacy writers' files, float16 weights, tf_keras ``.keras`` zips, TF
               2.4 SavedModels, TensorFlow graphs holding cuDNN ops and the golden graphs) ->
               ``.compat/out/raw/*.keras``, and the Keras-graph ones -> ``.compat/out/weights/*.weights.h5``,
               all in ONE process (the CLI in-process, this checkout's ``src/``; ``convert.json`` records
               failures, outputs with custom layers, and any conversion the streaming writer refused so
               that Keras wrote it).
``portable``   (not in ``all``) each raw output through ``gruconv.keras3.portable.rewrite_keras_zip`` ->
               ``.compat/out/portable/``.  The streaming writer already applies ``portable_config``,
               so this only documents the function's settings now.
``reference``  fixed random inputs per model and the outputs of the newest Keras on TensorFlow
               (the project venv) -> ``.compat/ref/``.  The reference is always computed from the
               raw outputs when they exist (the same weights), else from the tested directory.
``original``   tf_keras's own outputs of each original legacy HDF5 model (an independent reference).
``check``      ONE process per env (``--jobs N``: N envs at a time): every model of every tested
               directory loaded once there with plain ``keras.saving.load_model(path)`` (default
               arguments, safe mode), run on the inputs, compared with the reference (max abs <= 1e-5;
               4e-3 for float16 models); a ``weights`` directory: ``keras.models.model_from_json`` of
               the ``.keras``'s config + ``load_weights(x.weights.h5)``.  In a TensorFlow env the same
               process then runs ``probe`` (every serialized object of every raw output deserialized
               alone: the keys each release rejects) and ``vocab`` (the same for every class the
               streaming writer can write, ``gruconv.keras3.defaults``).
``probe``, ``vocab``  those two alone (not in ``all``).
``report``     ``docs/compatibility.md``: one matrix per tested directory, the run's time per step.
               A reduced run (``--quick``, ``--limit``, ``--only``, ``--versions``, ``--backends``,
               ``--models``) writes ``.compat/compatibility.reduced.md`` instead.

``--quick``: two fixtures of each family in three envs (:data:`QUICK_ENVS`), every step.  Rerun after a
gruconv change: ``make compat`` (rebuilds the outputs, reuses the envs), or test any directory of
``.keras`` files: ``python scripts/compat.py check report --models DIR``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The project venv: the one running this script (``make compat`` runs it with ``$(PY)``, ``make
#: VENV=...`` included), else ``.venv``.
PROJECT_VENV = Path(sys.prefix) if sys.prefix != sys.base_prefix else ROOT / ".venv"
PROJECT_PY = PROJECT_VENV / "bin" / "python"
WORK = ROOT / ".compat"
ENVS = WORK / "envs"
TORCH_BASE = WORK / "_torch"
OUT = WORK / "out"
REF = WORK / "ref"
RESULTS = WORK / "results"
DOC = ROOT / "docs" / "compatibility.md"
NOTES_MARKER = "<!-- notes: everything below is kept when scripts/compat.py rewrites this file -->"

# Keras releases tested: every minor release from the contract's floor (3.8) to the newest (3.9.2,
# 3.11.3 and 3.13.2, at their latest patch, added 2026-11-27: 3.13 added `quantization_config`, 3.14
# BatchNormalization's renorm keys).  3.3 is a floor probe (below the contract's 3.8); 3.14 is the last
# release before the one the project venv has (3.15 writes keys 3.14 does not know).
KERAS_VERSIONS = ["3.3.3", "3.8.0", "3.9.2", "3.10.0", "3.11.3", "3.12.0", "3.13.2", "3.14.0", "3.15.1"]
BACKENDS = ["tensorflow", "jax", "torch"]
# Keras 3.4-3.7 (issue 47 item 2), one backend each so that every backend meets the releases between the
# floor probe and the contract's floor at least once without adding 12 envs to a 2-core run: each is the
# release's last patch.  TensorFlow is the project venv's (as for every TensorFlow env), JAX the release
# Keras's own CI pinned in those months (requirements-jax-cuda.txt: jax 0.4.28), torch the shared CPU wheel.
ONE_BACKEND = [("3.4.1", "jax"), ("3.5.0", "torch"), ("3.6.0", "tensorflow"), ("3.7.0", "tensorflow")]
# JAX of each Keras release's era (a newer jax may drop APIs an old Keras uses).
JAX_FOR = {"3.3": "0.4.26", "3.4": "0.4.28", "3.5": "0.4.28", "3.6": "0.4.28", "3.7": "0.4.28",
           "3.8": "0.4.38", "3.9": "0.5.3", "3.10": "0.6.2", "3.11": "0.7.0", "3.12": "0.7.2",
           "3.13": "0.8.1", "3.14": "0.9.0"}
JAX_DEFAULT = "0.10.2"
TORCH_SPEC = "torch==2.13.0+cpu"
TOL = 1e-5
TOL_F16 = 4e-3  # gruconv.verify.FLOAT16_TOLERANCE_FLOOR

# Fixture -> conversions.  (output name, input, extra args)
KERAS_SKIP = {"plain_gru.h5"}  # nothing to convert (gruconv exits 0, writes nothing)
#: Weights-only HDF5 files and the architecture JSON(s) each needs for a .keras (fixture dir, file):
#: [configs].  tf2/generic_*.h5 have generic names and no architecture at all: not converted.
WEIGHTS_ONLY = {
    ("keras", "weights_only.h5"): ["weights_only.json", "weights_only.new_style.json"],
    ("keras_lstm", "weights_only.h5"): ["weights_only.json"],
    ("keras_user", "json_config_weights.h5"): ["json_config.json"],
    ("trained", "gru2_weights.h5"): ["gru2.json"],
    ("trained", "lstm2_weights.h5"): ["lstm2.json"],
    ("trained", "bilstm_weights.h5"): ["bilstm.json"],
}
H5_DIRS = ["keras", "keras_lstm", "keras_user", "trained"]  # legacy Keras HDF5 fixtures
TF1_DIRS = ["tf1", "tf1_lstm"]
# (The "disagree" checkpoints, canonical tensors and opaque buffer in another layout, convert from the
# canonical tensors with a one-line warning; until 2026-11-26 gruconv refused the GRU one.)
TF1_SKIP: set = set()
TF1_ARGS = {
    ("tf1", "tf14_opaque_only"): ["--variable", "encoder/cudnn_params", "--num-units", "7", "--input-size", "5",
                                  "--num-layers", "1", "--direction", "uni"],
    ("tf1", "opaque_only_skip_uni"): ["--input-mode", "skip"],
    ("tf1", "opaque_only_skip_bidir"): ["--input-mode", "skip", "--direction", "bi"],
    # shapes from fixtures/tf1_lstm/manifest.json
    ("tf1_lstm", "tf14_opaque_only"): ["--variable", "decoder/lstm_params", "--cell", "lstm", "--num-units", "7",
                                       "--input-size", "5", "--num-layers", "1", "--direction", "uni"],
    ("tf1_lstm", "opaque_only_skip_uni"): ["--input-mode", "skip", "--num-units", "6", "--input-size", "6",
                                           "--num-layers", "2", "--direction", "uni"],
    ("tf1_lstm", "opaque_only_skip_bidir"): ["--input-mode", "skip", "--direction", "bi", "--num-units", "8",
                                             "--input-size", "8", "--num-layers", "1"],
}
#: Checkpoints holding several stacks: one conversion per scope.
TF1_SCOPES = {("tf1", "multi_stack"): ["encoder/cudnn_gru", "decoder/cudnn_gru"],
              ("tf1_lstm", "canonical_only_stacked"): ["cudnn_lstm", "cudnn_lstm_1"]}
EXTRA = [  # option variants worth a column of their own
    ("tf1_layer_bidir_states.keras", "fixtures/tf1/layer_bidir", ["--initial-state", "--return-state"]),
    ("tf1_layer_varlen_mask.keras", "fixtures/tf1/layer_varlen",
     ["--mask-input", "--initial-state", "--return-state"]),
]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd, env=None, check=True, timeout=None, capture=False):
    log("$", " ".join(str(c) for c in cmd))
    return subprocess.run([str(c) for c in cmd], env=env, check=check, timeout=timeout,
                          text=True, capture_output=capture)


# ----------------------------------------------------------------------------------------- build

def env_name(version: str, backend: str) -> str:
    return f"keras{version}-{backend}"


def project_site() -> Path:
    out = subprocess.run([str(PROJECT_PY), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, text=True, capture_output=True).stdout.strip()
    return Path(out)


def base_python() -> str:
    """The interpreter the project venv was made from (the TF .pth trick needs the same Python)."""
    cfg = (PROJECT_VENV / "pyvenv.cfg").read_text()
    for line in cfg.splitlines():
        if line.startswith("executable"):
            return line.split("=", 1)[1].strip()
    return sys.executable


def build_torch_base():
    stamp = TORCH_BASE / ".stamp"
    if stamp.exists():
        return
    if TORCH_BASE.exists():
        shutil.rmtree(TORCH_BASE)
    # The CPU wheel: no nvidia-* dependencies.  Its pure dependencies come with it.
    run([PROJECT_PY, "-m", "pip", "install", "--quiet", "--target", TORCH_BASE, TORCH_SPEC])
    # numpy from the target would shadow the env's own: keep torch's tree torch-only.
    for p in TORCH_BASE.glob("numpy*"):
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    stamp.touch()


def env_python(name: str) -> Path:
    return ENVS / name / "bin" / "python"


def env_spec(version: str, backend: str) -> dict:
    """What an env is built from; an env whose stamp records the same spec is reused as it is (built
    once: ``make compat`` after the first run pays no install), one whose spec changed is rebuilt."""
    spec = {"keras": version, "backend": backend, "python": base_python()}
    if backend == "tensorflow":
        spec["site"] = str(project_site())
    elif backend == "jax":
        spec["jax"] = JAX_FOR.get(".".join(version.split(".")[:2]), JAX_DEFAULT)
    else:
        spec["torch"] = TORCH_SPEC
    return spec


def build_env(version: str, backend: str) -> dict:
    name = env_name(version, backend)
    d = ENVS / name
    stamp = d / ".compat-stamp"
    spec = env_spec(version, backend)
    if stamp.exists():
        info = json.loads(stamp.read_text())
        if info.get("spec") == spec:
            return dict(info, reused=True)
    if d.exists():
        shutil.rmtree(d)
    run([base_python(), "-m", "venv", d])
    py = env_python(name)
    pip = [py, "-m", "pip", "install", "--quiet"]
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, text=True, capture_output=True).stdout.strip())
    if backend == "tensorflow":
        # Reuse the project's TensorFlow (and keras's dependencies, all present there); only
        # keras==X goes into the env, ahead of the project's keras on sys.path.
        run(pip + ["--no-deps", f"keras=={version}"])  # before the .pth: pip must not see the project's
        (site / "zz_project_venv.pth").write_text(str(project_site()) + "\n")
    elif backend == "jax":
        jv = spec["jax"]
        # packaging: Keras 3.3 imports it without declaring it
        run(pip + [f"keras=={version}", f"jax=={jv}", f"jaxlib=={jv}", "packaging"])
    elif backend == "torch":
        build_torch_base()
        run(pip + [f"keras=={version}", "packaging"])
        (site / "zz_torch_base.pth").write_text(str(TORCH_BASE) + "\n")
    else:
        raise SystemExit(f"unknown backend {backend}")
    smoke = ("import os, keras, numpy as np;"
             "y = keras.layers.GRU(2)(np.ones((1, 3, 4), 'float32'));"
             "import importlib; b = keras.backend.backend();"
             "m = importlib.import_module({'tensorflow': 'tensorflow', 'jax': 'jax', 'torch': 'torch'}[b]);"
             "import json; print(json.dumps({'keras': keras.__version__, 'backend': b,"
             "'backend_version': m.__version__, 'numpy': np.__version__, 'keras_file': keras.__file__}))")
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    r = subprocess.run([str(py), "-c", smoke], env=env, text=True, capture_output=True)
    if r.returncode != 0:
        info = {"name": name, "ok": False, "error": (r.stderr.strip().splitlines() or ["?"])[-1]}
        log(f"env {name}: smoke test failed: {info['error']}")
        (d / ".compat-failed").write_text(json.dumps(info))
        return info
    info = dict(json.loads(r.stdout.strip().splitlines()[-1]), name=name, ok=True, spec=spec)
    if info["keras"] != version:
        info = {"name": name, "ok": False, "error": f"keras {info['keras']} imported, not {version}"}
        (d / ".compat-failed").write_text(json.dumps(info))
        return info
    stamp.write_text(json.dumps(info))
    log(f"env {name}: {info}")
    return info


def _version_key(v: str) -> list:
    return [int(x) for x in v.split(".")]


def matrix(args) -> list:
    """(Keras version, backend) of every env of this run, in report order: :data:`KERAS_VERSIONS` x
    :data:`BACKENDS` and :data:`ONE_BACKEND`, filtered by ``--versions``/``--backends``/``--only``."""
    full = [(v, b) for v in KERAS_VERSIONS for b in BACKENDS] + ONE_BACKEND
    full.sort(key=lambda e: (_version_key(e[0]), BACKENDS.index(e[1])))
    out = [e for e in full if (not args.versions or e[0] in args.versions)
           and (not args.backends or e[1] in args.backends)]
    if args.only:
        out = [e for e in out if env_name(*e) in args.only]
    return out


def cmd_build(args):
    ENVS.mkdir(parents=True, exist_ok=True)
    infos = []
    for v, b in matrix(args):
        t = time.time()
        try:
            info = build_env(v, b)
        except subprocess.CalledProcessError as e:
            info = {"name": env_name(v, b), "ok": False, "error": f"build failed: {e}"}
        info["build_s"] = round(time.time() - t, 1)
        infos.append(info)
    (WORK / "envs.json").write_text(json.dumps(infos, indent=1))



# --------------------------------------------------------------------------------------- convert

def conversions():
    """(output name, input path, extra args) for every fixture with something to convert: the legacy
    Keras HDF5 fixtures (weights-only ones with their architecture JSON), the TF1 checkpoints (GRU and
    LSTM, with the shape hints those without a stored shape need), the trained models' TF1 checkpoints,
    and the TF2 checkpoints / SavedModels with the ``model.json`` written beside them."""
    fx = ROOT / "fixtures"
    jobs = []
    for dname in H5_DIRS:
        prefix = "keras" if dname == "keras" else dname
        for f in sorted([*(fx / dname).glob("*.h5"), *(fx / dname).glob("*.hdf5")]):
            if dname == "keras" and f.name in KERAS_SKIP:
                continue
            if (dname, f.name) in WEIGHTS_ONLY:  # weights-only: a .keras needs the architecture
                for cfg in WEIGHTS_ONLY[(dname, f.name)]:
                    stem = cfg[:-len(".json")].replace(".", "_")
                    tag = f.stem if dname in ("keras_user", "trained") else stem
                    jobs.append((f"{prefix}_{tag}.keras", f, ["--config", fx / dname / cfg]))
                continue
            jobs.append((f"{prefix}_{f.stem}.keras", f, []))
    for f in sorted((fx / "trained").glob("*.tf1")):
        jobs.append((f"trained_{f.stem}_tf1.keras", f, []))
    for dname in TF1_DIRS:
        for d in sorted(p for p in (fx / dname).iterdir() if p.is_dir()):
            if (dname, d.name) in TF1_SKIP:
                continue
            if (dname, d.name) in TF1_SCOPES:
                for scope in TF1_SCOPES[(dname, d.name)]:
                    jobs.append((f"{dname}_{d.name}_{scope.split('/')[0]}.keras", d, ["--rnn", scope]))
                continue
            jobs.append((f"{dname}_{d.name}.keras", d, TF1_ARGS.get((dname, d.name), [])))
    for d in sorted(p for p in (fx / "tf2").iterdir() if p.is_dir()):
        extra = ["--config", d / "model.json"] if (d / "model.json").exists() else []
        jobs.append((f"tf2_{d.name}.keras", d, extra))
    for name, src, extra in EXTRA:
        jobs.append((name, ROOT / src, extra))
    jobs = [(n, Path(src), list(extra), next(f for f in _FIRST_FAMILIES if n.startswith(f + "_")))
            for n, src, extra in jobs]
    return jobs + later_conversions()


#: The input kinds of the rounds after the matrix was first written (issue 47 item 2), family -> fixture
#: directory: legacy HDF5 in the dialects of Keras 2.1-2.4 / tf.keras 1.13-2.15 and of the legacy writers,
#: tf_keras ``.keras`` zips, tf.keras SavedModels of TF 2.4, and TensorFlow graphs holding cuDNN ops (frozen
#: GraphDefs, SavedModels; converted to their cuDNN nodes' stacks: ``.keras`` per node).  (fixtures/
#: float16_weights is a weights-only file with no architecture beside it: an ``.h5`` output's case.)
LATER = {"dialect": "keras_dialects", "legacywriter": "legacy_writers", "tfkzip": "tf_keras_zip", "tf24": "tf24",
         "graph": "graphs", "graphgolden": "graphs_golden"}
#: Families whose outputs are Keras graphs, also converted to ``.weights.h5`` (the graph families' stacks
#: are not: a stack's ``.weights.h5`` has no ``.keras`` architecture of the same conversion to load into).
WEIGHTS_FAMILIES = {"keras", "keras_lstm", "keras_user", "trained", "tf1", "tf1_lstm", "tf2", "dialect",
                    "legacywriter", "tfkzip", "tf24"}
#: The families of the first matrix, by output name prefix (longest first).
_FIRST_FAMILIES = ("keras_lstm", "keras_user", "tf1_lstm", "keras", "trained", "tf1", "tf2")


#: Fixture directories with no output in the matrix, and why; any other directory of ``fixtures/`` that
#: no family converts is named in the report (a new input kind cannot be left out unseen).
NOT_CONVERTED = {"cudnn-golden": "cuDNN goldens (arrays, no model)", "cudnn-golden-lstm": "cuDNN goldens",
                 "float16_weights": "weights only, no architecture beside them",
                 "keras3": "Keras 3 files (nothing to convert)",
                 "keras_custom": "custom layers (plain load_model refuses them by design)",
                 "graphs_hostile": "hostile graphs: an endless loop, a huge fill, a failing assert (gruconv refuses "
                                   "them by design, exit 3: tests/tf/test_bounded.py)"}


def unconverted_fixture_dirs() -> list:
    """``fixtures/`` directories no family of :func:`conversions` reads and :data:`NOT_CONVERTED` does not
    explain."""
    covered = set(H5_DIRS) | set(TF1_DIRS) | {"tf2"} | set(LATER.values()) | set(NOT_CONVERTED)
    return sorted(p.name for p in (ROOT / "fixtures").iterdir() if p.is_dir() and p.name not in covered
                  and not p.name.startswith((".", "_")))


def _architecture_beside(f: Path):
    """The ``--config`` JSON a weights-only HDF5 fixture is stored with (``X.json`` or, for
    ``X_weights.h5``, ``X.json``), else None (a full model)."""
    for stem in (f.stem, f.stem[:-len("_weights")] if f.stem.endswith("_weights") else None):
        if stem and (f.parent / (stem + ".json")).exists():
            return f.parent / (stem + ".json")
    return None


def later_conversions():
    """(output name, input, extra args, family) of :data:`LATER`'s fixtures: every model file or model
    directory there (a weights-only HDF5 file with the JSON beside it; the tf_keras zips' ``.keras``, their
    ``.h5`` twins being the legacy kind already covered)."""
    fx = ROOT / "fixtures"
    jobs = []
    for family, dname in LATER.items():
        d = fx / dname
        for f in sorted(d.iterdir()):
            if f.name.startswith(("manifest", "index", "README", "make_", "reference")) or f.suffix in (".json", ".npz", ".py", ".txt", ".md"):
                continue
            if family == "tfkzip" and f.suffix != ".keras":
                continue
            if family == "graph" and f.suffix in (".h5",):  # tf_keras's HDF5 twins of the SavedModels
                continue
            if family == "graphgolden" and f.name == "stacks":
                continue
            extra = []
            if f.suffix in (".h5", ".hdf5"):
                cfg = _architecture_beside(f)
                extra = ["--config", cfg] if cfg is not None else []
            stem = f.name.split(".")[0]
            jobs.append((f"{family}_{stem}.keras", f, extra, family))
    return jobs


def selected_conversions(args):
    """:func:`conversions`, or with ``--limit N`` the first N of each family (a reduced run)."""
    jobs = conversions()
    if not getattr(args, "limit", None):
        return jobs
    seen: dict = {}
    out = []
    for job in jobs:
        seen[job[3]] = seen.get(job[3], 0) + 1
        if seen[job[3]] <= args.limit:
            out.append(job)
    return out


def cmd_convert(args):
    """Every conversion in ONE process of the project venv (``_worker convert``: the CLI in-process, a
    TensorFlow import paid once, not per fixture), this checkout's ``src/``; then the outputs copied into
    ``raw/`` and ``weights/``: a graph's stacks written as a directory of ``.keras`` files become one
    output each (``<name>__<stack>.keras``)."""
    raw = OUT / "raw"
    if raw.exists():
        shutil.rmtree(raw)
    raw.mkdir(parents=True)
    wdir = OUT / "weights"  # the same conversions as Keras 3 .weights.h5 (checked in the model of raw/)
    shutil.rmtree(wdir, ignore_errors=True)
    wdir.mkdir(parents=True)
    scratch = WORK / "scratch"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    # This checkout's gruconv, never the one the venv's console script points at (the shared venv's
    # editable install may be another worktree's: the first streamed run here converted with it).
    src_dir = ROOT / "src"
    env["PYTHONPATH"] = str(src_dir)
    if args.gruconv_rev:  # a committed revision, not the working tree (which may be mid-edit)
        snap = WORK / "gruconv-src"
        shutil.rmtree(snap, ignore_errors=True)
        snap.mkdir(parents=True)
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.gruconv_rev], check=True, text=True,
                             capture_output=True).stdout.strip()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(snap)], input=archive, check=True)
        src_dir = snap / "src"
        env["PYTHONPATH"] = str(src_dir)
        (OUT / "gruconv-rev.txt").write_text(rev + "\n")
    else:
        head = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], text=True,
                              capture_output=True).stdout.strip() or "?"
        (OUT / "gruconv-rev.txt").write_text(f"working tree ({head})\n")
    extra_names = {n for n, _, _ in EXTRA}
    jobs = []
    for name, src, extra, family in selected_conversions(args):
        jobs.append({"name": name, "src": str(src), "extra": [str(x) for x in extra], "family": family,
                     "out": str(scratch / "raw" / name)})
        # graph options: gruconv refuses them for .weights.h5 (exit 2)
        if family in WEIGHTS_FAMILIES and name not in extra_names:
            wname = name[:-len(".keras")] + ".weights.h5"
            jobs.append({"name": wname, "src": str(src), "extra": [str(x) for x in extra], "family": family,
                         "out": str(scratch / "weights" / wname), "weights_of": name})
    for sub in ("raw", "weights"):
        (scratch / sub).mkdir()
    (scratch / "jobs.json").write_text(json.dumps(jobs, indent=1))
    t = time.time()
    run([PROJECT_PY, __file__, "_worker", "convert", "--worker-models", scratch / "jobs.json",
         "--worker-out", scratch / "results.json"], env=env, timeout=3600)
    results = json.loads((scratch / "results.json").read_text())
    log_lines, fallbacks, custom, families = [], {}, {}, {}
    for job in jobs:
        r = results[job["name"]]
        out, dest = Path(r.get("out", job["out"])), (wdir if "weights_of" in job else raw)
        if r["code"] != 0 or not out.exists():
            last = [ln for ln in r["output"].splitlines() if ln.strip()][-1:]
            log_lines.append(f"{job['name']}: exit {r['code']}: {last}")
            continue
        if "weights_of" in job and not (raw / job["weights_of"]).exists():
            continue
        made = [(job["name"], out)] if out.is_file() else [
            (f"{job['name'][:-len('.keras')]}__{p.stem}.keras", p) for p in sorted(out.glob("*.keras"))]
        for name, path in made:
            shutil.copy2(path, dest / name)
            families[name] = job["family"]
        fell_back = [ln for ln in r["output"].splitlines() if "streaming writer:" in ln]
        if fell_back:
            fallbacks[job["name"]] = fell_back[0].strip()
        if "custom layer class" in r["output"]:  # plain load_model refuses it by design: not a matrix row
            custom[job["name"]] = next(ln for ln in r["output"].splitlines() if "custom layer class" in ln)[:200]
            for name, _path in made:
                (dest / name).unlink()
                families.pop(name, None)
    (OUT / "convert.log").write_text("\n".join(log_lines) + "\n")
    (OUT / "convert.json").write_text(json.dumps({"failed": log_lines, "keras_built": fallbacks, "custom": custom,
                                                  "families": families, "seconds": round(time.time() - t, 1),
                                                  "converted": sorted(p.name for p in raw.glob("*.keras")),
                                                  "weights": sorted(p.name for p in wdir.glob("*.weights.h5"))},
                                                 indent=1))
    for line in log_lines:
        log("convert:", line)
    log(f"converted: {len(list(raw.glob('*.keras')))} models in {raw}, "
        f"{len(list(wdir.glob('*.weights.h5')))} in {wdir} ({time.time() - t:.0f} s)")


def convert_worker(args):
    """``_worker convert`` (project venv, this checkout's src): each job through the CLI in-process."""
    import warnings

    warnings.simplefilter("ignore")
    from click.testing import CliRunner

    from gruconv.cli import main as gruconv_main

    jobs = json.loads(Path(args.worker_models[0]).read_text())
    results = {}
    for job in jobs:
        t = time.time()
        out = job["out"]
        res = CliRunner().invoke(gruconv_main, ["convert", job["src"], out, *job["extra"]])
        if res.exit_code == 2 and "cuDNN node stacks" in res.output:  # a graph of several: a directory of them
            out = out[:-len(".keras")]
            Path(out).mkdir(parents=True, exist_ok=True)
            res = CliRunner().invoke(gruconv_main, ["convert", job["src"], out, "--format", "keras", *job["extra"]])
        output = res.output
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            output += f"\n{type(res.exception).__name__}: {res.exception}"
        results[job["name"]] = {"code": res.exit_code, "output": output[-4000:], "s": round(time.time() - t, 2),
                                "out": out}
        print(f"{job['name']}: exit {res.exit_code} ({time.time() - t:.1f} s)", file=sys.stderr, flush=True)
        if res.exit_code in (130, 143):
            # the CLI turned SIGINT/SIGTERM into its exit code (gruconv.signals) and CliRunner handed it back:
            # this loop must stop too, or a killed `make compat` leaves this worker converting the rest (seen)
            sys.exit(res.exit_code)
    Path(args.worker_out).write_text(json.dumps(results, indent=1))


def cmd_portable(args):
    sys.path.insert(0, str(ROOT / "src"))
    from gruconv.keras3.portable import rewrite_keras_zip

    dst = OUT / "portable"
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    qr = OUT / "portable_qrfree"  # + the opt-in float16 initializer change, float16 models only
    shutil.rmtree(qr, ignore_errors=True)
    qr.mkdir(parents=True)
    for f in sorted((OUT / "raw").glob("*.keras")):
        rewrite_keras_zip(f, dst / f.name)
        if "float16" in f.name:
            rewrite_keras_zip(f, qr / f.name, qr_free_low_precision=True)
    log(f"portable: {len(list(dst.glob('*.keras')))} models in {dst}, {len(list(qr.glob('*.keras')))} in {qr}")


# ------------------------------------------------------------------------------ reference, check

def model_dirs(args):
    if args.models:
        return [Path(m).resolve() for m in args.models]
    return [d for d in (OUT / "raw", OUT / "weights", OUT / "portable", OUT / "portable_qrfree") if d.exists()]


def cmd_reference(args):
    """Inputs + reference outputs: the newest Keras on TensorFlow (project venv), from raw outputs."""
    dirs = model_dirs(args)
    src = OUT / "raw" if (OUT / "raw").exists() and not args.models else dirs[0]
    if args.models and len(dirs) > 1:
        log(f"reference: from {src} (the first --models directory); the others must hold the same names")
    shutil.rmtree(REF, ignore_errors=True)
    REF.mkdir(parents=True)
    env = dict(os.environ, KERAS_BACKEND="tensorflow", CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    run([PROJECT_PY, __file__, "_worker", "reference", "--worker-models", src, "--worker-ref", REF,
         "--worker-out", REF / "reference.json"], env=env, timeout=1800)


def cmd_original(args):
    """Is the reference what the original model computed?  For every output converted from a legacy
    Keras HDF5 file (the fixtures tf_keras wrote, weights-only ones with their JSON), tf_keras in the
    project venv rebuilds the original model with each CuDNNGRU/CuDNNLSTM as the equivalent GRU/LSTM
    and loads the original file with its own legacy HDF5 loader, which converts the cuDNN weights
    itself (``_convert_rnn_weights`` in ``tf_keras/src/saving/legacy/hdf5_format.py``; the method of
    ``tests/readers/test_user_models.py``), runs it on the reference inputs and compares with the reference
    outputs -> ``.compat/ref/original.json``.  TF1/TF2 checkpoints have no such independent route here."""
    jobs = {}
    for name, src, extra, _family in conversions():
        if src.suffix in (".h5", ".hdf5") and (REF / (name + ".npz")).exists():
            cfg = str(extra[extra.index("--config") + 1]) if "--config" in extra else None
            jobs[name] = {"src": str(src), "config": cfg}
    (REF / "original_jobs.json").write_text(json.dumps(jobs, indent=1))
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("PYTHONPATH", None)
    run([PROJECT_PY, __file__, "_worker", "original", "--worker-ref", REF,
         "--worker-out", REF / "original.json"], env=env, timeout=1800)


def cmd_check(args):
    """ONE process per env (``_worker env``): every tested directory's models loaded and run there, and in
    a TensorFlow env also the ``probe`` of the raw outputs and the ``vocab`` probe, so each env pays its
    Keras and backend import once.  ``--jobs N`` runs N envs at a time (each env process is one
    interpreter; on 2 shared cores keep 1, the default)."""
    from concurrent.futures import ThreadPoolExecutor

    RESULTS.mkdir(parents=True, exist_ok=True)
    dirs = model_dirs(args)
    vocab = vocab_model() if "vocab" in args.steps or args.steps_all else None
    timings = {}

    def one(env):
        v, b = env
        name = env_name(v, b)
        stamp = ENVS / name / ".compat-stamp"
        if not stamp.exists():
            failed = ENVS / name / ".compat-failed"
            why = json.loads(failed.read_text())["error"] if failed.exists() else "env not built"
            for d in dirs:
                (RESULTS / f"{d.name}__{name}.json").write_text(json.dumps({"env_error": why}))
            return
        env = dict(os.environ, KERAS_BACKEND=b, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3",
                   PYTHONNOUSERSITE="1", JAX_PLATFORMS="cpu", OMP_NUM_THREADS="1")
        env.pop("PYTHONPATH", None)
        cmd = [env_python(name), __file__, "_worker", "env", "--worker-ref", REF, "--worker-out", RESULTS,
               "--worker-env", name, "--worker-models", *dirs]
        if b == "tensorflow" and (OUT / "raw").exists():
            cmd += ["--worker-probe", OUT / "raw"] + (["--worker-vocab", vocab] if vocab else [])
        t = time.time()
        r = run(cmd, env=env, check=False, timeout=3600, capture=True)
        if r.returncode != 0:
            why = (r.stderr.strip().splitlines() or ["?"])[-1]
            for d in dirs:
                out = RESULTS / f"{d.name}__{name}.json"
                if not out.exists() or out.stat().st_mtime < t:
                    out.write_text(json.dumps({"env_error": why}))
        timings[name] = round(time.time() - t, 1)
        log(f"check {name}: {timings[name]:.0f} s")

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        list(pool.map(one, matrix(args)))
    (WORK / "check_timings.json").write_text(json.dumps(timings, indent=1))


def cmd_probe(args):
    """Which config keys does each Keras version reject?  (raw outputs, TensorFlow envs; ``check`` does
    this in the same process: this step alone reruns it.)"""
    RESULTS.mkdir(parents=True, exist_ok=True)
    src = (Path(args.models[0]).resolve() if args.models else OUT / "raw")
    for v, b in matrix(args):
        name = env_name(v, b)
        if b != "tensorflow" or not (ENVS / name / ".compat-stamp").exists():
            continue
        env = dict(os.environ, KERAS_BACKEND="tensorflow", CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
        run([env_python(name), __file__, "_worker", "probe", "--worker-models", src,
             "--worker-out", RESULTS / f"probe__{v}.json"], env=env, check=False, timeout=1800, capture=True)


#: Values for the required constructor arguments of the vocabulary's classes (``cmd_vocab``).
_SAMPLE = {"input_dim": 3, "output_dim": 2, "units": 2, "rate": 0.5, "stddev": 0.1, "activation": "relu",
           "target_shape": [2], "dims": [1], "n": 2, "axes": 1, "filters": 2, "kernel_size": [2], "pool_size": [2]}


def vocab_model() -> Path:
    """The vocabulary probe's model (:func:`cmd_vocab`), written once per run."""
    return _vocab_doc()


def cmd_vocab(args):
    """Every class the streaming writer can write (``gruconv.keras3.defaults``: layers, initializers,
    regularizers, constraints, optimizers), each with every argument at its Keras 3.15.1 default
    (required ones from ``_SAMPLE``) and passed through ``gruconv.keras3.portable.portable_config`` as
    the writer does, deserialized on its own in the TensorFlow env of each release (the ``probe``
    worker): the classes and keys a release refuses, fixtures or not.  (``check`` does this in the same
    process as the env's models: this step alone reruns it.)"""
    d = _vocab_doc()
    RESULTS.mkdir(parents=True, exist_ok=True)
    for v, b in matrix(args):
        name = env_name(v, b)
        if b != "tensorflow" or not (ENVS / name / ".compat-stamp").exists():
            continue
        env = dict(os.environ, KERAS_BACKEND="tensorflow", CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
        env.pop("PYTHONPATH", None)
        run([env_python(name), __file__, "_worker", "probe", "--worker-models", d,
             "--worker-out", RESULTS / f"vocab__{v}.json"], env=env, check=False, timeout=1800, capture=True)
    log(f"vocab: {d} probed")


def _vocab_doc() -> Path:
    """``.compat/out/vocab/vocabulary.keras``: a config.json of every class of the vocabulary (below)."""
    import copy
    import zipfile

    sys.path.insert(0, str(ROOT / "src"))
    from gruconv.keras3.defaults import DEFAULTS
    from gruconv.keras3.portable import portable_config

    objs = []
    for table in ("layers", "initializers", "regularizers", "constraints", "optimizers"):
        for cls, entry in sorted(DEFAULTS[table].items()):
            cfg = copy.deepcopy(entry["config"])
            if cls == "InputLayer":
                cfg["batch_shape"] = [None, 3, 4]
            else:
                cfg.update({k: _SAMPLE[k] for k in entry.get("required", [])})
            if table == "layers":
                cfg["name"] = f"v_{cls.lower()}"
            objs.append({"module": entry["module"], "class_name": cls, "config": cfg, "registered_name": None})
    doc = portable_config({"module": "keras", "class_name": "Functional", "config": {"layers": objs}})
    d = OUT / "vocab"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    with zipfile.ZipFile(d / "vocabulary.keras", "w") as z:
        z.writestr("config.json", json.dumps(doc))
    return d


def _short(v: str) -> str:
    return ".".join(v.split(".")[:2]) if v.endswith(".0") else v


def _convert_summary() -> list:
    """Header lines from the convert step's record: how many fixtures converted, which failed, and
    which the streaming writer refused so that Keras wrote them (not streamed outputs)."""
    f = OUT / "convert.json"
    if not f.exists():
        return []
    c = json.loads(f.read_text())
    lines = [f"- Convert step: {len(c['converted'])} `.keras` outputs from the fixtures (`conversions()` in the "
             f"script) and the same conversions as {len(c.get('weights', []))} `.weights.h5`; "
             f"{len(c['failed'])} conversion(s) failed"
             + (": " + "; ".join(f"`{x[:200]}`" for x in c["failed"]) if c["failed"] else "") + "."]
    missing = unconverted_fixture_dirs()
    lines.append("- Fixture directories not in the matrix: " + "; ".join(
        [f"{k} ({v})" for k, v in sorted(NOT_CONVERTED.items())]
        + [f"**{d} (no family converts it: add it to `LATER`)**" for d in missing]) + ".")
    if c.get("custom"):
        lines.append(f"- Not in the matrix: {len(c['custom'])} conversion(s) with a custom layer (plain "
                     "`load_model` refuses them by design: they load with the user's class): "
                     + ", ".join(sorted(c["custom"])) + ".")
    kb = c.get("keras_built", {})
    lines.append("- Written by the streaming writer (no Keras import): "
                 + (f"all but {len(kb)}, which fell back to the Keras-built route: "
                    + "; ".join(f"{k} (`{v[:160]}`)" for k, v in sorted(kb.items())) if kb else "all of them") + ".")
    return lines


def _timing_summary() -> list:
    """How long the run that wrote the page took, step by step (``.compat/timings.json``)."""
    f = WORK / "timings.json"
    if not f.exists():
        return []
    t = json.loads(f.read_text())
    steps = ", ".join(f"{k} {v / 60:.1f} min" for k, v in t["steps"].items())
    checks = WORK / "check_timings.json"
    per_env = ""
    if checks.exists():
        c = json.loads(checks.read_text())
        if c:
            per_env = (f"; one env's process (all its models, and the probes in a TensorFlow env): "
                       f"{min(c.values()) / 60:.1f}-{max(c.values()) / 60:.1f} min")
    cpu = [json.loads(p.read_text())["cpu_s"] for p in RESULTS.glob("cpu__*.json")
           if p.stem.split("__", 1)[1] in t["envs"]]
    if cpu:
        per_env += f"; CPU time of the env processes {sum(cpu) / 60:.1f} min in all"
    scale = f", the first {t['limit']} fixtures of each family" if t.get("limit") else ""
    return [f"- This run: {len(t['envs'])} envs{scale}, {t.get('jobs', 1)} at a time, on {t['cpus']} cores: "
            f"{t.get('total_s', 0) / 60:.1f} min before the report ({steps}{per_env})."]


def _families() -> list:
    f = OUT / "convert.json"
    if not f.exists():
        return []
    fams: dict = {}
    for name, fam in json.loads(f.read_text()).get("families", {}).items():
        fams[fam] = fams.get(fam, 0) + 1
    return ["- Outputs by input family (name prefix): " + ", ".join(f"{k} {v}" for k, v in sorted(fams.items()))
            + "; `graph*`: TensorFlow graphs' cuDNN nodes as stacks (`name__stack`), `dialect`: Keras 2.1-2.4 "
            "and tf.keras 1.13 dialects, `legacywriter`: tf.keras 2.12/2.15's HDF5 writer, `tfkzip`: tf_keras "
            "`.keras` zips, `tf24`: TF 2.4 tf.keras SavedModels."]


def _probe_table(prefix: str, title: str, intro: str) -> list:
    probes = sorted(RESULTS.glob(f"{prefix}__*.json"),
                    key=lambda p: [int(x) for x in p.stem.split("__")[1].split(".")])
    if not probes:
        return []

    def esc(t):
        return t.replace("|", "\\|")

    L = [f"## {title}", "", intro, "",
         "| Keras | class | rejected keys (value in the file) | still fails | first error | models with it |",
         "|---|---|---|---|---|---|"]
    for p in probes:
        d = json.loads(p.read_text())
        if not d.get("rejected"):
            L.append(f"| {d['keras']} | - | none | | | |")
        for cls, r in d.get("rejected", {}).items():
            keys = ", ".join(f"`{k}`={json.dumps(v)}" for k, v in r["keys"].items()) or "-"
            L.append(f"| {d['keras']} | `{cls}` | {keys} | {esc(r.get('fails_anyway', '')[:100])} | "
                     f"{esc(r['error'][:120])} | {len(r['files'])} |")
    return L + [""]


def _original_summary() -> list:
    """The ``original`` step's result: is the reference what tf_keras computes from the original file?"""
    f = REF / "original.json"
    if not f.exists():
        return []
    d = json.loads(f.read_text())
    m = d["models"]
    ok = {k: v for k, v in m.items() if v["status"] == "ok"}
    bad = {k: v for k, v in m.items() if v["status"] != "ok"}
    f16 = [v["max_abs"] for k, v in ok.items() if v["tol"] == TOL_F16]
    f32 = [v["max_abs"] for k, v in ok.items() if v["tol"] != TOL_F16]
    L = ["## The reference against the original model (tf_keras)", "",
         f"Every output converted from a legacy Keras HDF5 fixture ({len(m)} models): tf_keras {d['tf_keras']} "
         "(project venv) rebuilds the original model with each CuDNNGRU/CuDNNLSTM as the equivalent "
         "GRU/LSTM, loads the original file with its own legacy HDF5 loader (which converts the cuDNN "
         "weights itself) and runs it on the reference inputs; max abs difference against the reference "
         "(`compat.py original`). No gruconv code is involved on this side.", "",
         f"- agree: **{len(ok)}/{len(m)}**; worst float32 {max(f32, default=0):.1e} (tolerance {TOL:g}), "
         f"worst float16 {max(f16, default=0):.1e} (tolerance {TOL_F16:g}).",
         "- nonzero differences: " + (", ".join(f"{k[:-len('.keras')]} {v['max_abs']:.1e}"
                                                for k, v in sorted(ok.items()) if v["max_abs"] > 0) or "none") + "."]
    if bad:
        L.append("- not agreeing: " + "; ".join(f"{k}: {v.get('error', v.get('max_abs'))}" for k, v in sorted(bad.items())))
    return L + [""]


def cmd_report(args):
    dirs = model_dirs(args)
    envs = matrix(args)
    infos = {}
    for v, b in envs:
        d = ENVS / env_name(v, b)
        for f in (d / ".compat-stamp", d / ".compat-failed"):
            if f.exists():
                infos[(v, b)] = json.loads(f.read_text())
    proj = subprocess.run([str(PROJECT_PY), "-c", "import keras, tensorflow as tf, numpy as np, h5py;"
                           "print(keras.__version__, tf.__version__, np.__version__, h5py.__version__)"],
                          text=True, capture_output=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    pk = (proj.stdout.split() + ["?"] * 4)[:4]
    rev = (OUT / "gruconv-rev.txt").read_text().strip() if (OUT / "gruconv-rev.txt").exists() else "?"
    mem = "?"
    try:
        mem = f"{int(open('/proc/meminfo').read().split()[1]) / 2**20:.0f} GiB"
    except Exception:  # noqa: BLE001
        pass
    abbrev = {"tensorflow": "tf", "jax": "jax", "torch": "torch"}
    L = ["# Compatibility matrix: gruconv outputs on other Keras 3 releases and backends", "",
         "Generated by `scripts/compat.py` (`make compat`); every number below was measured by it. "
         "Do not edit by hand: rerun the script.", "",
         f"- Date: {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}; machine: {platform.platform()}, "
         f"{os.cpu_count()} CPU cores, {mem} RAM, no GPU (all backends on the CPU).",
         f"- Outputs written by gruconv at `{rev}` with Keras {pk[0]} on TensorFlow {pk[1]} "
         f"(project venv; NumPy {pk[2]}, h5py {pk[3]}).",
         *_convert_summary(),
         *_timing_summary(),
         *_families(),
         f"- Reference outputs: the raw outputs loaded and run in the project venv (Keras {pk[0]}, "
         "TensorFlow backend) on fixed random inputs "
         f"(batch {BATCH}, {STEPS} steps where the time axis is free; seeded by file name).",
         "- Each cell: plain `keras.saving.load_model(path)` (default arguments: safe mode, compile=True) "
         f"in that environment, the model run on the same inputs, max abs difference against the "
         f"reference: `ok` within {TOL:g} ({TOL_F16:g} for float16 models); otherwise the first line of "
         "the error (legend under each table) or `mismatch <max abs>`.", "",
         "## Environments", "",
         "| env | Keras | backend | backend version | NumPy | status |", "|---|---|---|---|---|---|"]
    for v, b in envs:
        i = infos.get((v, b), {})
        L.append(f"| {env_name(v, b)} | {i.get('keras', v)} | {b} | {i.get('backend_version', '-')} | "
                 f"{i.get('numpy', '-')} | {'ok' if i.get('ok') else 'not usable: ' + str(i.get('error', 'not built'))[:200]} |")
    L += ["", "TensorFlow envs reuse the project venv's TensorFlow through a `.pth` file (only `keras==X` "
          "is installed into the env); torch is the CPU-only wheel `torch==2.13.0+cpu` (no `nvidia-*` "
          "packages), shared by the torch envs; JAX is the release of each Keras release's era "
          "(`JAX_FOR` in the script).", ""]
    L += _original_summary()
    for d in dirs:
        # columns: the envs this directory was checked in (e.g. .weights.h5 on a subset of releases)
        denvs = [e for e in envs if (RESULTS / f"{d.name}__{env_name(*e)}.json").exists()]
        if not denvs:
            continue
        res = {}
        for v, b in denvs:
            f = RESULTS / f"{d.name}__{env_name(v, b)}.json"
            res[(v, b)] = json.loads(f.read_text()) if f.exists() else {"env_error": "not run"}
        names = sorted({m for r in res.values() for m in r.get("models", {})})
        legend: dict = {}

        def cell(r, m):
            if "env_error" in r:
                return "env: " + r["env_error"][:60]
            c = r["models"].get(m)
            if c is None:
                return "-"
            if c["status"] == "ok":
                return "ok"
            if c["status"] == "mismatch" and "max_abs" in c:
                return f"mismatch {c['max_abs']:.1e}"
            # one legend entry per error, not per object id or long config dump
            msg = re.sub(r"'shared_object_id': \d+", "'shared_object_id': N", c.get("error", "?"))
            if msg not in legend:
                legend[msg] = f"E{len(legend) + 1}"
            return legend[msg]

        title = {"raw": "The `.keras` outputs of `gruconv convert` (streaming writer)",
                 "portable": "The same outputs through `gruconv.keras3.portable.rewrite_keras_zip`",
                 "portable_qrfree": "float16 outputs through `rewrite_keras_zip(..., qr_free_low_precision=True)`",
                 "weights": "`.weights.h5` outputs, loaded into the model built from the `.keras` output's config "
                            "(`keras.models.model_from_json(config.json)` + `model.load_weights`)"
                 }.get(d.name, f"`{d}`")
        skipped = [env_name(*e) for e in envs if e not in denvs]
        L += [f"## {title}", "", f"Directory: `{os.path.relpath(d, ROOT)}` ({len(names)} models)."
              + (f" Not checked in: {', '.join(skipped)}." if skipped else ""), ""]
        L.append("| model | " + " | ".join(f"{_short(v)} {abbrev.get(b, b)}" for v, b in denvs) + " |")
        L.append("|---|" + "---|" * len(denvs))
        for m in names:
            shown = m[:-len(".weights.h5")] if m.endswith(".weights.h5") else m[:-len(".keras")]
            L.append(f"| {shown} | " + " | ".join(cell(res[e], m) for e in denvs) + " |")
        ok = [sum(1 for m in names if res[e].get("models", {}).get(m, {}).get("status") == "ok") for e in denvs]
        L.append("| **ok / total** | " + " | ".join(f"{n}/{len(names)}" for n in ok) + " |")
        for label, f16 in (("float32", False), ("float16", True)):
            worst = {}
            for e in denvs:
                for m, c in res[e].get("models", {}).items():
                    if c.get("status") == "ok" and (c.get("tol") == TOL_F16) == f16:
                        worst[e] = max(worst.get(e, 0.0), c.get("max_abs", 0.0))
            if worst:
                L.append(f"| max abs, {label} models (ok cells) | "
                         + " | ".join(f"{worst[e]:.1e}" if e in worst else "-" for e in denvs) + " |")
        if legend:
            L += ["", "Errors (first line):", ""]
            for msg, code in legend.items():
                L.append(f"- **{code}**: `{msg}`")
        L.append("")
    L += _probe_table(
        "probe", "Config keys and classes each release rejects",
        "Each serialized object of every raw output's `config.json`, deserialized on its own in the "
        "TensorFlow env of each release; the keys named by the error (`unexpected keyword argument`, "
        "`Unrecognized keyword arguments`) are removed until it loads (innermost objects first).")
    L += _probe_table(
        "vocab", "The streaming writer's whole vocabulary on each release",
        "Every class `gruconv.keras3.config` can write (the tables of `gruconv.keras3.defaults`: layers, "
        "initializers, regularizers, constraints, optimizers), every argument at its Keras 3.15.1 default "
        "and passed through `gruconv.keras3.portable.portable_config` as the writer does, deserialized on "
        "its own in the TensorFlow env of each release (`compat.py vocab`), keys removed as above. "
        "This covers classes no fixture has.")
    # Hand-written analysis below this marker survives a rerun.
    if DOC.exists() and NOTES_MARKER in DOC.read_text():
        L += [NOTES_MARKER + DOC.read_text().split(NOTES_MARKER, 1)[1].rstrip(), ""]
    else:
        L += [NOTES_MARKER, ""]
    # A reduced run (--quick, --limit, --only, --versions, --backends, --models) never replaces the page.
    reduced = args.limit or args.only or args.versions or args.backends or args.models
    target = WORK / "compatibility.reduced.md" if reduced else DOC
    target.write_text("\n".join(L))
    log(f"wrote {target}")


# ---------------------------------------------------------------------------------------- worker
# Runs inside each env's Python: standard library, numpy and keras only (no gruconv).

BATCH, STEPS = 3, 6


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    line = text.splitlines()[0] if text else ""
    line = f"{type(e).__name__}: {line}" if line else type(e).__name__
    return line[:300]


def _root_error(e: BaseException) -> str:
    """The first line of the innermost cause (Keras wraps constructor errors in a generic
    "could not be deserialized properly"), prefixed by nothing else."""
    seen = []
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return _first_line(seen[-1])


def _flatten(x):
    if isinstance(x, dict):
        return [a for k in sorted(x) for a in _flatten(x[k])]
    if isinstance(x, (list, tuple)):
        return [a for v in x for a in _flatten(v)]
    return [x]


def _judge(r: dict, got: list, want: list, f16: bool) -> None:
    """One cell's verdict into ``r``: output shapes as the reference's, then max abs difference within
    the float32 (or float16) tolerance."""
    import numpy as np

    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
        r.update(status="mismatch", error=f"outputs {[g.shape for g in got]} vs reference {[w.shape for w in want]}")
        return
    err = max((float(np.max(np.abs(g.astype("float64") - w.astype("float64")))) if g.size else 0.0
               for g, w in zip(got, want)), default=0.0)
    tol = TOL_F16 if f16 else TOL
    r.update(status="ok" if err <= tol else "mismatch", max_abs=err, tol=tol)


def _run_model(keras, np, model, inputs):
    feed = inputs if len(inputs) > 1 else inputs[0]
    out = model(feed, training=False)
    return [np.asarray(keras.ops.convert_to_numpy(o)) for o in _flatten(out)]


def _first_embedding(layer):
    """The Embedding a layer starts with (itself, or the first layer of a nested model), else None."""
    while layer is not None:
        if type(layer).__name__ == "Embedding":
            return layer
        inner = [la for la in getattr(layer, "layers", []) if type(la).__name__ != "InputLayer"]
        layer = inner[0] if inner else None
    return None


def _embedding_of_input(model, t):
    """The Embedding a model input feeds directly (through nested models' first layers), else None.
    tf_keras wrote a float32 InputLayer in front of a Sequential's Embedding, and Keras 3 keeps it:
    such an input must still hold token ids (a random normal float casts to -1, which Keras's
    ``ops.take`` wraps to the last row and tf_keras's gather refuses)."""
    layers = [la for la in getattr(model, "layers", []) if type(la).__name__ != "InputLayer"]
    if type(model).__name__ == "Sequential":
        return _first_embedding(layers[0]) if layers else None
    for la in layers:
        try:
            ins = _flatten(la.input)
        except Exception:  # noqa: BLE001 - a layer called more than once has no single input
            continue
        if any(x is t for x in ins):
            emb = _first_embedding(la)
            if emb is not None:
                return emb
    return None


def _make_inputs(np, model, seed):
    rng = np.random.default_rng(seed)
    vocab = min([getattr(la, "input_dim", 10**9) for la in _all_layers(model)
                 if type(la).__name__ == "Embedding"] or [10])
    arrays = []
    for t in model.inputs:
        dims = list(t.shape)
        # A Sequential whose first layer is a nested model with a fixed input length: Keras 3 (like
        # its legacy loader) gives the outer model a free length, the inner one still needs its own.
        first = [la for la in getattr(model, "layers", []) if type(la).__name__ != "InputLayer"][:1]
        if type(model).__name__ == "Sequential" and first and getattr(first[0], "inputs", None):
            inner = list(first[0].inputs[0].shape)
            if len(inner) == len(dims):
                dims = [d if d is not None else e for d, e in zip(dims, inner)]
        shape = [d if d is not None else (BATCH if i == 0 else STEPS) for i, d in enumerate(dims)]
        dtype = str(getattr(t.dtype, "name", t.dtype))
        emb = None if dtype == "bool" or "int" in dtype else _embedding_of_input(model, t)
        if dtype == "bool":
            lengths = rng.integers(1, shape[1] + 1, size=shape[0])
            lengths[0] = shape[1]
            arrays.append(np.arange(shape[1])[None, :] < lengths[:, None])
        elif "int" in dtype:
            arrays.append(rng.integers(0, vocab, size=shape).astype(dtype))
        elif emb is not None:  # token ids in a float input (see _embedding_of_input)
            arrays.append(rng.integers(0, emb.input_dim, size=shape).astype(dtype))
        else:
            arrays.append(rng.normal(size=shape).astype(dtype))
    return arrays


def _all_layers(model):
    for la in getattr(model, "layers", []):
        yield la
        if hasattr(la, "layers"):
            yield from _all_layers(la)


def _serialized_objects(node, path="$"):
    """Every serialized Keras object (a dict with class_name + config) in a config.json document,
    innermost first."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _serialized_objects(v, f"{path}.{k}")
        if "class_name" in node and isinstance(node.get("config"), dict) and "module" in node:
            yield path, node
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _serialized_objects(v, f"{path}[{i}]")


def probe(args):
    """Which config keys of which classes does this Keras reject?  Each serialized object of every
    model's config.json (not models, not layers with inbound nodes) is deserialized on its own; when
    that fails, each key is left out in turn to find the one(s) whose removal makes it load."""
    import warnings

    warnings.simplefilter("ignore")
    import keras

    Path(args.worker_out).write_text(json.dumps(probe_dir(keras, Path(args.worker_models[0])), indent=1))


def probe_dir(keras, models: Path) -> dict:
    """:func:`probe`'s finding for the ``.keras`` files of ``models``, in this process's Keras."""
    import copy
    import zipfile

    found = {}
    for path in sorted(models.glob("*.keras")):
        with zipfile.ZipFile(path) as z:
            doc = json.loads(z.read("config.json"))
        # Innermost first; each object's rejected keys are removed in place, so that its parent
        # is probed with children this Keras accepts.
        for where, obj in _serialized_objects(doc):
            if obj["class_name"] in ("Functional", "Sequential", "Model") or "layers" in obj["config"]:
                continue
            cls = f"{obj['module']}.{obj['class_name']}"
            known = [k for k in found.get(cls, {}).get("keys", {}) if k in obj["config"]]
            for k in known:
                obj["config"].pop(k)
            if known and path.name not in found[cls]["files"]:
                found[cls]["files"].append(path.name)
            o = {k: v for k, v in obj.items() if k not in ("inbound_nodes", "name")}
            o["config"] = dict(o["config"])  # a snapshot: obj's config is edited below

            def attempt(cfg):
                try:
                    keras.saving.deserialize_keras_object(copy.deepcopy(dict(o, config=cfg)))
                    return None
                except Exception as e:  # noqa: BLE001
                    msgs = []
                    while e is not None:
                        msgs.append(_first_line(e))
                        e = e.__cause__ or e.__context__
                    return msgs

            msgs = attempt(o["config"])
            if msgs is None:
                continue
            # Remove the key each error names ("unexpected keyword argument 'k'", "Unrecognized
            # keyword arguments ... {'k': ...}") until the object loads or no key is named.
            cfg, dropped = dict(o["config"]), {}
            while msgs is not None:
                named = {k for k in cfg for m in msgs
                         if f"unexpected keyword argument '{k}'" in m
                         or ("Unrecognized keyword arguments" in m and f"'{k}':" in m.split(":", 1)[-1])}
                if not named:
                    break
                for k in named:
                    dropped[k] = cfg.pop(k)
                msgs = attempt(cfg)
            rec = found.setdefault(cls, {"error": attempt(o["config"])[-1], "keys": {}, "files": []})
            rec["keys"].update(dropped)
            for k in dropped:
                obj["config"].pop(k, None)
            if msgs is not None:
                rec["fails_anyway"] = msgs[-1]
            if path.name not in rec["files"]:
                rec["files"].append(path.name)
    return {"keras": keras.__version__, "rejected": found}


def original(args):
    """tf_keras's own outputs of each original legacy HDF5 model on the reference inputs (cmd_original)."""
    import warnings

    import h5py
    import numpy as np
    warnings.simplefilter("ignore")
    import tf_keras

    options = {"CuDNNGRU": ("GRU", dict(activation="tanh", recurrent_activation="sigmoid", reset_after=True,
                                        use_bias=True)),
               "CuDNNLSTM": ("LSTM", dict(activation="tanh", recurrent_activation="sigmoid", use_bias=True))}

    def rewrite(obj):
        if isinstance(obj, dict):
            if obj.get("class_name") in options:
                cls, opts = options[obj["class_name"]]
                obj["class_name"] = cls
                obj["config"].update(opts)
            for v in obj.values():
                rewrite(v)
        elif isinstance(obj, list):
            for v in obj:
                rewrite(v)
        return obj

    ref = Path(args.worker_ref)
    jobs = json.loads((ref / "original_jobs.json").read_text())
    results = {"tf_keras": tf_keras.__version__, "models": {}}
    for name, job in sorted(jobs.items()):
        r = results["models"][name] = {}
        try:
            if job["config"]:
                cfg = json.loads(Path(job["config"]).read_text())
            else:
                with h5py.File(job["src"], "r") as f:
                    raw = f.attrs["model_config"]
                cfg = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
            text = json.dumps(cfg)
            if '"CuDNNGRU"' not in text and '"CuDNNLSTM"' not in text:
                r.update(status="error", error="no CuDNN layer in the original config")
                continue
            f16 = "float16" in text
            model = tf_keras.models.model_from_json(json.dumps(rewrite(cfg)))
            model.load_weights(job["src"])
            with np.load(ref / (name + ".npz")) as z:
                inputs = [z[f"in_{i}"] for i in range(sum(k.startswith("in_") for k in z.files))]
                want = [z[f"out_{i}"] for i in range(sum(k.startswith("out_") for k in z.files))]
            out = model(inputs if len(inputs) > 1 else inputs[0], training=False)
            _judge(r, [np.asarray(o) for o in _flatten(out)], want, f16)
        except Exception as e:  # noqa: BLE001 - every failure is a row
            r.update(status="error", error=_root_error(e))
    Path(args.worker_out).write_text(json.dumps(results, indent=1))


def worker(args):
    import warnings

    import numpy as np
    warnings.simplefilter("ignore")
    import keras

    results = check_dir(keras, np, Path(args.worker_models[0]), Path(args.worker_ref), args.mode)
    Path(args.worker_out).write_text(json.dumps(results, indent=1))


def env_worker(args):
    """``_worker env``: everything one env checks, in one interpreter: each directory's models
    (:func:`check_dir`, a result file per directory as soon as it is done), then in a TensorFlow env the
    probe of the raw outputs and of the vocabulary (:func:`probe_dir`)."""
    import warnings

    import numpy as np
    warnings.simplefilter("ignore")
    import keras

    out, name = Path(args.worker_out), args.worker_env
    t = time.time()
    for d in args.worker_models:
        d = Path(d)
        res = check_dir(keras, np, d, Path(args.worker_ref), "check")
        res["seconds"] = round(time.time() - t, 1)
        res["cpu_s"] = round(time.process_time(), 1)  # this process's CPU time so far (load-independent)
        (out / f"{d.name}__{name}.json").write_text(json.dumps(res, indent=1))
        print(f"{name} {d.name}: {len(res['models'])} models, {time.time() - t:.0f} s", file=sys.stderr, flush=True)
        t = time.time()
    version = keras.__version__
    if args.worker_probe:
        (out / f"probe__{version}.json").write_text(json.dumps(probe_dir(keras, Path(args.worker_probe)), indent=1))
    if args.worker_vocab:
        (out / f"vocab__{version}.json").write_text(json.dumps(probe_dir(keras, Path(args.worker_vocab)), indent=1))
    print(f"{name} probes: {time.time() - t:.0f} s", file=sys.stderr, flush=True)
    (out / f"cpu__{name}.json").write_text(json.dumps({"cpu_s": round(time.process_time(), 1)}))


def check_dir(keras, np, mdir: Path, ref: Path, mode: str) -> dict:
    """Every model of ``mdir`` loaded once and run in this process's Keras (``mode`` ``check``: against
    the reference; ``reference``: writes it)."""
    import zipfile
    import zlib

    # A "weights" directory holds .weights.h5 files, each checked in the model built from the config
    # of the .keras of the same conversion (raw/ beside it); any other holds .keras files.
    weights_mode = mdir.name == "weights" and mode == "check"
    models = sorted(mdir.glob("*.weights.h5" if weights_mode else "*.keras"))
    results = {"keras": keras.__version__, "backend": keras.backend.backend(), "models": {}}
    for path in models:
        r = {}
        results["models"][path.name] = r
        keras_name = path.name[:-len(".weights.h5")] + ".keras" if weights_mode else path.name
        try:
            with zipfile.ZipFile(mdir.parent / "raw" / keras_name if weights_mode else path) as z:
                config_text = z.read("config.json").decode("utf-8", "replace")
            f16 = "float16" in config_text
            t = time.time()
            if mode == "reference":
                # compile=False: the reference needs the architecture and weights only (a model
                # compiled under another backend must still get a reference)
                model = keras.saving.load_model(str(path), compile=False)
                inputs = _make_inputs(np, model, zlib.crc32(path.name.encode()))
                outs = _run_model(keras, np, model, inputs)
                np.savez(ref / (path.name + ".npz"), **{f"in_{i}": a for i, a in enumerate(inputs)},
                         **{f"out_{i}": a for i, a in enumerate(outs)})
                r.update(status="ok", float16=f16, n_in=len(inputs), n_out=len(outs))
            else:
                refpath = ref / (keras_name + ".npz")
                if not refpath.exists():
                    r.update(status="error", error="no reference (the reference run could not load it)")
                    continue
                with np.load(refpath) as z:
                    inputs = [z[f"in_{i}"] for i in range(sum(k.startswith("in_") for k in z.files))]
                    want = [z[f"out_{i}"] for i in range(sum(k.startswith("out_") for k in z.files))]
                if weights_mode:
                    model = keras.models.model_from_json(config_text)
                    model.load_weights(str(path))
                else:
                    model = keras.saving.load_model(str(path))  # plain: default arguments, safe mode
                r["load_s"] = round(time.time() - t, 2)
                _judge(r, _run_model(keras, np, model, inputs), want, f16)
        except Exception as e:  # noqa: BLE001 - every failure is a cell of the matrix
            r.update(status="error", error=_root_error(e), outer_error=_first_line(e))
    return results


#: ``--quick``: one env per backend, among them the oldest release and two of the new ones, two fixtures
#: of each family: a run of minutes that exercises every step and every output kind.
QUICK_ENVS = ["keras3.4.1-jax", "keras3.6.0-tensorflow", "keras3.15.1-torch"]
#: The steps of ``all`` (``probe`` and ``vocab`` run inside ``check``, in each TensorFlow env's process).
ALL_STEPS = ["build", "convert", "reference", "original", "check", "report"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("steps", nargs="*", default=["all"])
    p.add_argument("--versions", nargs="+", default=None, help="Keras releases (default: all of the matrix)")
    p.add_argument("--backends", nargs="+", default=None, help="backends (default: all)")
    p.add_argument("--only", nargs="+", help="env names (keras3.6.0-tensorflow ...): only these envs")
    p.add_argument("--limit", type=int, help="convert only the first N fixtures of each family")
    p.add_argument("--quick", action="store_true", help=f"a reduced run: --limit 2 and, unless --only, "
                   f"the envs {', '.join(QUICK_ENVS)}")
    p.add_argument("--jobs", type=int, default=1, help="envs checked at a time (default 1)")
    p.add_argument("--models", nargs="+", help="directories of .keras files to test (default: "
                   ".compat/out/raw and .compat/out/portable)")
    p.add_argument("--gruconv-rev", help="convert with this git revision of src/ (git archive) instead "
                   "of the working tree")
    p.add_argument("--worker-models", nargs="+", help=argparse.SUPPRESS)
    p.add_argument("--worker-ref", help=argparse.SUPPRESS)
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    p.add_argument("--worker-env", help=argparse.SUPPRESS)
    p.add_argument("--worker-probe", help=argparse.SUPPRESS)
    p.add_argument("--worker-vocab", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.steps[:1] == ["_worker"]:
        args.mode = args.steps[1]
        return {"probe": probe, "original": original, "convert": convert_worker,
                "env": env_worker}.get(args.mode, worker)(args)
    if args.quick:
        args.limit = args.limit or 2
        args.only = args.only or QUICK_ENVS
    args.steps_all = args.steps == ["all"]
    if args.steps_all:
        args.steps = list(ALL_STEPS)
    WORK.mkdir(parents=True, exist_ok=True)
    timings = {"started": _dt.datetime.now().isoformat(timespec="seconds"), "cpus": os.cpu_count(),
               "envs": [env_name(*e) for e in matrix(args)], "limit": args.limit, "jobs": args.jobs, "steps": {}}
    t0 = time.time()
    # a report alone (`compat.py report`, after changing only the page's wording) rewrites the page from the last
    # run's results and must keep that run's timings: writing its own would state "0.0 min" for the matrix
    keep_timings = args.steps == ["report"] and (WORK / "timings.json").exists()
    for s in args.steps:
        t = time.time()
        if s == "report" and not keep_timings:
            timings["total_s"] = round(time.time() - t0, 1)
            (WORK / "timings.json").write_text(json.dumps(timings, indent=1))
        globals()[f"cmd_{s}"](args)
        timings["steps"][s] = round(time.time() - t, 1)
        log(f"step {s}: {time.time() - t:.0f} s")
    if not keep_timings:
        timings["total_s"] = round(time.time() - t0, 1)
        (WORK / "timings.json").write_text(json.dumps(timings, indent=1))


if __name__ == "__main__":
    main()
