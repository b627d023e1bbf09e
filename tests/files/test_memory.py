"""Memory: claimed sizes are refused from headers; a real conversion holds no extra copy of the model.

Tiers: the header refusals (no Keras in the child) run in ``make test``; the big-model measurements
(TensorFlow in every child) are marked ``slow`` (``make test-all``).

Peak resident memory of one ``gruconv`` run is measured with
``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` in a small wrapper process that runs the
command as its only child (``RUSAGE_CHILDREN`` is a maximum over all waited-for children, so
each measurement gets a fresh wrapper).  Baselines are measured the same way:

* ``import``: a process that only imports Keras (through ``gruconv.keras3.runtime``, as convert does);
* ``tiny``: converting ``fixtures/keras/sequential.h5`` (a 20 KB model): import plus Keras's
  fixed costs of building, loading and saving a model;
* ``numpy``: a process that imports gruconv's reader side only (h5py, NumPy) — for ``inspect``.

The big model is generated here (h5py only, legacy Keras layout, 3 × Bidirectional(CuDNNGRU(512))
on 32 inputs: 11.1 M parameters, 44.5 MB of float32 weights).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "fixtures" / "keras"
GRUCONV = Path(sys.executable).with_name("gruconv")
MB = 2**20

_WRAPPER = (
    "import resource, subprocess, sys, json\n"
    "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
    "print(json.dumps({'maxrss_kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,\n"
    "                  'code': r.returncode, 'stderr': r.stderr[-2000:]}))\n"
)


def peak_rss(argv: list, cwd=None) -> tuple:
    """(peak RSS in bytes, exit code, stderr) of ``argv`` run as the only child of a fresh process."""
    r = subprocess.run([sys.executable, "-c", _WRAPPER, *map(str, argv)], capture_output=True, text=True,
                       timeout=600, cwd=cwd)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    return d["maxrss_kb"] * 1024, d["code"], d["stderr"]


def make_big_cudnngru_h5(path: Path, *, units: int = 512, layers: int = 3, input_size: int = 32,
                         seed: int = 0) -> int:
    """A legacy Keras HDF5 model: Input -> ``layers`` x Bidirectional(CuDNNGRU(units, rs)); returns weight bytes.

    Built with h5py in the layout of ``fixtures/keras/bidir_concat.h5`` (tf_keras 2.21's writer).
    """
    import h5py

    with h5py.File(FIX / "bidir_concat.h5", "r") as f:
        cfg = json.loads(f.attrs["model_config"])
    inp, bidir = cfg["config"]["layers"]
    inp["config"]["batch_input_shape"] = [None, None, input_size]
    model_layers = [inp]
    prev = "input_1"
    names = []
    for k in range(layers):
        b = json.loads(json.dumps(bidir))
        name = "bidirectional" if k == 0 else f"bidirectional_{k}"
        inner = "cu_dnngru" if k == 0 else f"cu_dnngru_{k}"
        b["name"] = b["config"]["name"] = name
        b["config"]["layer"]["config"]["name"] = inner
        b["config"]["layer"]["config"]["units"] = units
        b["inbound_nodes"] = [[[prev, 0, 0, {}]]]
        model_layers.append(b)
        names.append((name, inner))
        prev = name
    cfg["config"]["layers"] = model_layers
    cfg["config"]["output_layers"] = [[prev, 0, 0]]
    rng = np.random.default_rng(seed)
    total = 0
    s = h5py.string_dtype()
    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = "2.21.0"
        f.attrs["backend"] = "tensorflow"
        f.attrs["model_config"] = json.dumps(cfg).encode()
        mw = f.create_group("model_weights")
        mw.attrs["backend"] = "tensorflow"
        mw.attrs["keras_version"] = "2.21.0"
        mw.attrs["layer_names"] = np.array(["input_1"] + [n for n, _ in names], dtype=s)
        for empty in ("input_1", "top_level_model_weights"):
            mw.create_group(empty).attrs["weight_names"] = np.array([], dtype=np.float64)
        in_size = input_size
        for name, inner in names:
            g = mw.create_group(name)
            wnames = []
            for d in ("forward", "backward"):
                for role, shape in (("kernel", (in_size, 3 * units)), ("recurrent_kernel", (units, 3 * units)),
                                    ("bias", (6 * units,))):
                    wname = f"{name}/{d}_{inner}/{role}:0"
                    data = rng.uniform(-0.1, 0.1, shape).astype(np.float32)
                    g.create_dataset(wname, data=data)
                    total += data.nbytes
                    wnames.append(wname)
            g.attrs["weight_names"] = np.array(wnames, dtype=s)
            in_size = 2 * units
    return total


@pytest.fixture(scope="module")
def big_model(tmp_path_factory) -> tuple:
    d = tmp_path_factory.mktemp("big")
    path = d / "big_cudnngru.h5"
    return path, make_big_cudnngru_h5(path)


@pytest.fixture(scope="module")
def reader_baseline() -> int:
    """Peak RSS of a process importing gruconv's reader side only (h5py, NumPy): no Keras, cheap."""
    npy, code, err = peak_rss([sys.executable, "-c", "import gruconv.api, gruconv.readers.keras_h5, h5py"])
    assert code == 0, err
    return npy


@pytest.fixture(scope="module")
def keras_baselines(tmp_path_factory) -> dict:
    """Peak RSS of importing Keras, and of converting the 20 KB fixture (both import TensorFlow)."""
    d = tmp_path_factory.mktemp("base")
    imp, code, err = peak_rss([sys.executable, "-c", "from gruconv.keras3.runtime import keras; keras()"])
    assert code == 0, err
    tiny, code, err = peak_rss([GRUCONV, "convert", FIX / "sequential.h5", d / "tiny.keras"])
    assert code == 0, err
    return {"import": imp, "tiny": tiny}


#: Measured spread of (convert peak - plain load_model peak) / model bytes: see the docstring of
#: test_conversion_peaks_within_one_and_a_half_models_of_loading_its_output.  The bound is 1.5 x the model.
CONVERT_OVER_LOAD_BOUND = 1.5


@pytest.mark.slow  # three TensorFlow processes and a 44.5 MB model; a measurement, not a behaviour check
def test_conversion_peaks_within_one_and_a_half_models_of_loading_its_output(big_model, keras_baselines, tmp_path):
    """The conversion's peak RSS exceeds what a plain ``keras.saving.load_model`` of its own output
    needs by at most 1.5 x the model's weight bytes: the converter holds at most about one extra copy
    of the weights beyond what loading the output needs (measured: 0.25 x median).

    Why this comparison: the conversion ends by loading its own output with plain
    ``keras.saving.load_model`` (the output contract), so that load is part of its peak; both are
    measured the same way (fresh wrapper process, ``ru_maxrss``), and the Keras import and load
    costs, which vary with Keras/TensorFlow versions, cancel.  The old bound, ``max(3 x model, load
    + 0.5 x model)`` above the import baseline, sat inside the measured spread (a clean run
    measured 4.44 x against a 4.38 x bound, issue 17).

    Measured spread (``.venv/bin/python tests/files/test_memory.py RUNS DIR``: import, convert, load, each a
    fresh process; 2-core machine shared with other test runs), in multiples of the 44.5 MB model:
    10 runs, 1-min load average 5.6-9.5, 2026-11-27:
    convert peak - load peak: min -0.06, median 0.25, max 0.57 (the asserted quantity);
    convert above the import baseline: min 4.10, median 4.22, max 4.70 (the old bound was
    max(3, load + 0.5) = ~4.2-4.7, i.e. inside this range: it failed by chance);
    load above the import baseline: min 3.74, median 4.12, max 4.30.
    Bound 1.5 = max + 1.5 x (max - min) = 1.52, to one decimal; the old 0.5 sat inside the range.
    """
    path, model_bytes = big_model
    out = tmp_path / "big.keras"
    peak, code, err = peak_rss([GRUCONV, "convert", path, out])
    assert code == 0, err
    assert out.stat().st_size > model_bytes  # every weight made it into the archive
    load_peak, code, err = peak_rss([sys.executable, "-c",
                                     f"from gruconv.keras3.runtime import keras; keras().saving.load_model({str(out)!r})"])
    assert code == 0, err
    above_import = peak - keras_baselines["import"]
    above_tiny = peak - keras_baselines["tiny"]
    load_above = load_peak - keras_baselines["import"]
    over_load = (peak - load_peak) / model_bytes
    print(f"\nmodel: {model_bytes / MB:.1f} MiB of weights ({path.stat().st_size / MB:.1f} MiB file)"
          f"\npeak RSS, convert big model:       {peak / MB:8.1f} MiB"
          f"\npeak RSS, import Keras only:       {keras_baselines['import'] / MB:8.1f} MiB"
          f"\npeak RSS, convert 20 KB fixture:   {keras_baselines['tiny'] / MB:8.1f} MiB"
          f"\nabove the import baseline:         {above_import / MB:8.1f} MiB = {above_import / model_bytes:.2f} x model"
          f"\nabove the tiny-conversion baseline:{above_tiny / MB:8.1f} MiB = {above_tiny / model_bytes:.2f} x model"
          f"\nplain load_model of the output:    {load_above / MB:8.1f} MiB = {load_above / model_bytes:.2f} x model"
          f"\nconvert peak - load peak:          {over_load:.2f} x model (bound {CONVERT_OVER_LOAD_BOUND} x)")
    assert over_load <= CONVERT_OVER_LOAD_BOUND, (
        f"conversion peaked {over_load:.2f} x the model above a plain load of its output "
        f"(bound {CONVERT_OVER_LOAD_BOUND} x)")


@pytest.mark.slow  # a 44.5 MB model generated and read; a measurement
def test_inspect_of_the_big_model_peaks_under_three_times_the_model_above_the_reader_baseline(big_model,
                                                                                               reader_baseline):
    """``inspect`` of the 44.5 MB model peaks at most 3 x the model above the reader-only baseline.

    Measured (same runs as the conversion test): min 0.88, median 0.89, max 0.89 x the model (10 runs); 3 x leaves a margin of
    several times the spread."""
    path, model_bytes = big_model
    peak, code, err = peak_rss([GRUCONV, "inspect", path])
    assert code == 0, err
    above = peak - reader_baseline
    print(f"\ninspect big model: peak {peak / MB:.1f} MiB, {above / MB:.1f} MiB above the reader-only baseline "
          f"({above / model_bytes:.2f} x model)")
    assert above <= 3 * model_bytes


@pytest.mark.parametrize("command", ["inspect", "convert"])
@pytest.mark.parametrize("bomb", ["terabytes", "sparse_gru"])
def test_claimed_sizes_are_refused_from_the_header_within_32_mib(bomb, command, reader_baseline, tmp_path):
    """A file claiming huge tensors: refused before allocating (peak RSS under 32 MiB above the
    reader-only baseline; a refusal that imported Keras or allocated the claim would be hundreds of
    MiB or GiB above it, so the margin dwarfs process-to-process noise of a few MiB)."""
    import h5py

    src = tmp_path / "bomb.h5"
    src.write_bytes((FIX / "sequential.h5").read_bytes())
    k1 = "model_weights/cu_dnngru/cu_dnngru"
    with h5py.File(src, "r+") as f:
        if bomb == "terabytes":  # 24 TiB declared, nothing stored
            del f[k1 + "/kernel:0"]
            f[k1].create_dataset("kernel:0", shape=(2**38, 24), dtype="f4", chunks=(1, 24))
        else:  # a self-consistent 20000-unit GRU: 4.8 GB declared (under any size cap), 0 bytes stored
            H = 20000
            cfg = json.loads(f.attrs["model_config"])
            cfg["config"]["layers"][1]["config"]["units"] = H
            f.attrs["model_config"] = json.dumps(cfg).encode()
            for w, shape in (("kernel:0", (6, 3 * H)), ("recurrent_kernel:0", (H, 3 * H)), ("bias:0", (6 * H,))):
                del f[k1 + "/" + w]
                f[k1].create_dataset(w, shape=shape, dtype="f4", chunks=True)
    assert src.stat().st_size < 100_000
    argv = [GRUCONV, command, src] + ([tmp_path / "out.keras"] if command == "convert" else [])
    peak, code, err = peak_rss(argv)
    assert code == 3, err
    assert "refused" in err and err.count("\n") == 1, err
    above = peak - reader_baseline
    print(f"\n{bomb} via {command}: peak {peak / MB:.1f} MiB, {above / MB:+.1f} MiB vs the reader-only baseline")
    assert above < 32 * MB
    assert not (tmp_path / "out.keras").exists()


def test_checkpoint_claiming_terabytes_is_refused_within_32_mib(reader_baseline, tmp_path):
    """A TF1 index entry claiming a 4 TiB opaque buffer (the data file holds 2 KB): peak RSS under
    32 MiB above the reader-only baseline (same margin argument as the HDF5 claims above)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the support modules
    from make_bad_inputs import read_bundle, write_bundle

    ts = read_bundle(ROOT / "fixtures" / "tf1" / "opaque_only_skip_uni")
    write_bundle(tmp_path / "ckpt" / "model.ckpt", ts, override={"cudnn_gru/opaque_kernel": ((2**40,), 2**42)})
    for argv in ([GRUCONV, "inspect", tmp_path / "ckpt"],
                 [GRUCONV, "convert", tmp_path / "ckpt", tmp_path / "out.keras", "--num-units", "7"]):
        peak, code, err = peak_rss(argv)
        assert code in (0, 3), err
        assert code == 0 or err.count("\n") == 1, err
        above = peak - reader_baseline
        print(f"\ncheckpoint claiming 4 TiB, {argv[1]}: exit {code}, peak {peak / MB:.1f} MiB, "
              f"{above / MB:+.1f} MiB vs the reader-only baseline")
        assert above < 32 * MB
    assert not (tmp_path / "out.keras").exists()


DENSE_IN, DENSE_WIDE, GZIP_CHUNK = 5, 50_000_000, 262_144


def make_dense_gzip_bomb(path: Path) -> int:
    """Issue 45 item 7's file (``gzip_bomb_1gb.h5``): ``fixtures/keras/sequential.h5`` (two CuDNNGRU layers
    then a Dense, tf_keras's writer) with the Dense widened to 50 M units: a ``(5, 50_000_000)`` float32 kernel
    in ``(5, 262_144)``-element gzip-1 chunks and its bias in ``(262_144,)`` chunks, zeros, written
    pre-compressed (``write_direct_chunk``).  ~5 MB stored, 1.2 GB declared; returns the parameter bytes.
    Its stored size under ``keras3/archive.py``'s ``IN_MEMORY_MAX`` is what made the ``.keras`` writer assemble
    it in memory (2.4 GB peak RSS at 208fb0b)."""
    import zlib

    import h5py

    path.write_bytes((FIX / "sequential.h5").read_bytes())
    with h5py.File(path, "r+") as f:
        cfg = json.loads(f.attrs["model_config"])
        dense = [layer for layer in cfg["config"]["layers"] if layer["class_name"] == "Dense"][0]
        dense["config"]["units"] = DENSE_WIDE
        f.attrs["model_config"] = json.dumps(cfg).encode()
        g = f["model_weights/dense/dense"]
        del g["kernel:0"], g["bias:0"]
        k = g.create_dataset("kernel:0", shape=(DENSE_IN, DENSE_WIDE), dtype="f4", compression="gzip",
                             compression_opts=1, chunks=(DENSE_IN, GZIP_CHUNK))
        b = g.create_dataset("bias:0", shape=(DENSE_WIDE,), dtype="f4", compression="gzip", compression_opts=1,
                             chunks=(GZIP_CHUNK,))
        kblob, bblob = zlib.compress(bytes(DENSE_IN * GZIP_CHUNK * 4), 1), zlib.compress(bytes(GZIP_CHUNK * 4), 1)
        for j in range(0, DENSE_WIDE, GZIP_CHUNK):
            k.id.write_direct_chunk((0, j), kblob, 0)
            b.id.write_direct_chunk((j,), bblob, 0)
    return (DENSE_IN + 1) * DENSE_WIDE * 4


@pytest.fixture(scope="module")
def dense_gzip_bomb(tmp_path_factory) -> tuple:
    path = tmp_path_factory.mktemp("gzip") / "gzip_bomb_1gb.h5"
    return path, make_dense_gzip_bomb(path)


@pytest.mark.slow  # 1.2 GB decompressed and written per output (~20-30 s each); a measurement
@pytest.mark.parametrize("output", ["m.keras", "m.h5", "m.safetensors"])
def test_a_compressed_wide_dense_converts_within_half_its_parameter_bytes(dense_gzip_bomb, reader_baseline, output,
                                                                          tmp_path):
    """Issue 45 item 7: the 5 MB file declaring 1.2 GB converts (exit 0) with peak RSS at most 0.5 x its
    parameter bytes above the reader-only baseline, as the large GRU model does (``docs/streaming.md``).

    Measured (this machine, ``/usr/bin/time -v`` of the whole process, 2026-12-07): ``.keras`` 2,397 MB at
    208fb0b (the file's 5 MB size taken for the weights' size: assembled in memory), 124 MB after the size
    hint counted the declared bytes (0.06 x above the baseline); legacy ``.h5`` 460 MB (a 200 MB row read
    whole, twice held) before sub-row copying, 192 MB after (0.12 x); ``.safetensors`` 1,224 MB (every tensor
    handed whole to ``safetensors.numpy.save_file``) before the streamed writer, 83 MB after.  The bound is the
    goal, 0.5 x: four times the larger measurement's distance above the baseline, a quarter of what the old path
    took."""
    path, param_bytes = dense_gzip_bomb
    out = tmp_path / output
    peak, code, err = peak_rss([GRUCONV, "convert", path, out])
    assert code == 0, err
    if output.endswith((".keras", ".safetensors")):
        assert out.stat().st_size > param_bytes  # every weight made it into the (uncompressed) file
    else:  # the legacy .h5 output keeps the input's gzip: its weights by their declared shapes
        import h5py

        with h5py.File(out, "r") as f:
            shapes = []
            f.visititems(lambda n, o: shapes.append(o.shape) if isinstance(o, h5py.Dataset) else None)
        assert (DENSE_IN, DENSE_WIDE) in shapes and (DENSE_WIDE,) in shapes, shapes
    above = peak - reader_baseline
    print(f"\n{output}: peak {peak / MB:.0f} MiB, {above / param_bytes:.3f} x the {param_bytes / MB:.0f} MiB of "
          "parameters above the reader-only baseline")
    assert above <= 0.5 * param_bytes


def _spread(runs: int, work: Path) -> None:
    """Re-measure the spread quoted in the docstrings: ``runs`` repeats of every measured quantity."""
    import statistics
    import time

    work.mkdir(parents=True, exist_ok=True)
    big = work / "big.h5"
    model_bytes = make_big_cudnngru_h5(big)
    rows = []
    for i in range(runs):
        t0 = time.time()
        r = {}
        for key, argv in (("import", [sys.executable, "-c", "from gruconv.keras3.runtime import keras; keras()"]),
                          ("numpy", [sys.executable, "-c", "import gruconv.api, gruconv.readers.keras_h5, h5py"]),
                          ("convert", [GRUCONV, "convert", big, work / f"big{i}.keras"]),
                          ("load", [sys.executable, "-c", "from gruconv.keras3.runtime import keras; "
                                    f"keras().saving.load_model({str(work / f'big{i}.keras')!r})"]),
                          ("inspect", [GRUCONV, "inspect", big])):
            r[key], code, err = peak_rss(argv)
            assert code == 0, err
        (work / f"big{i}.keras").unlink()
        r.update(conv_minus_load_x=(r["convert"] - r["load"]) / model_bytes,
                 conv_above_import_x=(r["convert"] - r["import"]) / model_bytes,
                 load_above_import_x=(r["load"] - r["import"]) / model_bytes,
                 inspect_above_numpy_x=(r["inspect"] - r["numpy"]) / model_bytes,
                 secs=time.time() - t0, loadavg=Path("/proc/loadavg").read_text().split()[0])
        rows.append(r)
        print(json.dumps(r), flush=True)
    for k in ("conv_minus_load_x", "conv_above_import_x", "load_above_import_x", "inspect_above_numpy_x"):
        v = [r[k] for r in rows]
        print(f"{k}: min {min(v):.3f} median {statistics.median(v):.3f} max {max(v):.3f}")


if __name__ == "__main__":  # .venv/bin/python tests/files/test_memory.py RUNS WORK_DIR
    _spread(int(sys.argv[1]), Path(sys.argv[2]))
