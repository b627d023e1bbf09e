"""Harness and file builders for ``tests/cli/test_hostile.py`` (hostile use of the real CLI).

* :func:`run_cli` runs the installed ``gruconv`` console script in a child process with a
  virtual-memory cap (``RLIMIT_AS``) and a wall-clock timeout; a hang is killed (the whole
  process group, batch workers included) and reported, never waited for.
* :func:`snapshot` records every entry under a directory without following links (files by
  SHA-256, links by target, FIFOs/devices by type), so a test can tell exactly what a run
  created, changed or removed — without ever opening a FIFO.
* :func:`check_contract` turns one run into a list of broken promises (exit code, the one
  ``gruconv: error:`` line, control characters, inputs changed, files left behind ...).
* builders for the hostile files: a gzip-bomb Keras HDF5 file, ``.npz`` bombs, a pickle-bait
  ``.npz``, a TensorBundle with hostile tensor names.

Environment knobs (all optional):

``GRUCONV_HOSTILE_DATA_GB``      memory cap of the child in GiB, ``RLIMIT_DATA`` (heap and private
                                 writable mappings; default 3; a plain convert/verify peaks at ~0.7 GB RSS)
``GRUCONV_HOSTILE_AS_GB``        address-space backstop, ``RLIMIT_AS`` (default 8; TensorFlow's import needs
                                 ~2, and a memory-mapped 2 GB checkpoint shard is address space, not memory)
``GRUCONV_HOSTILE_TIMEOUT``      seconds before a run counts as a hang (default 120)
``GRUCONV_HOSTILE_HANG_TIMEOUT`` the same for the cases of the "hang" class (default 60)
``GRUCONV_HOSTILE_PYTHONPATH``   prepended to the child's PYTHONPATH, e.g. an exported tree
                                 (``git archive HEAD src | tar -x -C /tmp/head``) to test a
                                 fixed revision while ``src/`` is being edited
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import io
import json
import os
import re
import resource
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
GRUCONV = Path(sys.executable).with_name("gruconv")
SETPRIV = shutil.which("setpriv")
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

DATA_LIMIT = int(float(os.environ.get("GRUCONV_HOSTILE_DATA_GB", "3")) * 2**30)
AS_LIMIT = int(float(os.environ.get("GRUCONV_HOSTILE_AS_GB", "8")) * 2**30)
TIMEOUT = float(os.environ.get("GRUCONV_HOSTILE_TIMEOUT", "120"))
HANG_TIMEOUT = float(os.environ.get("GRUCONV_HOSTILE_HANG_TIMEOUT", "60"))
EXTRA_PYTHONPATH = os.environ.get("GRUCONV_HOSTILE_PYTHONPATH", "")

#: Names gruconv gives its temporary files/directories (outputs.atomic_path, staging_dir).
TEMP_NAME = re.compile(r"^\..+\.tmp|^\.gruconv-|\.tmp[^/]*$")
#: A control character other than tab (raw newlines are caught by the one-line rule).
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f]")
#: Signs of an uncaught exception.
TRACEBACK = re.compile(r"Traceback \(most recent call last\)|^\s+File \"|^\w+(Error|Exception): ", re.M)
#: Batch mode's record of successful conversions inside --out-dir (for --skip-existing): part of its output.
BATCH_STATE = ("*.gruconv.batch.json", ".gruconv.batch.json")
#: Lines batch mode prints per input on stderr.
BATCH_LINE = re.compile(r"^(ok |FAILED |failed |skipped|SKIPPED |nothing|parity|PARITY|gruconv: (error|warning): )")


# --------------------------------------------------------------------------- running

@dataclass
class Result:
    argv: list
    code: Optional[int]
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    maxrss_mb: float

    @property
    def lines(self) -> list:
        return [ln for ln in self.stderr.splitlines() if ln.strip()]

    def describe(self) -> str:
        first = self.lines[0] if self.lines else "(stderr empty)"
        return (f"exit {self.code}{' (KILLED: timeout)' if self.timed_out else ''}, {self.seconds:.1f}s, "
                f"maxrss {self.maxrss_mb:.0f} MB; stderr[0]: {first[:300]!r}")


def _limits():  # runs in the child before exec
    # die with the test process: a hung child must not outlive an interrupted pytest (PR_SET_PDEATHSIG)
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    resource.setrlimit(resource.RLIMIT_DATA, (DATA_LIMIT, DATA_LIMIT))
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def harness_dirs(base: Path) -> tuple:
    """HOME and TMPDIR for the child, outside the watched work directory."""
    home, tmp = base / "home", base / "tmp"
    for d in (base, home, tmp):
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o777 if d is not base else 0o755)
    return home, tmp


def run_cli(argv, cwd: Path, *, harness: Path, timeout: float = TIMEOUT, user: Optional[str] = None) -> Result:
    """Run ``gruconv ARGV`` in ``cwd``; kill the process group after ``timeout`` seconds."""
    home, tmp = harness_dirs(harness)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(COLUMNS="200", HOME=str(home), TMPDIR=str(tmp), LC_ALL="C.UTF-8", LANG="C.UTF-8")
    if EXTRA_PYTHONPATH:
        env["PYTHONPATH"] = EXTRA_PYTHONPATH + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    cmd = [str(GRUCONV), *[os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in argv]]
    if user == "nobody":
        assert IS_ROOT and SETPRIV, "needs root and setpriv"
        cmd = [SETPRIV, "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    with tempfile.TemporaryFile(dir=harness) as out, tempfile.TemporaryFile(dir=harness) as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                             preexec_fn=_limits, start_new_session=True)
        timed_out = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                timed_out = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(p.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.05)
        seconds = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        # batch workers (same process group) must not outlive their parent
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)
        out.seek(0)
        err.seek(0)
        so = out.read().decode("utf-8", "backslashreplace")
        se = err.read().decode("utf-8", "backslashreplace")
    return Result(list(argv), None if timed_out else p.returncode, so, se, timed_out, seconds, ru.ru_maxrss / 1024)


# --------------------------------------------------------------------------- file-system snapshots

BIG = 64 * 2**20


def _digest(p: str, st: os.stat_result):
    if st.st_size > BIG:   # sparse bombs: size + identity + times, not 2 GB of hashing
        return ("big", st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return ("file", h.hexdigest(), stat.S_IMODE(st.st_mode))


def snapshot(root: Path) -> dict:
    """{relative path: description} of everything under ``root``; links are recorded, not followed."""
    root = os.fspath(root)
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            try:
                st = os.lstat(p)
            except OSError as e:
                snap[rel] = ("unstat", e.errno)
                continue
            if stat.S_ISLNK(st.st_mode):
                snap[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                snap[rel] = ("dir",)
            elif stat.S_ISREG(st.st_mode):
                snap[rel] = _digest(p, st)
            else:  # FIFO, device, socket: never opened
                snap[rel] = ("special", stat.S_IFMT(st.st_mode), st.st_rdev, st.st_ino)
    return snap


# --------------------------------------------------------------------------- the contract

@dataclass
class Spec:
    """What one hostile case runs and what it may do."""

    argv: list
    codes: set                                   # acceptable exit codes
    new_ok: tuple = ()                           # fnmatch patterns of paths that may appear (exit 0 / partial)
    changed_ok: tuple = ()                       # patterns of existing paths that may change on exit 0
    must_exist: tuple = ()                       # paths (relative to work) that must exist after exit 0
    must_not_exist: tuple = ()                   # absolute or relative paths that must never appear
    message: Optional[str] = None                # regex the error line must match (failures)
    not_message: Optional[str] = None            # regex the error line must NOT match
    batch: bool = False                          # batch mode: per-input lines on stderr
    partial_ok: bool = False                     # batch --keep-going: new_ok outputs allowed even on failure
    timeout: Optional[float] = None
    user: Optional[str] = None
    cwd: Optional[Path] = None
    check: Optional[Callable] = None             # check(result, work) -> list of problems
    note: str = ""


def _match(rel: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(rel, p) for p in patterns)


def check_contract(res: Result, before: dict, after: dict, spec: Spec, work: Path, tmpdir: Path) -> list:
    """Every broken promise of one run, in words (empty: the run kept the contract)."""
    problems = []
    if res.timed_out:
        problems.append(f"HANG: still running after {res.seconds:.0f}s, killed")
    if TRACEBACK.search(res.stderr) or TRACEBACK.search(res.stdout):
        tb_last = [ln for ln in res.stderr.splitlines() if ln.strip()][-1:] or ["?"]
        problems.append(f"TRACEBACK on stderr/stdout (last line {tb_last[0][:200]!r})")
    code = res.code
    if not res.timed_out and code not in spec.codes:
        problems.append(f"exit {code}, expected one of {sorted(spec.codes)}")
    lines = res.lines
    failed = res.timed_out or code != 0
    if not res.timed_out:
        if spec.batch:
            bad = [ln for ln in lines if not BATCH_LINE.match(ln)]
            if bad:
                problems.append(f"stderr lines that are no batch record / error line: {bad[:3]!r}")
            if code not in (0, 1) and not any(ln.startswith(("FAILED", "failed", "gruconv: error: ")) for ln in lines):
                problems.append("batch failed but no FAILED / gruconv: error: line")
        elif code in (2, 3) or (code not in (0, 1)):
            if len(lines) != 1:
                problems.append(f"{len(lines)} stderr lines, expected exactly one: {lines[:4]!r}")
            if lines and not lines[0].startswith("gruconv: error: "):
                problems.append(f"stderr line does not start with 'gruconv: error: ': {lines[0][:200]!r}")
        elif code == 0:
            bad = [ln for ln in lines if not ln.startswith("gruconv: warning: ")]
            if bad:
                problems.append(f"exit 0 with non-warning stderr lines: {bad[:3]!r}")
        for ln in lines:
            if CONTROL.search(ln):
                problems.append(f"raw control character in a stderr line: {ln[:200]!r}")
                break
        if failed and lines and code in (2, 3):
            errs = [ln for ln in lines if ln.startswith(("gruconv: error: ", "FAILED"))] or lines
            if spec.message and not any(re.search(spec.message, ln) for ln in errs):
                problems.append(f"error line does not match /{spec.message}/")
            if spec.not_message and any(re.search(spec.not_message, ln) for ln in errs):
                problems.append(f"error line matches /{spec.not_message}/ (wrong moment / wrong reason)")
    # the file system
    changed = sorted(k for k in before if after.get(k) != before[k])
    if code == 0:
        changed = [k for k in changed if not _match(k, spec.changed_ok)]
    for k in changed:
        what = "REMOVED" if k not in after else f"CHANGED ({before[k][0]} -> {after[k][0]})"
        problems.append(f"existing {k!r} {what}")
    new = sorted(set(after) - set(before))
    temps = [k for k in new if TEMP_NAME.search(os.path.basename(k))]
    if temps:
        problems.append(f"temporary files left: {temps[:5]}")
    allowed = (code == 0) or (spec.partial_ok and not res.timed_out)
    new_ok = tuple(spec.new_ok) + (BATCH_STATE if spec.batch else ())
    bad_new = [k for k in new if k not in temps and not (allowed and _match(k, new_ok))]
    if bad_new:
        problems.append(f"{'left behind after a failure' if failed else 'written outside the named outputs'}: "
                        f"{bad_new[:8]}{' ...' if len(bad_new) > 8 else ''}")
    if code == 0:
        for p in spec.must_exist:
            if not os.path.lexists(work / p):
                problems.append(f"exit 0 but {p!r} was not written")
    for p in spec.must_not_exist:
        if os.path.lexists(work / p):
            problems.append(f"{p!r} exists (must never be created)")
    left = [n for n in os.listdir(tmpdir)]
    if left and not res.timed_out:  # a killed process cannot clean up
        problems.append(f"left in $TMPDIR: {left[:5]}")
    if spec.check is not None and not res.timed_out:
        problems += spec.check(res, work)
    return problems


# --------------------------------------------------------------------------- builders

def copy_fixture(rel: str, dst: Path) -> Path:
    src = FIXTURES / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True)
    else:
        shutil.copyfile(src, dst)
    return dst


def _h5_config(f) -> dict:
    raw = f.attrs["model_config"]
    return json.loads(raw.decode() if isinstance(raw, bytes) else raw)


def h5_gzip_bomb(dst: Path, units: int = 10000) -> Path:
    """``sequential.h5`` with a self-consistent CuDNNGRU of ``units`` units whose weights are
    deflate-compressed zeros: ~1.2 GB declared (recurrent kernel units x 3*units float32), ~1.5 MB
    on disk.  Chunks are written pre-compressed (``write_direct_chunk``), so building takes a second."""
    import h5py

    copy_fixture("keras/sequential.h5", dst)
    H = units
    k1, k2 = "model_weights/cu_dnngru/cu_dnngru", "model_weights/cu_dnngru_1/cu_dnngru_1"
    with h5py.File(dst, "r+") as f:
        cfg = _h5_config(f)
        cfg["config"]["layers"][1]["config"]["units"] = H
        f.attrs["model_config"] = json.dumps(cfg).encode()
        for name, shape in (("kernel:0", (6, 3 * H)), ("bias:0", (6 * H,))):
            del f[f"{k1}/{name}"]
            f[k1].create_dataset(name, data=np.zeros(shape, np.float32), compression="gzip", compression_opts=9)
        del f[f"{k1}/recurrent_kernel:0"]
        rows = 500
        ds = f[k1].create_dataset("recurrent_kernel:0", shape=(H, 3 * H), dtype="f4", chunks=(rows, 3 * H),
                                  compression="gzip", compression_opts=9)
        blob = zlib.compress(bytes(rows * 3 * H * 4), 9)
        for r in range(0, H, rows):
            ds.id.write_direct_chunk((r, 0), blob, 0)
        del f[f"{k2}/kernel:0"]
        f[k2].create_dataset("kernel:0", data=np.zeros((H, 15), np.float32), compression="gzip", compression_opts=9)
    return dst


def npy_bytes(arr: np.ndarray, allow_pickle: bool = False) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


def npz_write(dst: Path, members: dict, compression=zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(dst, "w", compression=compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return dst


def npz_header_claims_huge(dst: Path) -> Path:
    """``x.npy`` whose header declares (2, 2**31, 6) float32 (96 GiB) over 96 bytes of data."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (2, 2**31, 6)})
    return npz_write(dst, {"x.npy": buf.getvalue() + bytes(96)})


def npz_deflate_bomb(dst: Path) -> Path:
    """A 1.6 MB .npz whose one member inflates to 1.5 GiB: a (2, 2**25, 6) float32 array of zeros.

    The deflate stream is built from three compressed 16 MiB pieces (full flushes make every middle
    piece identical), so building takes well under a second of compression."""
    hdr = io.BytesIO()
    np.lib.format.write_array_header_1_0(hdr, {"descr": "<f4", "fortran_order": False, "shape": (2, 2**25, 6)})
    header = hdr.getvalue()
    piece = bytes(16 * 2**20)
    n = 2 * 2**25 * 6 * 4 // len(piece)                      # 96 pieces
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(header + piece) + c.flush(zlib.Z_FULL_FLUSH)
    mid = c.compress(piece) + c.flush(zlib.Z_FULL_FLUSH)
    mid2 = c.compress(piece) + c.flush(zlib.Z_FULL_FLUSH)
    assert mid == mid2
    last = c.compress(piece) + c.flush(zlib.Z_FINISH)
    data = first + mid * (n - 2) + last
    crc = zlib.crc32(header)
    for _ in range(n):
        crc = zlib.crc32(piece, crc)
    usize = len(header) + n * len(piece)
    name = b"x.npy"
    local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, crc, len(data), usize, len(name), 0) + name
    central = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, crc, len(data), usize,
                          len(name), 0, 0, 0, 0, 0, 0) + name
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 1, 1, len(central), len(local) + len(data), 0)
    dst.write_bytes(local + data + central + eocd)
    with zipfile.ZipFile(dst) as zf, zf.open("x.npy") as m:   # self-check: a valid zip whose member inflates
        assert m.read(len(header)) == header
    return dst


class _Bait:
    """Unpickling this creates ``marker`` (``open(marker, "w")``): proof that a pickle was loaded."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def npz_pickle_bait(dst: Path, marker: Path, shape=(2, 8, 6)) -> Path:
    arr = np.empty(shape[:1], dtype=object)
    for i in range(shape[0]):
        arr[i] = _Bait(str(marker))
    return npz_write(dst, {"x.npy": npy_bytes(arr, allow_pickle=True)})


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


def sparse_file(path: Path, size: int, head: bytes = b"") -> Path:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def tf1_tensors(case: str, cache: Path) -> dict:
    """All tensors of a TF1 fixture checkpoint, read by TensorFlow itself in a child (cached as .npz)."""
    out = cache / f"{case}.tensors.npz"
    if not out.exists():
        script = (
            "import sys, numpy as np, tensorflow as tf\n"
            "r = tf.train.load_checkpoint(sys.argv[1])\n"
            "keys = sorted(r.get_variable_to_shape_map())\n"
            "np.savez(sys.argv[2], __keys__=np.array(keys), **{f'k{i}': r.get_tensor(k) for i, k in enumerate(keys)})\n"
        )
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
        subprocess.run([sys.executable, "-c", script, str(FIXTURES / "tf1" / case / "model.ckpt"), str(out)],
                       check=True, capture_output=True, timeout=300, env=env)
    with np.load(out) as d:
        keys = [str(k) for k in d["__keys__"]]
        return {k: d[f"k{i}"] for i, k in enumerate(keys)}


#: Tensor names a hostile checkpoint may carry (each would be a dangerous zip member / path / terminal text).
HOSTILE_NAMES = [
    "../../x", "/etc/x", "dir/../../../up", "..", ".hidden", "esc\x1b[31mred\x1b[0m", "new\nline", "tab\tname",
    "back\\slash\\..\\..\\win", "nul\x00byte", "long_" + "x" * 300, "unicode_é模型", "C:/windows/x",
]


def tf1_with_names(dst_dir: Path, cache: Path, names=HOSTILE_NAMES) -> Path:
    """``layer_uni`` plus one small float32 tensor under every name of ``names``."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from make_bad_inputs import write_bundle

    tensors = dict(tf1_tensors("layer_uni", cache))
    for i, n in enumerate(names):
        tensors[n] = np.full((2,), i, np.float32)
    write_bundle(dst_dir / "model.ckpt", tensors)
    return dst_dir


def zip_members(path: Path) -> list:
    with zipfile.ZipFile(path) as zf:
        return zf.namelist()


def unsafe_member_names(names) -> list:
    """Members that are not plain, printable, relative single-component names (no '/', '\\', '..',
    leading '.', control characters, or more than 255 bytes)."""
    bad = []
    for n in names:
        if ("/" in n or "\\" in n or n.startswith(".") or ".." in n or not n or len(n.encode()) > 255
                or not n.isprintable()):
            bad.append(n)
    if len(set(names)) != len(names):
        bad.append("<duplicate member names>")
    return bad
