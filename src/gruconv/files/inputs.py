"""The one place a user's file is opened for reading.

Every byte gruconv reads from a user's file goes through a function here, so the rules hold
everywhere:

* **Regular files only.**  A FIFO, socket, device or directory where a file was expected is
  refused with one line naming what was expected (:func:`regular_file`).  The check is made with
  ``os.stat`` *before* anything is opened (opening a FIFO for reading blocks until a writer
  appears; opening some devices has side effects), and repeated with ``fstat`` on the opened
  descriptor, which must be the same inode (:func:`open_regular`): a file swapped for a FIFO in
  between is refused, never waited on.  A symlink the user gave is followed — only its final
  target must be a regular file.
* **Bounded.**  Every whole-file read has a byte limit checked from ``fstat`` before reading
  (:func:`read_bytes`); JSON has a size and a nesting limit checked without recursion
  (:func:`load_json`, :func:`parse_json`); ``.npz`` archives are checked from the zip central
  directory and each member's ``.npy`` header before any array is allocated (:func:`load_npz`);
  HDF5 datasets share a per-file budget of declared-but-not-stored bytes (:class:`ReadBudget`).
  The limits are generous defaults; ``GRUCONV_MAX_BYTES`` (bytes, ``K``/``M``/``G``/``T``
  suffixes allowed) replaces every one of them, and every refusal names it.
* **One line.**  :func:`display` escapes control characters (newline, ESC, ...) in path names and
  other file-derived text, so an error message is always one line on a terminal.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Optional

from ..errors import InputError, display, first_line

__all__ = [
    "ENV_MAX_BYTES", "LIMITS", "ReadBudget", "check_json_depth", "display", "limit", "load_json", "load_npz",
    "open_regular", "parse_json", "read_bytes", "regular_file", "same_file", "file_kind",
]

#: The environment variable that replaces every byte limit below.
ENV_MAX_BYTES = "GRUCONV_MAX_BYTES"

#: Default byte limits, by what is read.
LIMITS = {
    "json": 16 * 2**20,           # an architecture JSON / a config attribute
    "index": 256 * 2**20,         # a TensorBundle .index: ~50 bytes per tensor
    "state": 2**20,               # a TF `checkpoint` state file: a few lines of text
    "npz": 4 * 2**30,             # an .npz of verification inputs (declared, uncompressed)
    "tensor": 16 * 2**30,         # one weight tensor
    "unbacked": 2**20,            # per HDF5 file: declared dataset bytes the file does not store
    "graph": 2**31 - 1,           # a GraphDef / SavedModel / keras_metadata protobuf: protobuf's own 2 GiB cap
    "graph-text": 64 * 2**20,     # a text-format graph (.pbtxt): tokenized in Python, so kept smaller
}
#: Most a compressed member/dataset may expand (deflate's own limit is ~1032:1; Keras 3 uses 1000).
MAX_EXPANSION = 1000
#: Default JSON nesting limit: a Keras config of nested models is a few dozen levels deep.
MAX_JSON_DEPTH = 256
#: Default member count of an .npz.
MAX_NPZ_MEMBERS = 4096
#: Most layers one Keras ``Sequential`` may hold.  Keras 3's ``Sequential.add`` rebuilds the model
#: once per added layer (``keras/src/models/sequential.py`` ``_maybe_rebuild``), and a conversion
#: loads the model twice (the legacy build, then the load-back check): time grows with the square
#: of the count.  Measured on the shared 2-core machine (load ~7): 100 layers 51 s, 300 layers 206 s,
#: 1,000 layers past 100 s unfinished, 10,000 would take hours.  cuDNN RNN models are
#: a few dozen layers deep.
MAX_SEQUENTIAL_LAYERS = 256
#: Most layers a Keras model config may hold in all (nested models and wrapped layers counted).
MAX_LAYERS = 4096
#: Most protobuf fields a walk of a TensorFlow graph looks at (nodes, functions, the attrs of the nodes it
#: reads: :mod:`gruconv.readers.protos`).  Why: a field can take 2 bytes, so a 2 GiB file could
#: hold a billion, and looking at one costs 2-12 microseconds here; a real graph needs far fewer (tf.keras's
#: 1.1 MB SavedModel of a two-layer GRU/LSTM model: 22,000).  At the limit a walk takes 10-60 s.
MAX_GRAPH_FIELDS = 5_000_000


# --------------------------------------------------------------------------- limits

_UNITS = {"": 1, "B": 1, "K": 2**10, "KB": 2**10, "KIB": 2**10, "M": 2**20, "MB": 2**20, "MIB": 2**20,
          "G": 2**30, "GB": 2**30, "GIB": 2**30, "T": 2**40, "TB": 2**40, "TIB": 2**40}


def _env_limit() -> Optional[int]:
    raw = os.environ.get(ENV_MAX_BYTES)
    if raw is None or not raw.strip():
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", raw)
    if not m or m.group(2).upper() not in _UNITS:
        from ..errors import UsageError

        raise UsageError(f"{ENV_MAX_BYTES}='{display(raw)}' is not a byte count (e.g. 512M, 32G)")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def limit(kind: str) -> int:
    """The byte limit for ``kind`` (a key of :data:`LIMITS`), or ``GRUCONV_MAX_BYTES`` when set."""
    env = _env_limit()
    return env if env is not None else LIMITS[kind]


def _human(n: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} bytes"


def over_limit(what: str, size: int, lim: int) -> str:
    """The standard words for a size refused by a limit (names the variable that raises it)."""
    return (f"{what} is {size} bytes, over the {_human(lim)} limit; refused "
            f"(set {ENV_MAX_BYTES} to raise it if the file is trusted)")


# --------------------------------------------------------------------------- regular files

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def file_kind(st: os.stat_result) -> str:
    """``"a regular file"``, ``"a FIFO (named pipe)"``, ... for messages."""
    if stat.S_ISREG(st.st_mode):
        return "a regular file"
    return next((words for test, words in _KINDS if test(st.st_mode)), "a special file")


def _os_error(e: OSError, what: str, path) -> InputError:
    import errno

    if e.errno == errno.ENOENT:
        return InputError(f"no such file or directory (expected {what})", path=path)
    if e.errno == errno.ELOOP:
        return InputError(f"too many levels of symbolic links (expected {what})", path=path)
    if e.errno == errno.ENAMETOOLONG:
        return InputError("file name too long", path=path)
    return InputError(f"cannot be read ({e.strerror or e})", path=path)


def regular_file(path, what: str = "a file") -> os.stat_result:
    """``os.stat`` of ``path`` (symlinks followed), refusing anything but a regular file.

    ``what`` names what was expected, e.g. ``"a checkpoint .index file"``.  Never opens ``path``.
    """
    try:
        st = os.stat(path)
    except OSError as e:
        raise _os_error(e, what, path) from None
    except ValueError:  # embedded NUL
        raise InputError(f"is not a valid file name (expected {what})", path=path) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"is {file_kind(st)}, expected {what} (a regular file)", path=path)
    return st


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def open_regular(path, what: str = "a file"):
    """Open ``path`` for binary reading, only if it is (and stays) a regular file.

    ``stat`` first (nothing is opened for a FIFO or device), then ``open`` with ``O_NONBLOCK``
    (a FIFO swapped in meanwhile cannot block us) and ``O_NOCTTY``, then ``fstat``: the descriptor
    must be the inode that was checked.  Returns a buffered binary file object.
    """
    st = regular_file(path, what)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise _os_error(e, what, path) from None
    try:
        st2 = os.fstat(fd)
        if not stat.S_ISREG(st2.st_mode) or not same_file(st, st2):
            raise InputError(f"changed while being opened (now {file_kind(st2)}), expected {what}", path=path)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path, what: str = "a file", max_bytes: Optional[int] = None, *, kind: str = "json") -> bytes:
    """All of a regular file, refusing it from ``fstat`` before reading if it is over the limit.

    ``max_bytes`` defaults to :func:`limit` ``(kind)``; reads at most ``max_bytes + 1`` bytes even
    if the file grows meanwhile.
    """
    lim = limit(kind) if max_bytes is None else max_bytes
    with open_regular(path, what) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > lim:
                raise InputError(over_limit(what[0].upper() + what[1:] if what else "file", size, lim),
                                 path=path)
            data = f.read(lim + 1)
        except OSError as e:
            raise _os_error(e, what, path) from None
    if len(data) > lim:
        raise InputError(over_limit(what or "file", len(data), lim) + " (it grew while being read)", path=path)
    return data


# --------------------------------------------------------------------------- JSON

_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)


def check_json_depth(data, max_depth: int = MAX_JSON_DEPTH) -> int:
    """The bracket nesting depth of JSON text ``data`` (strings skipped), without recursion.

    Raises ``ValueError`` beyond ``max_depth``.  Linear time, constant Python stack.
    """
    import numpy as np

    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if b"[" not in raw and b"{" not in raw:
        return 0
    if b'"' in raw:
        raw = _JSON_STRING.sub(b'""', raw)
    table = np.zeros(256, dtype=np.int8)
    table[ord("[")] = table[ord("{")] = 1
    table[ord("]")] = table[ord("}")] = -1
    steps = table[np.frombuffer(raw, dtype=np.uint8)]
    nz = steps[steps != 0].astype(np.int64)
    depth = int(np.cumsum(nz).max()) if nz.size else 0
    if depth > max_depth:
        raise ValueError(f"nested {depth} levels deep, over the limit of {max_depth}")
    return depth


def parse_json(data, what: str = "JSON", *, path=None, max_depth: int = MAX_JSON_DEPTH,
               max_bytes: Optional[int] = None):
    """``json.loads`` of ``data`` (bytes or str) after the size and depth checks; one-line InputError."""
    import json

    lim = limit("json") if max_bytes is None else max_bytes
    if len(data) > lim:
        raise InputError(over_limit(what, len(data), lim), path=path)
    try:
        check_json_depth(data, max_depth)
    except ValueError as e:
        raise InputError(f"{what} is {e}; refused", path=path) from None
    try:
        if isinstance(data, (bytes, bytearray)):
            data = bytes(data).decode("utf-8-sig")
        return json.loads(data)
    except UnicodeDecodeError as e:
        raise InputError(f"{what} is not UTF-8 text (byte {e.start})", path=path) from None
    except RecursionError:  # not reachable after the depth check; kept as a guard
        raise InputError(f"{what} is nested too deeply", path=path) from None
    except ValueError as e:
        raise InputError(f"{what} is not valid JSON ({display(e)})", path=path) from None


def load_json(path, what: str = "a JSON file", max_bytes: Optional[int] = None, max_depth: int = MAX_JSON_DEPTH):
    """A JSON document from a regular file: size cap (16 MiB), nesting cap, one-line errors."""
    data = read_bytes(path, what, max_bytes, kind="json")
    return parse_json(data, _noun(what), path=path, max_depth=max_depth, max_bytes=len(data) + 1)


def _noun(what: str) -> str:
    for art in ("a ", "an ", "the "):
        if what.startswith(art):
            return what[len(art):]
    return what


# --------------------------------------------------------------------------- NPZ

def load_npz(path, max_bytes_total: Optional[int] = None, *, what: str = "an .npz file",
             max_members: int = MAX_NPZ_MEMBERS, names: Optional[list] = None) -> dict:
    """The arrays of an ``.npz`` as ``{name: ndarray}``, in archive order, checked before reading.

    From the zip central directory: the member count, each member's declared uncompressed size
    (summed, against ``max_bytes_total``, default :func:`limit` ``("npz")``) and compression
    ratio (at most :data:`MAX_EXPANSION`).  From each member's ``.npy`` header: no object dtype
    (``allow_pickle`` is always False), and shape x itemsize equal to the bytes the member
    declares — an array is allocated only after all of that.  ``names``: read only these.
    """
    import zipfile

    import numpy as np
    from numpy.lib import format as npformat

    lim = limit("npz") if max_bytes_total is None else max_bytes_total
    with open_regular(path, what) as f:
        try:
            zf = zipfile.ZipFile(f)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            raise InputError(f"is not an .npz archive ({display(e)})", path=path) from None
        except (NotImplementedError, RuntimeError) as e:
            raise InputError(f"is an .npz archive gruconv cannot read ({display(e)})", path=path) from None
        with zf:
            infos = zf.infolist()
            if len(infos) > max_members:
                raise InputError(f"archive has {len(infos)} members, over the limit of {max_members}; refused",
                                 path=path)
            total = 0
            for zi in infos:
                total += zi.file_size
                if total > lim:
                    raise InputError(over_limit("archive content (declared, uncompressed)", total, lim), path=path)
                if zi.compress_type != zipfile.ZIP_STORED and zi.file_size > MAX_EXPANSION * max(zi.compress_size, 1):
                    raise InputError(
                        f"member '{display(zi.filename)}' declares {zi.file_size} bytes from {zi.compress_size} "
                        f"compressed (over {MAX_EXPANSION}:1, a zip bomb); refused", path=path)
                if zi.flag_bits & 0x1:
                    raise InputError(f"member '{display(zi.filename)}' is encrypted", path=path)
            out: dict = {}
            seen: set = set()
            for zi in infos:
                name = zi.filename[:-4] if zi.filename.endswith(".npy") else zi.filename
                if names is not None and name not in names:
                    continue
                if name in seen:
                    raise InputError(f"archive has two members named '{display(name)}'", path=path)
                seen.add(name)
                out[name] = _read_npy_member(zf, zi, path, np, npformat)
    return out


def _read_npy_member(zf, zi, path, np, npformat):
    label = f"member '{display(zi.filename)}'"
    try:
        with zf.open(zi) as m:
            version = npformat.read_magic(m)
            if version == (1, 0):
                shape, fortran, dtype = npformat.read_array_header_1_0(m)
            elif version in ((2, 0), (3, 0)):
                shape, fortran, dtype = npformat.read_array_header_2_0(m)
            else:
                raise ValueError(f"unsupported .npy version {version}")
            header_len = m.tell()
            if dtype.hasobject:
                raise InputError(f"{label} holds Python objects (dtype {dtype}); refused: pickles are never "
                                 "loaded", path=path)
            count = 1
            for d in shape:
                count *= int(d)
            need = count * dtype.itemsize
            if need != zi.file_size - header_len:
                raise InputError(
                    f"{label} declares shape {tuple(shape)} of {dtype} ({need} bytes) but holds "
                    f"{zi.file_size - header_len} bytes; refused", path=path)
            buf = bytearray(need)
            view = memoryview(buf)
            got = 0
            while got < need:
                n = m.readinto(view[got:])
                if not n:
                    break
                got += n
            if got != need:
                raise InputError(f"{label} is truncated ({got} of {need} bytes)", path=path)
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - zipfile/numpy raise many types on a broken member
        raise InputError(f"{label} cannot be read ({display(first_line(e))})", path=path) from None
    arr = np.frombuffer(buf, dtype=dtype)
    order = "F" if fortran else "C"
    return arr.reshape(shape, order=order) if shape else arr.reshape(())


# --------------------------------------------------------------------------- HDF5

class ReadBudget:
    """Bytes an input may make gruconv allocate, beyond what the file itself stores.

    ``charge(declared, stored_backing, what)`` adds one read: ``declared`` bytes will be
    allocated, ``stored_backing`` of them are backed by bytes in the file (stored size, times
    :data:`MAX_EXPANSION` for compressed data).  The *unbacked* remainder (fill values of a
    sparse dataset: a "shape bomb") is summed over the whole file and limited to
    :func:`limit` ``("unbacked")`` (1 MiB) — so ten thousand small bombs are refused as one big
    one is; the declared total is limited to :func:`limit` ``("tensor")``.
    """

    def __init__(self, path=None, *, unbacked: Optional[int] = None, total: Optional[int] = None):
        self.path = path
        self.max_unbacked = limit("unbacked") if unbacked is None else unbacked
        self.max_total = limit("tensor") if total is None else total
        self.unbacked = 0
        self.total = 0
        self._seen: set = set()

    def first_time(self, ds) -> bool:
        """True the first time a dataset is presented (checked and then read counts once)."""
        try:
            import h5py

            key = h5py.h5o.get_info(ds.id).addr
        except Exception:  # noqa: BLE001
            key = getattr(ds, "name", id(ds))
        if key in self._seen:
            return False
        self._seen.add(key)
        return True

    def charge(self, declared: int, backed: int, what: str) -> None:
        self.total += declared
        self.unbacked += max(0, declared - backed)
        if self.total > self.max_total:
            raise InputError(over_limit(f"{what}: the datasets read so far declare a total that", self.total,
                                        self.max_total), path=self.path)
        if self.unbacked > self.max_unbacked:
            raise InputError(
                f"{what}: datasets declare {self.unbacked} bytes more than the file stores (sparse or "
                f"truncated datasets, or a shape bomb); refused (limit {_human(self.max_unbacked)}; set "
                f"{ENV_MAX_BYTES} to raise it if the file is trusted)", path=self.path)


# --------------------------------------------------------------------------- misc

def head(path, n: int, what: str = "a file") -> bytes:
    """The first ``n`` bytes of a regular file (for format sniffing); never blocks on a FIFO."""
    with open_regular(path, what) as f:
        try:
            return f.read(n)
        except OSError as e:
            raise _os_error(e, what, path) from None


def contains(path, marker: bytes, what: str = "a file", *, kind: str = "graph") -> bool:
    """Whether a regular file holds ``marker`` (a format sniff that needs more than the head, e.g. a
    GraphDef's op names), looked up in a read-only map of the file: nothing is copied into memory, the
    file is refused over :func:`limit` ``(kind)`` before it is mapped, and a FIFO is never opened."""
    import mmap

    lim = limit(kind)
    with open_regular(path, what) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > lim:
                raise InputError(over_limit(what[0].upper() + what[1:] if what else "file", size, lim), path=path)
            if size == 0:
                return False
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return m.find(marker) >= 0
        except OSError as e:
            raise _os_error(e, what, path) from None


#: The answers of :func:`once` in the reading under way (:func:`reading_once`): ``{what: (file identity,
#: value)}``; None outside one (every question is computed).
_ONCE = None


def reading_once(fn):
    """``fn`` (``api.convert``, ``api.inspect``, ``verify``) as one reading of its input: within it, :func:`once`
    hands each answer on; after it, nothing is kept (a later call reads the files again)."""
    import functools

    @functools.wraps(fn)
    def one_reading(*args, **kw):
        global _ONCE
        if _ONCE is not None:  # inside another (convert --verify): its answers are this one's
            return fn(*args, **kw)
        _ONCE = {}
        try:
            return fn(*args, **kw)
        finally:
            _ONCE = None

    return one_reading


def once(path, what: str, compute):
    """``compute()`` about the file at ``path``, computed once in one reading (:func:`reading_once`) while the
    file stays the same (device, inode, size, modification and change times): what a sniff learnt, handed to
    the reader that reads the file next, so one conversion reads a graph file once (``saved_model.pb`` was
    scanned in full twice before, by the graph reader's sniff and by its read).  Only the latest answer per
    ``what`` is kept; an exception is not kept; outside a reading, ``compute()`` every time."""
    if _ONCE is None:
        return compute()
    try:
        st = os.stat(path)
        key = (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    except (OSError, ValueError):
        return compute()
    hit = _ONCE.get(what)
    if hit is not None and hit[0] == key:
        return hit[1]
    value = compute()
    _ONCE[what] = (key, value)
    return value


def is_regular(path) -> bool:
    """Whether ``path`` (symlinks followed) is a regular file; never raises, never opens."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


__all__ += ["MAX_EXPANSION", "contains", "head", "is_regular", "over_limit"]
