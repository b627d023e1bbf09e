"""A corpus of user-style CuDNNGRU models -> `gruconv convert` -> plain Keras 3 `load_model`, same numbers.

Corpus: ``fixtures/keras_user/`` (written by ``fixtures/make_user_fixtures.py`` with tf_keras's
real CuDNNGRU; ``manifest.json`` lists each file's inputs).

Independent reference (no gruconv code involved): tf_keras itself, its outputs stored in
``reference_outputs.npz`` (the quick tier reads them; the slow tier recomputes them).  In a subprocess with
``TF_USE_LEGACY_KERAS=1`` the model config is taken from the file (or the ``to_json`` file),
every ``CuDNNGRU`` is rewritten to ``GRU(reset_after=True, recurrent_activation="sigmoid",
activation="tanh", use_bias=True)`` with the same return_*/go_backwards options, the model is
rebuilt with ``model_from_json`` and ``model.load_weights(original.h5)`` -- tf_keras's legacy
HDF5 loader converts CuDNNGRU weights into GRU weights by itself (``_convert_rnn_weights`` in
``tf_keras/src/saving/legacy/hdf5_format.py``) -- and ``predict`` runs on the CPU.

Converted side: ``gruconv convert IN OUT.keras`` (the installed CLI), then, in a Keras 3
subprocess without the legacy switch, ``keras.saving.load_model(OUT)`` with default arguments
and ``predict`` on the same inputs.  Outputs must agree to the manifest's tolerance (1e-5 for
float32; 5e-3 for float16 compute, whose machine epsilon is 9.8e-4 and whose rounding
accumulates per time step, in an op order tf_keras and Keras 3 do not share).

``test_planted_error_is_caught`` perturbs one recurrent weight of a converted model by 0.05
and checks that the same comparison reports the difference.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

if __name__ == "__main__":  # run as a script: conftest and the support modules live in tests/
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import FIXTURES

# xdist_group (docs/testing.md): the module fixtures run batched TensorFlow children; one worker runs them once.
pytestmark = pytest.mark.xdist_group("test_user_models")

USER = FIXTURES / "keras_user"
MANIFEST = json.loads((USER / "manifest.json").read_text())
CASES = MANIFEST["fixtures"]
NAMES = sorted(CASES)

BATCH, FREE_TIME = 3, 9

# --------------------------------------------------------------------------- subprocess scripts

REFERENCE_SCRIPT = r'''
import json, os, sys, traceback
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import h5py
import tf_keras

GRU_OPTIONS = dict(activation="tanh", recurrent_activation="sigmoid", reset_after=True, use_bias=True)

def rewrite(obj):
    """CuDNNGRU -> GRU(reset_after=True, sigmoid, tanh) everywhere in a model config."""
    if isinstance(obj, dict):
        if obj.get("class_name") == "CuDNNGRU":
            obj["class_name"] = "GRU"
            obj.pop("module", None)
            obj.pop("registered_name", None)
            obj["config"].update(GRU_OPTIONS)
        for v in obj.values():
            rewrite(v)
    elif isinstance(obj, list):
        for v in obj:
            rewrite(v)
    return obj

user_dir, inputs_dir, out_dir = sys.argv[1:4]
manifest = json.load(open(os.path.join(user_dir, "manifest.json")))["fixtures"]
for name, entry in sorted(manifest.items()):
    stem = name[:-3]
    try:
        path = os.path.join(user_dir, name)
        if entry["config_file"]:
            cfg = json.load(open(os.path.join(user_dir, entry["config_file"])))
        else:
            with h5py.File(path, "r") as f:
                raw = f.attrs["model_config"]
            cfg = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        n_cudnn = json.dumps(cfg).count('"CuDNNGRU"')
        model = tf_keras.models.model_from_json(json.dumps(rewrite(cfg)))
        assert n_cudnn and '"CuDNNGRU"' not in model.to_json()
        model.load_weights(path)
        with np.load(os.path.join(inputs_dir, stem + ".npz")) as d:
            xs = [d["x%d" % i] for i in range(len(d.files))]
        ys = model.predict(xs if len(xs) > 1 else xs[0], batch_size=64, verbose=0)
        ys = ys if isinstance(ys, list) else [ys]
        np.savez(os.path.join(out_dir, stem + ".npz"), **{"y%d" % i: np.asarray(y) for i, y in enumerate(ys)})
    except Exception:
        with open(os.path.join(out_dir, stem + ".error"), "w") as f:
            f.write(traceback.format_exc())
'''

KERAS3_SCRIPT = r'''
import json, os, sys, traceback
os.environ.pop("TF_USE_LEGACY_KERAS", None)
import numpy as np
import keras

# A fresh Keras 3 process, as a user's: every converted model loaded with plain load_model (default
# arguments, safe mode), predicted on the fixed inputs.  One process for the whole corpus.
jobs = json.loads(sys.argv[1])
for model_path, inputs_path, out_path, perturb in jobs:
    try:
        model = keras.saving.load_model(model_path)
        if perturb:                                   # plant an error: one recurrent weight + 0.05
            gru = next(l for l in model._flatten_layers() if type(l).__name__ == "GRU")
            w = gru.cell.recurrent_kernel
            v = keras.ops.convert_to_numpy(w).copy()
            v[0, 0] += 0.05
            w.assign(v)
        with np.load(inputs_path) as d:
            xs = [d["x%d" % i] for i in range(len(d.files))]
        ys = model.predict(xs if len(xs) > 1 else xs[0], batch_size=64, verbose=0)
        if isinstance(ys, dict):
            ys = [ys[k] for k in model.output_names]
        ys = ys if isinstance(ys, (list, tuple)) else [ys]
        np.savez(out_path, **{"y%d" % i: np.asarray(y) for i, y in enumerate(ys)})
    except Exception:
        with open(out_path + ".error", "w") as f:
            f.write(traceback.format_exc())
'''

CONVERT_SCRIPT = r'''
import json, sys, traceback
from gruconv import api
from gruconv.errors import GruconvError

# gruconv's Python API, one process for the corpus (the CLI over the same API is tested elsewhere).
for src, out, config in json.loads(sys.argv[1]):
    try:
        res = api.convert(src, out, config=config)
        open(out + ".warnings", "w").write("\n".join(res.warnings))
    except GruconvError as e:
        open(out + ".error", "w").write(f"gruconv: error: {e}")
    except Exception:
        open(out + ".error", "w").write(traceback.format_exc())
'''


def _env(legacy: bool) -> dict:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    env.pop("TF_USE_LEGACY_KERAS", None)
    if legacy:
        env["TF_USE_LEGACY_KERAS"] = "1"
    return env


def _gruconv() -> list[str]:
    exe = Path(sys.executable).with_name("gruconv")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "gruconv"]


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "(no output)"


# --------------------------------------------------------------------------- inputs and reference


def make_inputs(name: str) -> list[np.ndarray]:
    """Fixed inputs per fixture: free dimensions -> BATCH / FREE_TIME; padding zeros where asked."""
    entry = CASES[name]
    rng = np.random.default_rng(list(name.encode()))
    xs = []
    for spec in entry["inputs"]:
        shape = [BATCH] + [FREE_TIME if d is None else d for d in spec["shape"][1:]]
        if spec["dtype"].startswith("int"):
            lo, hi = spec["int_range"]
            x = rng.integers(lo, hi, size=shape).astype(spec["dtype"])
        else:
            x = rng.normal(size=shape).astype(spec["dtype"])
        if spec.get("pad_tail"):  # right padding, different lengths per row (row 0 unpadded)
            for b in range(1, BATCH):
                x[b, shape[1] - spec["pad_tail"] * b // (BATCH - 1):] = 0
        xs.append(x)
    return xs


#: tf_keras's own outputs on :func:`make_inputs`, stored (``<stem>/y<i>``): computing them takes a
#: TensorFlow process and ~37 CPU-seconds, half this module's cost, so the quick tier reads them and
#: the slow tier (:func:`test_stored_references_are_tf_keras_own_outputs`) recomputes them.
#: Rewrite with ``python tests/readers/test_user_models.py --write-references`` after changing the corpus.
REFERENCES = USER / "reference_outputs.npz"


def tf_keras_outputs(base: Path) -> dict:
    """{fixture name: list of outputs | error text}, all computed in ONE tf_keras subprocess."""
    inputs, out = base / "inputs", base / "ref"
    inputs.mkdir(parents=True)
    out.mkdir()
    for name in NAMES:
        xs = make_inputs(name)
        np.savez(inputs / (name[:-3] + ".npz"), **{f"x{i}": x for i, x in enumerate(xs)})
    res = subprocess.run([sys.executable, "-c", REFERENCE_SCRIPT, str(USER), str(inputs), str(out)],
                         env=_env(legacy=True), capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    refs = {}
    for name in NAMES:
        stem = name[:-3]
        if (out / f"{stem}.error").exists():
            refs[name] = (out / f"{stem}.error").read_text()
        else:
            with np.load(out / f"{stem}.npz") as d:
                refs[name] = [d[f"y{i}"] for i in range(len(d.files))]
    return refs


def stored_outputs() -> dict:
    """The stored tf_keras outputs, as :func:`tf_keras_outputs` returns them (a missing entry: text)."""
    refs = {name: [] for name in NAMES}
    with np.load(REFERENCES) as d:
        for key in sorted(d.files, key=lambda k: (k.rsplit("/y", 1)[0], int(k.rsplit("/y", 1)[1]))):
            stem, _ = key.rsplit("/y", 1)
            refs.setdefault(stem + ".h5", []).append(d[key])
    return {name: v if v else f"no stored tf_keras output for {name} in {REFERENCES.name}" for name, v in refs.items()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The tf_keras outputs (stored) and the inputs they were computed on (regenerated: deterministic)."""
    inputs = tmp_path_factory.mktemp("user_ref") / "inputs"
    inputs.mkdir()
    for name in NAMES:
        np.savez(inputs / (name[:-3] + ".npz"), **{f"x{i}": x for i, x in enumerate(make_inputs(name))})
    return {"outputs": stored_outputs(), "inputs": inputs}


@pytest.fixture(scope="module")
def converted(reference, tmp_path_factory):
    """{fixture name: (.keras path | error text, outputs | error text)}: the whole corpus converted in
    one gruconv process, then loaded and run in one fresh Keras 3 process."""
    base = tmp_path_factory.mktemp("user_conv")
    jobs = [(str(USER / n), str(base / (n[:-3] + ".keras")),
             str(USER / CASES[n]["config_file"]) if CASES[n]["config_file"] else None) for n in NAMES]
    res = subprocess.run([sys.executable, "-c", CONVERT_SCRIPT, json.dumps(jobs)], env=_env(legacy=False),
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    runs = [(out, str(reference["inputs"] / (Path(src).stem + ".npz")), out + ".npz", False)
            for src, out, _ in jobs if Path(out).is_file()]
    planted = str(base / "text_classifier.keras")
    runs.append((planted, str(reference["inputs"] / "text_classifier.npz"), planted + ".perturbed.npz", True))
    res = subprocess.run([sys.executable, "-c", KERAS3_SCRIPT, json.dumps(runs)], env=_env(legacy=False),
                         capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stderr[-3000:]
    out = {}
    for name, (_, path, _) in zip(NAMES, jobs):
        err = Path(path + ".error")
        if err.exists():
            out[name] = (err.read_text(), None)
        elif not Path(path).is_file():
            out[name] = ("exit 0 but no output file", None)
        else:
            out[name] = (path, _outputs(path + ".npz"))
    out["planted"] = _outputs(planted + ".perturbed.npz")
    return out


def _outputs(npz: str):
    if Path(npz + ".error").exists():
        return "Keras 3 load_model/predict failed: " + _last_line(Path(npz + ".error").read_text())
    with np.load(npz) as d:
        return [d[f"y{i}"] for i in range(len(d.files))]


def compare(ref: list[np.ndarray], got: list[np.ndarray], tol: float) -> tuple[bool, str]:
    """(within tolerance, per-output report)."""
    if len(ref) != len(got):
        return False, f"{len(got)} outputs, reference has {len(ref)}"
    ok, lines = True, []
    for i, (r, g) in enumerate(zip(ref, got)):
        if r.shape != g.shape:
            ok = False
            lines.append(f"output {i}: shape {g.shape}, reference {r.shape}")
            continue
        err = float(np.max(np.abs(r.astype(np.float64) - g.astype(np.float64)))) if r.size else 0.0
        good = bool(np.isfinite(err) and err <= tol)
        ok &= good
        lines.append(f"output {i} {tuple(r.shape)} {r.dtype}->{g.dtype}: max abs {err:.3e} "
                     f"(tol {tol:g}) {'ok' if good else 'DIFFERS'}")
    return ok, "\n".join(lines)


# --------------------------------------------------------------------------- tests


def test_corpus_is_small_and_complete():
    files = sorted(p.name for p in USER.iterdir())
    assert sum(p.stat().st_size for p in USER.iterdir()) < 1_500_000
    for name, entry in CASES.items():
        assert name in files
        if entry["config_file"]:
            assert entry["config_file"] in files
    # Masks directly into a CuDNNGRU could never be saved by tf_keras (recorded by the generator).
    assert all(v and "Masking is not supported for CuDNN RNNs" in v for v in MANIFEST["unbuildable"].values())


@pytest.mark.parametrize("name", NAMES)
def test_user_model_converts_loads_and_matches(name, reference, converted):
    entry = CASES[name]
    ref = reference["outputs"][name]
    assert not isinstance(ref, str), f"tf_keras reference failed (test setup problem):\n{ref}"
    path, got = converted[name]
    assert got is not None, f"gruconv convert failed: {path}"
    assert not isinstance(got, str), got
    ok, report = compare(ref, got, entry["tolerance"])
    print(f"{name}:\n{report}")
    assert ok, f"{name}: converted model computes something else than the original\n{report}"


def test_planted_error_is_caught(reference, converted):
    """The comparison is not vacuous: +0.05 on one recurrent weight of the converted model shows."""
    name = "text_classifier.h5"
    ref = reference["outputs"][name]
    ok, report = compare(ref, converted[name][1], CASES[name]["tolerance"])
    assert ok, report
    ok, report = compare(ref, converted["planted"], CASES[name]["tolerance"])
    print(report)
    assert not ok, f"a perturbed weight went unnoticed:\n{report}"


@pytest.mark.slow
def test_stored_references_are_tf_keras_own_outputs(tmp_path):
    """The stored reference is what tf_keras computes today, on these inputs: recomputed live.

    Equal to float32 rounding (1e-6 absolute, i.e. a few ulps of these outputs): a CPU with other
    vector instructions may sum in another order, a changed input or model differs by far more."""
    live, stored = tf_keras_outputs(tmp_path), stored_outputs()
    for name in NAMES:
        assert not isinstance(live[name], str), live[name]
        ok, report = compare(live[name], stored[name], 1e-6)
        assert ok, f"{name}: stored reference is not tf_keras's output now\n{report}"
    planted = [y.copy() for y in stored["text_classifier.h5"]]
    planted[0].flat[0] += 1e-5
    assert not compare(live["text_classifier.h5"], planted, 1e-6)[0]


if __name__ == "__main__":  # python tests/readers/test_user_models.py --write-references
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description="Rewrite fixtures/keras_user/reference_outputs.npz with tf_keras.")
    ap.add_argument("--write-references", action="store_true", required=True)
    ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        refs = tf_keras_outputs(Path(tmp))
    bad = {n: r for n, r in refs.items() if isinstance(r, str)}
    if bad:
        sys.exit("tf_keras failed on: " + ", ".join(bad))
    np.savez(REFERENCES, **{f"{n[:-3]}/y{i}": y for n, ys in refs.items() for i, y in enumerate(ys)})
    print(f"wrote {REFERENCES} ({len(refs)} models)")
