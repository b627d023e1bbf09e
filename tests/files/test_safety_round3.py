"""Safety round 3 (issue 23): what a copied group carries, checksums, endianness, signals, full disks.

Every case asserts what the hostile corpus asserts: the exit code, exactly one line on stderr, no
traceback, inputs byte-identical, nothing left in the output directory or ``$TMPDIR`` on failure,
and no process left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import uuid
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import FIXTURES

GRUCONV = Path(sys.executable).with_name("gruconv")
SEQ = FIXTURES / "keras" / "sequential.h5"


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _run(argv, tmp_path: Path, *, preexec=None, timeout=300, env_extra=None):
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmpdir), "CUDA_VISIBLE_DEVICES": "", **(env_extra or {})}
    r = subprocess.run([str(GRUCONV), *map(str, argv)], capture_output=True, text=True, env=env,
                       timeout=timeout, preexec_fn=preexec, stdin=subprocess.DEVNULL)
    return r, tmpdir


def _one_line_failure(r, code: int) -> None:
    assert r.returncode == code, (r.returncode, r.stderr[-2000:])
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr


def _copy(src: Path, tmp_path: Path, name: str) -> Path:
    dst = tmp_path / "in" / name
    dst.parent.mkdir(exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


# --------------------------------------------------------------------------- 1. copied groups

def _no_external_references(path: Path) -> None:
    """Nothing in ``path`` points outside it: no external storage, no virtual dataset, no external link."""
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            link = obj.parent.get(name.rsplit("/", 1)[-1], getlink=True) if "/" in name else f.get(name, getlink=True)
            assert not isinstance(link, (h5py.ExternalLink, h5py.SoftLink)), name
            if isinstance(obj, h5py.Dataset):
                assert not obj.external, name
                assert not obj.is_virtual, name
        f.visititems(visit)


@pytest.mark.parametrize("target", ["o.h5", "o.keras"])
@pytest.mark.parametrize("kind", ["external_storage", "virtual", "external_link", "soft_link"])
def test_copied_top_level_weights_carry_no_external_reference(kind, target, tmp_path):
    """A member of ``top_level_model_weights`` that reads another file (HDF5 external storage, a virtual
    dataset, an external link) or another object (a soft link): h5py's ``copy`` (H5Ocopy) carried it
    into ``out.h5`` unchecked, and tf_keras's ``load_weights`` on the output would read ``/etc/passwd``.
    Decided: refused in one line, exit 3, naming the member (``h5safe.copy_group``)."""
    src = _copy(SEQ, tmp_path, "w.h5")
    secret = tmp_path / "secret.bin"
    secret.write_bytes(b"S" * 64)
    with h5py.File(src, "r+") as f:
        g = f["model_weights/top_level_model_weights"]
        if kind == "external_storage":
            g.create_dataset("leak", shape=(16,), dtype="u1", external=[(str(secret), 0, 16)])
        elif kind == "virtual":
            with h5py.File(tmp_path / "other.h5", "w") as o:
                o["x"] = np.arange(4, dtype="f4")
            layout = h5py.VirtualLayout(shape=(4,), dtype="f4")
            layout[:] = h5py.VirtualSource(str(tmp_path / "other.h5"), "x", shape=(4,))
            g.create_virtual_dataset("leak", layout)
        elif kind == "external_link":
            g["leak"] = h5py.ExternalLink(str(tmp_path / "other.h5"), "/x")
        else:
            g["leak"] = h5py.SoftLink("/model_weights/dense")
    before = _digest(src)
    out = tmp_path / "out" / target
    out.parent.mkdir()
    r, tmpdir = _run(["convert", src, out], tmp_path)
    assert _digest(src) == before
    _one_line_failure(r, 3)
    assert "top_level_model_weights/leak" in r.stderr
    assert list(out.parent.iterdir()) == [] and list(tmpdir.iterdir()) == []


def test_copied_top_level_weights_are_rewritten_with_their_values(tmp_path):
    """What ``top_level_model_weights`` legitimately holds is copied value for value -- plain, gzip'd
    and big-endian datasets, nested groups, attributes -- and the copy is plain local data; the
    checker used here catches an external dataset planted in a file (so its silence means something)."""
    src = _copy(SEQ, tmp_path, "w.h5")
    rng = np.random.default_rng(0)
    plain, zipped, big = (rng.standard_normal(s).astype("f4") for s in ((3, 5), (40, 7), (6,)))
    with h5py.File(src, "r+") as f:
        g = f["model_weights/top_level_model_weights"]
        g.attrs["note"] = "kept"
        g["plain"] = plain
        g.create_dataset("inner/zipped", data=zipped, compression="gzip", chunks=(8, 7))
        g["big"] = big.astype(">f4")
    out = tmp_path / "o.h5"
    r, tmpdir = _run(["convert", src, out], tmp_path)
    assert r.returncode == 0, r.stderr
    _no_external_references(out)
    with h5py.File(out, "r") as f:
        g = f["top_level_model_weights"]
        assert g.attrs["note"] == "kept"
        np.testing.assert_array_equal(g["plain"][...], plain)
        np.testing.assert_array_equal(g["inner/zipped"][...], zipped)
        np.testing.assert_array_equal(g["big"][...], big)
        assert g["big"].dtype.isnative and not g["plain"].external
    planted = tmp_path / "planted.h5"
    shutil.copyfile(out, planted)
    with h5py.File(planted, "r+") as f:
        f.create_dataset("leak", shape=(4,), dtype="u1", external=[(str(src), 0, 4)])
    with pytest.raises(AssertionError):
        _no_external_references(planted)


# --------------------------------------------------------------------------- 2. checksums

@pytest.mark.parametrize("target", ["o.h5", "o.keras"])
def test_a_failing_fletcher32_checksum_is_an_input_error(target, tmp_path):
    """A Dense kernel stored with fletcher32 and one flipped byte: every output format refuses (exit 3)
    instead of writing an unreadable file."""
    src = tmp_path / "in" / "w.h5"
    src.parent.mkdir()
    with h5py.File(SEQ, "r") as a, h5py.File(src, "w") as b:
        for k, v in a.attrs.items():
            b.attrs[k] = v
        a.copy("model_weights", b)
        name = "model_weights/dense/dense/kernel:0"
        data = b[name][...]
        del b[name]
        b.create_dataset(name, data=data, fletcher32=True, chunks=data.shape)
        offset = b[name].id.get_offset() if b[name].id.get_offset() is not None else None
        if offset is None:
            offset = b[name].id.get_chunk_info(0).byte_offset
    raw = bytearray(src.read_bytes())
    raw[offset + 2] ^= 0xFF
    src.write_bytes(bytes(raw))
    out = tmp_path / "out" / target
    out.parent.mkdir()
    r, tmpdir = _run(["convert", src, out], tmp_path)
    _one_line_failure(r, 3)
    assert list(out.parent.iterdir()) == [] and list(tmpdir.iterdir()) == []


def test_an_intact_fletcher32_dataset_converts(tmp_path):
    """The same file without the flipped byte converts (the refusal above is the checksum's)."""
    src = tmp_path / "w.h5"
    with h5py.File(SEQ, "r") as a, h5py.File(src, "w") as b:
        for k, v in a.attrs.items():
            b.attrs[k] = v
        a.copy("model_weights", b)
        name = "model_weights/dense/dense/kernel:0"
        data = b[name][...]
        del b[name]
        b.create_dataset(name, data=data, fletcher32=True, chunks=data.shape)
    out = tmp_path / "o.h5"
    r, _ = _run(["convert", src, out], tmp_path)
    assert r.returncode == 0, r.stderr
    with h5py.File(out, "r") as f:
        np.testing.assert_array_equal(f["dense/dense/kernel:0"][...], data)


# --------------------------------------------------------------------------- 3. endianness

def test_big_endian_weights_convert_like_their_little_endian_twin(tmp_path):
    src = tmp_path / "in" / "be.h5"
    src.parent.mkdir()
    with h5py.File(SEQ, "r") as a, h5py.File(src, "w") as b:
        for k, v in a.attrs.items():
            b.attrs[k] = v
        def put(name, obj):
            if isinstance(obj, h5py.Group):
                g = b.require_group(name)
                for k, v in obj.attrs.items():
                    g.attrs[k] = v
            else:
                b.create_dataset(name, data=obj[...].astype(obj.dtype.newbyteorder(">")))
        a.visititems(put)
    le, be = tmp_path / "le.h5", tmp_path / "be_out.h5"
    r1, _ = _run(["convert", SEQ, le], tmp_path)
    r2, _ = _run(["convert", src, be], tmp_path)
    assert r1.returncode == 0, r1.stderr
    assert r2.returncode == 0, r2.stderr
    with h5py.File(le, "r") as a, h5py.File(be, "r") as b:
        names = []
        a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        assert names
        for n in names:
            assert b[n].dtype.isnative, (n, b[n].dtype)
            np.testing.assert_array_equal(a[n][...], b[n][...].astype(a[n].dtype))
        # the comparison sees a one-ulp change in any weight (the GRU's transformed ones included)
        n = next(x for x in names if "gru" in x and x.endswith("kernel:0"))
        with pytest.raises(AssertionError):
            np.testing.assert_array_equal(a[n][...], np.nextafter(b[n][...], np.float32(np.inf)))


# --------------------------------------------------------------------------- 4. signals

@pytest.mark.slow  # eight conversions
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_mid_conversion_cleans_up_and_exits_with_the_signal_code(sig, code, tmp_path):
    """Sent at several moments (during imports, while building/saving): either the conversion had
    finished (exit 0, complete output) or it stops with 128+signal, leaving nothing in the output
    directory or ``$TMPDIR``."""
    for delay in (0.3, 1.5, 3.0, 5.0):
        out_dir = tmp_path / f"out{delay}"
        out_dir.mkdir()
        tmpdir = tmp_path / f"tmp{delay}"
        tmpdir.mkdir()
        env = {**os.environ, "TMPDIR": str(tmpdir), "CUDA_VISIBLE_DEVICES": ""}
        p = subprocess.Popen([str(GRUCONV), "convert", str(SEQ), str(out_dir / "o.keras")], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             stdin=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(sig)
        _, err = p.communicate(timeout=120)
        if p.returncode == 0:
            assert [x.name for x in out_dir.iterdir()] == ["o.keras"]
        else:
            assert p.returncode == code, (delay, p.returncode, err[-2000:])
            assert "Traceback" not in err, err[-2000:]
            assert list(out_dir.iterdir()) == [], (delay, list(out_dir.iterdir()))
        assert list(tmpdir.iterdir()) == [], (delay, list(tmpdir.iterdir()))


def _marked_processes(mark: str) -> list:
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if mark.encode() in (d / "environ").read_bytes():
                found.append(int(d.name))
        except OSError:
            continue
    return found


@pytest.mark.slow  # starts two workers (forked, or spawned where forking is not safe)
def test_batch_workers_stop_when_the_main_process_dies(tmp_path):
    """``--jobs 2`` whose main process is SIGKILLed: the workers (and any resource tracker) end too."""
    roots = tmp_path / "in"
    roots.mkdir()
    for i in range(150):  # enough work to be mid-run when the kill comes (forked workers are quick: issue 20)
        shutil.copyfile(SEQ, roots / f"m{i}.h5")
    mark = f"GRUCONV_TEST_MARK={uuid.uuid4().hex}"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", mark.split("=")[0]: mark.split("=")[1]}
    p = subprocess.Popen([str(GRUCONV), "convert", str(roots), "--out-dir", str(tmp_path / "out"), "--jobs", "2"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and len(_marked_processes(mark)) < 3:  # main and two workers
        time.sleep(0.05)
    p.kill()
    p.wait()
    deadline = time.time() + 30
    while time.time() < deadline and _marked_processes(mark):
        time.sleep(0.5)
    left = _marked_processes(mark)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert left == [], f"processes left running after the main process died: {left}"


@pytest.mark.slow  # starts two workers (forked, or spawned where forking is not safe)
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_a_batch_stops_its_workers_and_leaves_only_complete_outputs(sig, code, tmp_path):
    """``--jobs 2``, the signal sent to the main process once its workers run: exit 128+signal in one
    line, every worker and the resource tracker gone, no temporary file in the output tree or
    ``$TMPDIR``; outputs of jobs that finished before the signal stay, each one loadable."""
    roots = tmp_path / "in"
    roots.mkdir()
    # enough work to be mid-run when the signal comes (forked workers convert a small model in ~30 ms)
    for i in range(150):
        shutil.copyfile(SEQ, roots / f"m{i}.h5")
    out, tmpdir = tmp_path / "out", tmp_path / "tmpdir"
    tmpdir.mkdir()
    # What a worker killed mid-job leaves (a SIGKILL after the grace period, or a signal inside a
    # library's file handling), planted beside the last job's output: an interrupted run removes it
    # at once (a conversion to that output would only after a minute: outputs.STALE_AFTER_S).
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out.mkdir()
    last = max(f.stem for f in roots.iterdir())  # the batch runs its inputs in sorted order
    planted = [out / f".{last}.keras.{dead.pid}-abc123.tmp.keras", out / f".gruconv-{dead.pid}-abc123"]
    planted[0].write_bytes(b"partial")
    planted[1].mkdir()
    (planted[1] / "staged.h5").write_bytes(b"partial")
    mark = uuid.uuid4().hex
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmpdir), "GRUCONV_TEST_MARK": mark}
    p = subprocess.Popen([str(GRUCONV), "convert", str(roots), "--out-dir", str(out), "--jobs", "2"],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         stdin=subprocess.DEVNULL)
    deadline = time.time() + 120
    # main and two workers (and a resource tracker when the workers are spawned, not forked: issue 20)
    while time.time() < deadline and len(_marked_processes(mark)) < 3:
        time.sleep(0.05)
    time.sleep(1.0)  # the workers are converting
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    left = _marked_processes(mark)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"processes left running: {left}"
    if p.returncode != 0:  # (all done before the signal: nothing to check but the outputs)
        assert p.returncode == code, (p.returncode, err[-2000:])
        assert "Traceback" not in err, err[-2000:]
        assert [l for l in err.splitlines() if l.startswith("gruconv: error:")] == [err.splitlines()[-1]]
    swept = p.returncode == code and not (out / f"{last}.keras").exists()  # the last job was stopped
    files = [f for f in out.rglob("*") if f.name != ".gruconv.batch.json"  # the run's state
             and (swept or not any(f == q or q in f.parents for q in planted))]
    assert all(f.suffix == ".keras" and not f.name.startswith(".") for f in files), \
        [f.name for f in files if f.suffix != ".keras" or f.name.startswith(".")]
    for f in files:
        zipfile.ZipFile(f).testzip()
    assert list(tmpdir.iterdir()) == []


# --------------------------------------------------------------------------- 5. full disks

def _files_of_at_most(n: int, ignore_xfsz: bool = True):
    def limit():
        if ignore_xfsz:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
    return limit


def test_a_file_size_limit_does_not_kill_gruconv(tmp_path):
    """``ulimit -f`` with SIGXFSZ at its default (kill): gruconv ignores SIGXFSZ itself, so the write
    fails with EFBIG and the conversion ends in one line, exit 3, nothing left (not a core dump)."""
    out = tmp_path / "out" / "o.h5"
    out.parent.mkdir()
    r, tmpdir = _run(["convert", FIXTURES / "keras" / "long_names.h5", out], tmp_path,
                     preexec=_files_of_at_most(64 * 1024, ignore_xfsz=False))
    _one_line_failure(r, 3)
    assert "File too large" in r.stderr
    assert list(out.parent.iterdir()) == [] and list(tmpdir.iterdir()) == []


@pytest.mark.parametrize("fixture,limit,target", [
    ("long_names.h5", 64 * 1024, "o.h5"),     # the legacy writer (libhdf5 once segfaulted closing it)
    ("long_names.h5", 64 * 1024, "o.keras"),  # the working copy in $TMPDIR does not fit
    ("nested.h5", 22000, "o.keras"),          # the working copy fits; Keras's weights file does not
    ("nested.h5", 34000, "o.keras"),          # ... fits too; the .keras zip does not (35 KB)
])
def test_a_full_disk_while_writing_is_one_line_and_leaves_nothing(fixture, limit, target, tmp_path):
    """A file-size limit (``RLIMIT_FSIZE``, SIGXFSZ ignored: ``write()`` fails with EFBIG as on a full
    disk) at several stages of writing: one line naming the cause, exit 3, no crash, nothing left."""
    out = tmp_path / "out" / target
    out.parent.mkdir()
    r, tmpdir = _run(["convert", FIXTURES / "keras" / fixture, out], tmp_path, preexec=_files_of_at_most(limit))
    _one_line_failure(r, 3)
    assert "File too large" in r.stderr
    assert list(out.parent.iterdir()) == [] and list(tmpdir.iterdir()) == []


def test_a_report_whose_parent_is_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r, _ = _run(["convert", SEQ, tmp_path / "o.keras", "--report", blocker / "r.json"], tmp_path)
    assert r.returncode in (2, 3)
    _one_line_failure(r, r.returncode)
    assert not (tmp_path / "o.keras").exists()


# --------------------------------------------------------------------------- 6. sizes and options

def test_jobs_zero_is_one_line(tmp_path):
    r, _ = _run(["convert", FIXTURES / "keras", "--out-dir", tmp_path / "o", "--jobs", "0"], tmp_path)
    _one_line_failure(r, 2)
    assert r.stderr.startswith("gruconv: error: Invalid value for '--jobs'")
    assert not (tmp_path / "o").exists()


def test_every_click_usage_error_is_one_line_and_help_still_prints(tmp_path):
    """Decided with the rest of the CLI: Click's own usage errors look like gruconv's (one
    ``gruconv: error:`` line, exit 2); ``gruconv`` alone and ``--help`` still print the help."""
    for argv in (["convert", "--bogus"], ["--bogus"], ["convert"], ["verify", SEQ, "--reference", "gpu"]):
        r, _ = _run(argv, tmp_path)
        _one_line_failure(r, 2)
        assert r.stderr.startswith("gruconv: error: ") and "--help" in r.stderr
    r, _ = _run([], tmp_path)
    assert "Usage: gruconv" in r.stdout + r.stderr
    r, _ = _run(["convert", "--help"], tmp_path)
    assert r.returncode == 0 and "Usage: gruconv convert" in r.stdout


@pytest.mark.parametrize("count,message", [(10000, "more than 4096 layers"),
                                           (300, "Sequential of 304 layers, more than the 256")])
def test_a_sequential_of_ten_thousand_layers_is_bounded(count, message, tmp_path):
    """Linear activations between the layers of ``sequential.h5``: Keras 3 rebuilds a Sequential per
    added layer (300 layers took 206 s, 10,000 hours), so both are refused by a stated limit, in
    seconds, before Keras is imported (``inputs.MAX_SEQUENTIAL_LAYERS``, ``MAX_LAYERS``)."""
    import json

    src = tmp_path / "in" / "deep.h5"
    src.parent.mkdir()
    with h5py.File(SEQ, "r") as a:
        cfg = json.loads(a.attrs["model_config"])
    layers = cfg["config"]["layers"]
    deep = [l for l in layers if l["class_name"] != "Dense"]
    for i in range(count):
        deep.append({"class_name": "Activation", "config": {"name": f"act_{i}", "activation": "linear",
                                                           "trainable": True, "dtype": "float32"}})
    deep.append(next(l for l in layers if l["class_name"] == "Dense"))
    cfg["config"]["layers"] = deep
    shutil.copyfile(SEQ, src)
    with h5py.File(src, "r+") as f:
        f.attrs["model_config"] = json.dumps(cfg)
    out = tmp_path / "out" / "o.keras"
    out.parent.mkdir()
    t0 = time.time()
    r, tmpdir = _run(["convert", src, out], tmp_path, timeout=120)
    assert time.time() - t0 < 60
    _one_line_failure(r, 3)
    assert message in r.stderr
    assert list(out.parent.iterdir()) == [] and list(tmpdir.iterdir()) == []
