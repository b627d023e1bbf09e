"""Write ``.keras`` archives and Keras 3 ``.weights.h5`` files with h5py and NumPy only, one gate block at a time.

Why: Keras 3 builds the whole model in memory (initialising every variable), then
``Model.save`` copies every weight into ``model.weights.h5``; the conversion peaks at several times
the parameter bytes and pays a 2-6 s framework import.  Everything in the archive is plain data:

* ``metadata.json``, ``config.json`` (:mod:`gruconv.keras3.config`), ``model.weights.h5``, in that
  order, ``ZIP_STORED`` (``keras/src/saving/saving_lib.py`` ``_save_model_to_fileobj``: the zip is
  opened with zipfile's default compression and the weights file, when staged on disk, is added with
  ``zf.write``);
* ``model.weights.h5``: one ``<object path>/vars`` group per saveable object with attribute ``name``
  (``H5IOStore.make`` / ``_create_h5_group``), datasets ``vars/0``, ``vars/1``, ... in the object's
  variable order (``Layer.save_own_variables``); object paths from
  :func:`gruconv.keras3.config.saveable_plan`.

Here the weights go input -> transform -> HDF5 dataset -> freed, one array at a time (a CuDNN layer's
kernels one gate block at a time: :class:`Pieces`), into a file staged beside the target, which is then
streamed into the zip (``ZipFile.write`` copies in chunks): peak memory is about one gate block or the
largest other weight, not the model.  The target appears atomically (temporary file
beside it, :func:`os.replace`) and only after :func:`self_check` passed: the archive reopens, its
config parses and names the expected classes, and every weight is present with the shape, dtype and
SHA-256 recorded while it was written.

No Keras, TensorFlow, JAX or torch import anywhere in this module, except in :func:`check_load`
(``convert --check-load``), which is the point of that function.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Optional

from ..errors import InputError, OutputError, UnsupportedError, about
from ..progress import step
from . import config as keras3_config
from . import dialects
from ..files.outputs import scratch_dir, scratch_file
from ..files.window import Window as _Window
from ..model.keras_config import CONTAINER_CLASSES, IDENTITY_AT_INFERENCE, class_name_of, makes_mask, malformed
from ..model.keras_layout import CELL_OF_CUDNN_CLASS, KERAS3_CLASS, WEIGHT_ROLES

CONFIG_NAME, METADATA_NAME, WEIGHTS_NAME = "config.json", "metadata.json", "model.weights.h5"


def _digest(a) -> str:
    """SHA-256 of an array's bytes, hashed from the array's own buffer (``tobytes`` would copy it:
    one more copy of the largest weight at the peak)."""
    import numpy as np

    return hashlib.sha256(_bytes_view(np.ascontiguousarray(a))).hexdigest()


def _bytes_view(a):
    """A contiguous array's bytes as a flat uint8 view (no copy; 0-d and empty arrays included)."""
    return a.reshape(-1).view("uint8")


def _dataset_digest(ds, path=None) -> str:
    """SHA-256 of an HDF5 dataset's bytes (C order), read in blocks of leading-axis rows
    (:func:`gruconv.files.hdf5.row_blocks`): the same digest as :func:`_digest` of the whole array, with
    about :data:`~gruconv.files.hdf5.ROW_BLOCK_BYTES` read at a time."""
    from ..files import hdf5 as h5safe

    h = hashlib.sha256()
    try:
        for block in h5safe.row_blocks(ds, path):
            h.update(_bytes_view(block))
            del block
    except InputError as e:  # the file read back is this conversion's output
        raise OutputError(f"self-check: {e.message}", path=path) from None
    return h.hexdigest()


# --------------------------------------------------------------------------- HDF5 weights

#: Outputs whose weights the caller estimates at no more than this many bytes are assembled in memory
#: (h5py's ``core`` driver, no backing store) and written to disk once, inside the archive; larger ones
#: are staged on disk one gate block at a time (the bounded-memory route).  Why (bench/run.py's
#: batch of 100 small models): staging a small file on disk through h5py's Python file-object driver
#: (:func:`gruconv.files.outputs.hdf5_file`), copying it into the zip and reopening it cost ~19 ms of the
#: ~54 ms a small conversion took; in memory the same HDF5 file takes ~3 ms.  8 MiB (twice that at the
#: peak: the image and its copy in the archive) is small next to the ~50 MiB the interpreter and its
#: imports take, and far below the models the memory bound is about.
IN_MEMORY_MAX = 8 << 20

#: A gate-blocked weight (:class:`Pieces`) of at most this many bytes is assembled in memory and written
#: with one call; a larger one block by block.  Why: a block is a column range of a row-major dataset, so
#: HDF5 writes it as one file write per row: the bench's 3 x Bidirectional(GRU(1024)) made 46,253 writes
#: of ~4 KiB through the archive window (0.5 s of a 3.4 s conversion, plus 0.3 s making each block
#: contiguous).  16 MiB holds a 1024-unit GRU's recurrent kernel (12 MiB) and is the most one tensor adds
#: to the peak; the memory goal (peak RSS <= 0.5 x the parameter bytes, docs/streaming.md) is about
#: models far larger than that.
ASSEMBLE_MAX = 16 << 20


def _h5():
    import h5py

    return h5py


def _new_dataset(group_id, name: str, shape: tuple, dtype):
    """A contiguous dataset as ``h5py.Group.create_dataset(name, shape, dtype)`` makes it (the same dataset
    creation properties: h5py's ``make_new_dset`` defaults, no time tracking), through h5py's low-level
    API: the high-level call costs ~150-600 us a dataset here, most of it Python (profiled)."""
    import numpy as np

    h5py = _h5()
    if not _DCPL:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_obj_track_times(False)
        _DCPL.append(dcpl)
    dtype = np.dtype(dtype)
    tid = _TYPES.get(dtype)
    if tid is None:
        tid = _TYPES[dtype] = h5py.h5t.py_create(dtype, logical=1)
    sid = h5py.h5s.create_simple(tuple(shape))
    return h5py.h5d.create(group_id, name.encode("utf-8"), tid, sid, dcpl=_DCPL[0])


#: The dataset creation property list and the file types :func:`_new_dataset` uses, made once per process
#: (property lists and types are only read by ``H5Dcreate``; ~25 us a dataset saved).
_DCPL: list = []
_TYPES: dict = {}


def _require_group(f, gpath: str, made: dict):
    """``f.require_group(gpath).id`` for a file this writer created and alone writes, through the
    low-level API (h5py's ``require_group`` and ``attrs[...] =`` cost ~0.2 ms a group here,
    profiled).  Made as h5py makes groups (its link creation list: intermediate groups created, ASCII
    or UTF-8 names as h5py chooses them).  ``made``: the paths made so far, with their ids (None for a
    group made on the way to another), so the file is never asked whether a path exists."""
    h5py = _h5()
    gid = made.get(gpath)
    if gid is not None:
        return gid
    parts = [p for p in gpath.split("/") if p]
    if not parts:
        return f.id  # the root
    bpath = "/".join(parts).encode("utf-8")
    if gpath in made:  # made on the way to another group
        gid = h5py.h5g.open(f.id, bpath)
    else:
        lcpl = h5py.h5p.create(h5py.h5p.LINK_CREATE)
        lcpl.set_create_intermediate_group(True)
        lcpl.set_char_encoding(h5py.h5t.CSET_ASCII if gpath.isascii() else h5py.h5t.CSET_UTF8)
        gid = h5py.h5g.create(f.id, bpath, lcpl=lcpl)
        for i in range(1, len(parts)):
            made.setdefault("/".join(parts[:i]), None)
    made[gpath] = gid
    return gid


_NAME_TYPES: list = []


def _name_attr(gid, name: str) -> None:
    """``group.attrs["name"] = name`` as h5py writes a ``str`` (a scalar variable-length UTF-8 string:
    ``h5py.string_dtype()``, written from its in-memory object type), low level; Keras's ``H5IOStore``
    writes the same through h5py."""
    import numpy as np

    h5py = _h5()
    if not _NAME_TYPES:
        dt = h5py.string_dtype()
        _NAME_TYPES.extend([dt, h5py.h5t.py_create(dt, logical=True), h5py.h5t.py_create(dt)])
    dt, ftype, mtype = _NAME_TYPES
    if not isinstance(name, str):  # h5py's low-level vlen write of a non-str object crashes the process (found by
        # tests/readers/test_fuzz.py: a layer name that is a number or a list in a damaged config)
        raise InputError(f"a layer or weight name is not a string: {name!r:.60}")
    aid = h5py.h5a.create(gid, b"name", ftype, h5py.h5s.create(h5py.h5s.SCALAR))
    aid.write(np.array(name, dtype=dt), mtype=mtype)


def _write_block(dsid, where, block) -> None:
    """``ds[where] = block``, low level for the ``(slice(None), slice(a, b))`` blocks :class:`Pieces` yield."""
    h5py = _h5()
    cols = where[1] if isinstance(where, tuple) and len(where) == 2 else None
    if (block.ndim != 2 or cols is None or where[0] != slice(None) or not isinstance(cols, slice) or cols.step not in (None, 1)
            or cols.start is None or block.shape[0] != dsid.shape[0]):
        h5py.Dataset(dsid)[where] = block
        return
    rows, ncols = block.shape
    fspace = dsid.get_space()
    fspace.select_hyperslab((0, cols.start), (rows, ncols))
    dsid.write(h5py.h5s.create_simple((rows, ncols)), fspace, block)


def _nbytes(array: "Pieces") -> int:
    import numpy as np

    return int(np.prod(array.shape, dtype=np.int64)) * np.dtype(array.dtype).itemsize


def _write_arrays(f, groups: list, arrays: Iterable, *, whole: bool) -> list:
    """Write ``groups`` and ``arrays`` (see :func:`write_weights_h5`) into the open HDF5 file ``f``.
    ``whole``: a :class:`Pieces` weight is assembled into one array and written at once (the in-memory
    route: small models only); else one over :data:`ASSEMBLE_MAX` is written block by block and its digest
    read back (see Pieces), and a smaller one assembled."""
    import numpy as np

    h5py = _h5()
    manifest = []
    made = {}
    for gpath, name in groups:
        gid = _require_group(f, gpath, made)
        if name is not None:
            _name_attr(gid, name)
    written = set()
    for gpath, index, array in arrays:
        ds_path = f"{gpath}/{index}"
        if ds_path in written:
            raise UnsupportedError(f"weight {ds_path} written twice (object paths collide)")
        written.add(ds_path)
        gid = made.get(gpath)
        if gid is None:
            gid = _require_group(f, gpath, made)
        if isinstance(array, Pieces) and not whole and _nbytes(array) > ASSEMBLE_MAX:
            dsid = _new_dataset(gid, str(index), array.shape, np.dtype(array.dtype))
            for where, block in array.pieces():
                _write_block(dsid, where, np.asarray(block, order="C"))
                del block
            # digest None: :func:`self_check` takes it from the finished file on disk, in row blocks
            # (the whole array never exists in memory: see Pieces)
            manifest.append((ds_path, tuple(array.shape), str(np.dtype(array.dtype)), None))
            del dsid, array
            continue
        if isinstance(array, Pieces):
            a = np.empty(array.shape, array.dtype)
            for where, block in array.pieces():
                a[where] = block
                del block
        else:
            a = np.asarray(array, order="C")  # not ascontiguousarray: it makes a 0-d array 1-d
        if a.dtype.kind not in "biuf" or not a.dtype.isnative:  # not met by Keras weights: h5py decides
            f[gpath][str(index)] = a
        else:
            dsid = _new_dataset(gid, str(index), a.shape, a.dtype)
            if a.size:
                dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, a)
            del dsid
        manifest.append((ds_path, tuple(a.shape), str(a.dtype), _digest(a)))
        del a, array
    return manifest


def write_weights_h5(path, groups: list, arrays: Iterable) -> list:
    """Write a Keras 3 weights HDF5 file at ``path`` (staged on disk: the bounded-memory route).

    ``groups``: ``(group path, name)`` for every ``vars`` group, created in this order (empty ones
    too, as Keras creates them when it has a name to record).  ``arrays``: an iterable of
    ``(group path, index, array)`` consumed one at a time (each array is dropped after writing).
    Returns the manifest ``[(dataset path, shape, dtype str, sha256)]`` for :func:`self_check`."""
    from ..files.outputs import hdf5_file

    # not h5py's own file driver: libhdf5's sec2 driver segfaults closing a file after a full disk
    # (outputs.hdf5_file)
    with hdf5_file(path) as f:
        return _write_arrays(f, groups, arrays, whole=False)


def weights_h5_image(groups: list, arrays: Iterable) -> tuple:
    """The same file as :func:`write_weights_h5`, built in memory (h5py's ``core`` driver without a
    backing store): ``(file image bytes, manifest)``.  For small models (:data:`IN_MEMORY_MAX`): nothing
    touches the disk until the caller writes the image, once."""
    h5py = _h5()
    f = h5py.File.in_memory()
    try:
        manifest = _write_arrays(f, groups, arrays, whole=True)
        f.flush()
        image = f.id.get_file_image()
    finally:
        f.close()
    return image, manifest


class Pieces:
    """A weight written piece by piece (one gate block at a time) into a dataset of ``shape`` and
    ``dtype``: ``pieces()`` yields ``(index expression, array)``.  Its manifest digest is taken by reading
    the written dataset back in row blocks, so the self-check of the archive proves the zip's copy equals
    the staged file for it; that the values are right is proven by ``tests/writers/test_streaming_writer.py``
    (bit-identical to :func:`gruconv.model.keras_layout.to_keras` of :func:`gruconv.model.keras_layout.from_cudnn`,
    and to the Keras-built route, on every fixture)."""

    def __init__(self, shape: tuple, dtype, pieces: Callable):
        self.shape, self.dtype, self.pieces = tuple(shape), dtype, pieces


def assembled(value):
    """A streamed weight as one in-memory array (:class:`Pieces` put together; anything else as it is):
    for the Keras-built route, which hands each array to a Keras variable (:func:`gruconv.keras3.build.assign`)."""
    import numpy as np

    if not isinstance(value, Pieces):
        return np.asarray(value)
    a = np.empty(value.shape, value.dtype)
    for where, block in value.pieces():
        a[where] = block
        del block
    return a


# --------------------------------------------------------------------------- atomic targets

@contextmanager
def _staged(target: Path, suffix: str):
    """A temporary file beside ``target``, named as :func:`gruconv.files.outputs.atomic_path` names its own
    (``.NAME.PID-XXXX.tmp...``), so that one left by a SIGKILLed writer is recognised and removed by the
    next conversion to the same output (:func:`gruconv.files.outputs.remove_stale_temps`).  ``target`` is
    usually already such a temporary (``convert`` writes through ``atomic_path``): its name is kept as
    the prefix then.  The first version's ``..NAME.PID-XXXX.tmp.keras.YYYY.h5.tmp`` matched no pattern
    and stayed behind (``tests/files/test_crash_safety.py``, seen in the fresh-clone slow tier)."""
    target = Path(target)
    name = target.name
    prefix = name + "." if re.match(r"^\..+\.\d+-[A-Za-z0-9_]+\.tmp", name) else f".{name}.{os.getpid()}-"
    with scratch_file(target.parent, prefix=prefix, suffix=".tmp" + suffix) as tmp:
        yield tmp


def _put_in_place(tmp: Path, target: Path) -> None:
    try:
        os.replace(tmp, target)
    except OSError as e:
        raise OutputError(f"cannot move the written file into place ({e.strerror or e})", path=target) from None


def write_keras(target, config: dict, groups: list, arrays: Iterable, *, meta: Optional[dict] = None,
                size_hint: Optional[int] = None) -> list:
    """Write the ``.keras`` archive ``target`` (atomically; :func:`self_check` before it appears).
    ``size_hint``: the caller's estimate of the weight bytes; at most :data:`IN_MEMORY_MAX`, the weights
    file is built in memory (:func:`weights_h5_image`) and written once, into the zip; otherwise (or
    unknown) it is staged beside the target, one gate block at a time, and copied into the zip in
    chunks.  Returns the weights manifest."""
    target = Path(target)
    meta = meta or keras3_config.metadata()
    if size_hint is not None and size_hint <= IN_MEMORY_MAX:
        image, manifest = weights_h5_image(groups, arrays)
        with _staged(target, ".keras") as zip_tmp:
            with zipfile.ZipFile(zip_tmp, "w") as zf:  # ZIP_STORED, as Keras writes it
                zf.writestr(METADATA_NAME, json.dumps(meta))
                zf.writestr(CONFIG_NAME, json.dumps(config))
                zf.writestr(WEIGHTS_NAME, image)
            del image
            self_check(zip_tmp, manifest, config=config)
            _put_in_place(zip_tmp, target)
        return manifest
    with _staged(target, ".keras") as zip_tmp:
        with zipfile.ZipFile(zip_tmp, "w") as zf:  # ZIP_STORED, as Keras writes it
            zf.writestr(METADATA_NAME, json.dumps(meta))
            zf.writestr(CONFIG_NAME, json.dumps(config))
            manifest = _weights_member(zf, groups, arrays)
        self_check(zip_tmp, manifest, config=config, weights_crc_from_disk=True)
        _put_in_place(zip_tmp, target)
    return manifest


def _weights_member(zf, groups: list, arrays: Iterable) -> list:
    """Write ``model.weights.h5`` as the last member of the open ``zf``, in place: its local header
    (sizes and CRC-32 still zero, room reserved for the zip64 ones), then the HDF5 file written by h5py
    straight into the archive after it (:class:`_Window`), then the CRC-32 computed by reading those
    bytes back from the file, the header rewritten, and the member entered in ``zf``'s directory as
    ``ZipFile.writestr`` enters one (``ZipInfo``, ``filelist``, ``NameToInfo``, ``start_dir``).

    Why: staging the weights file beside the archive and copying it in (``ZipFile.write``)
    wrote every weight twice and read it twice more (the copy and ``testzip``); on the large bench model
    that was ~1 s of 3 s.  The result is what ``ZipFile.write`` of a staged file gives (a stored member,
    a zip64 local header as ``force_zip64`` writes one), read back by :func:`self_check`."""
    import time as _time
    import zlib

    h5py = _h5()
    zinfo = zipfile.ZipInfo(WEIGHTS_NAME, date_time=_time.localtime(_time.time())[:6])
    zinfo.compress_type = zipfile.ZIP_STORED
    zinfo.external_attr = 0o600 << 16  # as writestr sets it
    zinfo.file_size = zinfo.compress_size = 0
    zinfo.CRC = 0
    fp = zf.fp
    zinfo.header_offset = zf.start_dir
    fp.seek(zinfo.header_offset)
    header = zinfo.FileHeader(zip64=True)
    fp.write(header)
    data_offset = zinfo.header_offset + len(header)
    window = _Window(fp, data_offset)
    # h5py's file-object driver: a full disk is an OSError where it happens (outputs.hdf5_file)
    f = h5py.File(window, "w")
    try:
        manifest = _write_arrays(f, groups, arrays, whole=False)
    finally:
        f.close()
    fp.flush()
    size = window.size()
    crc, left = 0, size
    fp.seek(data_offset)
    while left:
        chunk = fp.read(min(left, 4 << 20))
        if not chunk:
            raise OutputError("self-check: the weights file is shorter than written", path=zf.filename)
        crc = zlib.crc32(chunk, crc)
        left -= len(chunk)
    zinfo.CRC, zinfo.file_size, zinfo.compress_size = crc, size, size
    final = zinfo.FileHeader(zip64=True)
    if len(final) != len(header):
        raise OutputError("cannot write the archive (zip header size changed)", path=zf.filename)
    fp.seek(zinfo.header_offset)
    fp.write(final)
    fp.seek(data_offset + size)
    zf.start_dir = data_offset + size
    zf.filelist.append(zinfo)
    zf.NameToInfo[zinfo.filename] = zinfo
    zf._didModify = True
    return manifest


def write_weights(target, groups: list, arrays: Iterable, *, size_hint: Optional[int] = None) -> list:
    """Write a Keras 3 ``.weights.h5`` file (what ``Model.save_weights`` writes), atomically; in memory
    first when ``size_hint`` <= :data:`IN_MEMORY_MAX` (as :func:`write_keras`)."""
    target = Path(target)
    with _staged(target, ".weights.h5") as tmp:
        if size_hint is not None and size_hint <= IN_MEMORY_MAX:
            image, manifest = weights_h5_image(groups, arrays)
            try:
                with open(tmp, "wb") as fh:
                    fh.write(image)
            except OSError as e:
                from ..files.outputs import write_failure

                raise OutputError(f"cannot write output ({write_failure(e)})", path=target) from None
            del image
        else:
            manifest = write_weights_h5(tmp, groups, arrays)
        self_check(tmp, manifest)
        _put_in_place(tmp, target)
    return manifest


# --------------------------------------------------------------------------- structural self-check

def self_check(path, manifest: list, *, config: Optional[dict] = None, weights_crc_from_disk: bool = False) -> None:
    """Reopen what was written and prove its structure: for a ``.keras`` zip, exactly the three
    members, ``config.json`` parses (and equals ``config`` when given), ``metadata.json`` parses;
    every weight of ``manifest`` present with its shape, dtype and SHA-256, and no other dataset.
    Raises :class:`OutputError` (one line) naming the first difference.

    Always a reread of the bytes on disk (the page cache): a weights file of at most
    :data:`IN_MEMORY_MAX` bytes is read whole (from the archive through ``ZipFile.read``, which checks
    the member's CRC-32) and opened as an in-memory HDF5 image; a larger one is opened where it lies
    (:func:`_stored_member`), after ``ZipFile.testzip`` checked every CRC."""
    h5py = _h5()

    path = Path(path)
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
                if sorted(names) != sorted([CONFIG_NAME, METADATA_NAME, WEIGHTS_NAME]):
                    raise OutputError(f"self-check: archive members {names}", path=path)
                info = zf.getinfo(WEIGHTS_NAME)
                small = info.file_size <= IN_MEMORY_MAX
                if not small and not weights_crc_from_disk:  # else its CRC was just computed from the disk
                    bad = zf.testzip()
                    if bad is not None:
                        raise OutputError(f"self-check: archive member {bad} fails its CRC", path=path)
                try:  # ZipFile.read checks each member's CRC-32
                    got = json.loads(zf.read(CONFIG_NAME).decode("utf-8"))
                    json.loads(zf.read(METADATA_NAME).decode("utf-8"))
                    image = zf.read(WEIGHTS_NAME) if small else None
                except zipfile.BadZipFile as e:
                    raise OutputError(f"self-check: {str(e).splitlines()[0][:200]}", path=path) from None
                if config is not None and got != json.loads(json.dumps(config)):
                    raise OutputError("self-check: config.json differs from the generated config", path=path)
                if small:
                    _check_h5(h5py.File.in_memory(image), manifest, path)
                elif info.compress_type == zipfile.ZIP_STORED:
                    with _stored_member(path, info) as fh:
                        _check_h5(h5py.File(fh, "r"), manifest, path)
                else:  # not what write_keras writes; read through zipfile
                    with zf.open(WEIGHTS_NAME) as fh:
                        _check_h5(h5py.File(fh, "r"), manifest, path)
        elif os.path.getsize(path) <= IN_MEMORY_MAX:
            with open(path, "rb") as fh:
                image = fh.read()
            _check_h5(h5py.File.in_memory(image), manifest, path)
        else:
            _check_h5(h5py.File(path, "r"), manifest, path)
    except OutputError:
        raise
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
        raise OutputError(f"self-check: cannot reread the written file ({str(e).splitlines()[0][:200]})",
                          path=path) from None


def _stored_member(path, info: zipfile.ZipInfo) -> _Window:
    """A stored (uncompressed) zip member as a seekable read-only file over the archive's own bytes.

    ``zipfile``'s member file emulates a backward seek by rereading from the member's start in 16 MiB
    reads (``ZipExtFile.seek``, ``MAX_SEEK_READ``): HDF5 seeks constantly, so the self-check through it
    was slow and held one more such buffer at the conversion's peak.  A stored member's bytes are
    contiguous in the archive after its local header (APPNOTE 4.3.7: 30 bytes + name + extra field)."""
    from ..files.window import stored_member

    f = open(path, "rb")
    try:
        window = stored_member(f, info.header_offset, info.file_size)
        if window is None:
            raise OutputError(f"self-check: archive member {info.filename} has no local header", path=path)
    except BaseException:
        f.close()
        raise
    return window


def _check_h5(f, manifest: list, path) -> None:
    """Every dataset of ``f`` is in ``manifest``, and every manifest weight is in ``f`` with its shape,
    dtype and SHA-256.  Low-level h5py (one visit of the file, ``h5d.open`` per weight): the high-level
    walk, ``in`` and ``[]`` took ~10 ms on a small model (profiled)."""
    import numpy as np

    from ..files import hdf5 as h5safe

    h5py = _h5()
    with f:
        seen = set()

        def visit(name, info):
            if info.type == h5py.h5o.TYPE_DATASET:
                seen.add(name.decode("utf-8") if isinstance(name, bytes) else name)

        h5py.h5o.visit(f.id, visit, info=True)
        expected = {m[0] for m in manifest}
        extra = sorted(seen - expected)
        if extra:
            raise OutputError(f"self-check: unexpected weight {extra[0]}", path=path)
        for n, (ds_path, shape, dtype, digest) in enumerate(manifest):
            if ds_path not in seen:
                raise OutputError(f"self-check: weight {ds_path} missing", path=path)
            dsid = h5py.h5d.open(f.id, ds_path.encode("utf-8"))
            got_shape, got_dtype = tuple(dsid.shape), dsid.dtype
            if got_shape != tuple(shape) or str(got_dtype) != dtype:
                raise OutputError(f"self-check: weight {ds_path} is {got_dtype}{got_shape}, wrote "
                                  f"{dtype}{tuple(shape)}", path=path)
            nbytes = int(np.prod(got_shape, dtype=np.int64)) * got_dtype.itemsize
            if nbytes <= h5safe.ROW_BLOCK_BYTES and got_dtype.kind in "biuf":
                a = np.empty(got_shape, got_dtype)
                if a.size:
                    dsid.read(h5py.h5s.ALL, h5py.h5s.ALL, a)
                got = _digest(a)
                del a
            else:
                got = _dataset_digest(h5py.Dataset(dsid), path)
            if digest is None:  # a Pieces weight (written block by block): its digest is the file's
                manifest[n] = (ds_path, shape, dtype, got)
            elif got != digest:
                raise OutputError(f"self-check: weight {ds_path} does not read back bit for bit", path=path)


# --------------------------------------------------------------------------- sources

def _check_fits(layer: str, slot, wname: str, ref, path) -> None:
    """The stored weight ``ref`` has the shape the layer's config fixes (:attr:`gruconv.keras3.config.Slot.shape`),
    else one :class:`InputError`: ``load_model`` would refuse the output (the generative test's case:
    ``Embedding input_dim`` changed in the config, the stored table not)."""
    if not keras3_config.fits(slot.shape, ref.shape):
        want = "(" + ", ".join("?" if e is None else str(e) for e in slot.shape) + ")"
        raise InputError(f"layer {layer!r}: the stored {wname} has shape {tuple(ref.shape)}, its config makes "
                         f"{slot.role} {want}: keras.saving.load_model would refuse the output", path=path)


def weight_arrays(doc, config: dict, tops: list, nonfinite: Optional[dict] = None) -> Iterable:
    """``(group, index, array)`` for a Keras graph document, over its weight store whatever the input's
    layout (:class:`gruconv.model.weights.WeightStore`), one array in memory at a time: each Keras 3
    slot of ``tops`` filled from the stored weight the store pairs with it (:meth:`~gruconv.model.weights.OpenStore.fill`:
    a legacy file in the order Keras 3's legacy loader matches them,
    :attr:`gruconv.keras3.config.TopLayer.legacy_order`; a tf_keras ``.keras`` by object path) and checked
    against the shape the config fixes; CuDNNGRU / CuDNNLSTM weights transformed one gate block at a
    time (:func:`cudnn_direction`: the values of :func:`gruconv.model.keras_layout.to_keras` of
    :func:`~gruconv.model.keras_layout.from_cudnn`, as :func:`gruconv.writers.legacy_graph.write` writes
    them).  ``nonfinite`` (when given) receives the NaN/Inf count per CuDNN layer path, counted on the
    stored values before the transform (an LSTM's two biases are summed by the transform, so counting after
    it could merge or hide one)."""
    replaced = {}
    for rnn in doc.rnns:
        for d, roles in enumerate(rnn.datasets):
            for i, role in enumerate(WEIGHT_ROLES):
                replaced["/" + roles[role].lstrip("/")] = (rnn, d, i)
    with doc.store.open() as store:
        current = None
        for n, (top, entries) in enumerate(store.fill(tops, config), 1):
            step("convert", n, len(tops), top.name)
            for slot, label, ref in entries:
                _check_fits(top.name, slot, label, ref, doc.path)
                if ref.name in replaced:
                    rnn, d, i = replaced[ref.name]
                    if current is None or current[0] != (id(rnn), d):
                        current = None  # the previous direction's arrays go first
                        current = ((id(rnn), d), cudnn_direction(store.rnn(rnn, d), doc.path, rnn, d, nonfinite))
                    value = current[1][i]
                    current[1][i] = None
                else:  # checked: no external storage, no virtual dataset, native byte order
                    value = copied(ref, doc.path)
                yield slot.group, slot.index, value
                del value


#: A copied weight (any layer's but a cuDNN one's, which :func:`cudnn_direction` streams gate by gate)
#: of more bytes than this is read and written in blocks of about ``ROW_BLOCK_BYTES``
#: (:func:`gruconv.files.hdf5.blocks`: whole rows, or pieces of a wider row) instead of whole (a
#: legacy file whose largest tensor is a 1.2 GB ``Dense`` kernel converted at 2.3 GB peak RSS, the
#: tensor read whole and then written).  Below it, one read is as cheap and keeps the in-memory digest.
STREAM_COPY_BYTES = 32 << 20


def copied(ref, path):
    """A non-cuDNN weight of the input (a :class:`gruconv.model.weights.WeightRef`) as the streamed writer
    copies it: the array itself when small, else :class:`Pieces` of about 8 x
    :data:`~gruconv.files.hdf5.ROW_BLOCK_BYTES` each in the machine's byte order (whole leading-axis rows,
    or pieces of a row larger than that), so peak memory grows with neither the largest tensor nor its
    widest row.  The stored tensor is
    checked first (declared size, storage, dtype) either way."""
    import numpy as np

    from ..files import hdf5 as h5safe

    ref.check()
    shape = ref.shape
    size = int(np.prod(shape, dtype=np.int64))
    if len(shape) == 0 or size * ref.dtype.itemsize <= STREAM_COPY_BYTES:
        return ref.read()
    dtype = np.dtype(ref.dtype).newbyteorder("=")

    def pieces():
        # 8 read blocks a piece (32 MiB): as fast as whole 200 MB rows on bench/wide.py's (5, 50_000_000)
        # kernel, where 4 MiB pieces were ~15% slower; peak RSS 0.12 x its parameter bytes
        for where, block in ref.blocks(8 * h5safe.ROW_BLOCK_BYTES):
            yield where, h5safe.native(block)

    return Pieces(shape, dtype, pieces)


def cudnn_direction(refs: dict, path, rnn, d: int, nonfinite: Optional[dict] = None) -> list:
    """One direction of a CuDNNGRU / CuDNNLSTM as Keras 3 ``[kernel, recurrent_kernel, bias]``, the two
    kernels as :class:`Pieces` read and written one gate block at a time (about two gate blocks in
    memory, where the whole-direction route holds the raw, canonical and Keras arrays at once).

    The mapping is :mod:`gruconv.model.keras_layout`'s, composed: :func:`~gruconv.model.keras_layout.from_cudnn` makes
    cuDNN gate ``j`` from stored block ``order[j]`` (``block.reshape(H, I)``), and
    :func:`~gruconv.model.keras_layout.to_keras` makes Keras block ``k`` from cuDNN gate ``order[k]``
    transposed, with ``order`` = :data:`~gruconv.model.keras_layout.KERAS_GATE_ORDER`; so Keras block ``k`` is
    stored block ``order[order[k]]``, reshaped ``(H, I)`` and transposed.  The bias is small: whole, by
    :func:`keras_bias`.  NaN/Inf are counted on the raw blocks (the same values as the canonical arrays).
    ``tests/writers/test_streaming_writer.py`` checks the result against ``to_keras(from_cudnn(...))`` for both
    cells and dtypes.  ``refs``: the direction's ``{role: WeightRef}`` (:meth:`~gruconv.model.weights.OpenStore.rnn`)."""
    from ..model.canonical import CELLS
    from ..model.keras_layout import KERAS_GATE_ORDER

    import numpy as np

    roles = rnn.datasets[d]
    cell = rnn.shape.cell
    G = CELLS[cell].num_gates
    order = KERAS_GATE_ORDER[cell]
    where = f"{rnn.cls} {rnn.path}" + ("" if len(rnn.datasets) == 1 else f" ({'forward' if d == 0 else 'backward'})")
    for x in refs.values():
        x.check()
    k, rk = refs["kernel"], refs["recurrent_kernel"]
    if len(k.shape) != 2 or k.shape[1] % G:
        raise InputError(f"{where}: kernel has shape {tuple(k.shape)}, expected (input_size, {G}*units)", path=path)
    I, H = k.shape[0], k.shape[1] // G
    if tuple(rk.shape) != (H, G * H):
        raise InputError(f"{where}: recurrent_kernel has shape {tuple(rk.shape)}, expected {(H, G * H)}", path=path)
    bias_raw = refs["bias"].read()
    if tuple(bias_raw.shape) != (2 * G * H,):
        raise InputError(f"{where}: bias has shape {tuple(bias_raw.shape)}, expected {(2 * G * H,)}", path=path)

    def count(x) -> None:
        if nonfinite is not None:
            nonfinite[rnn.path] = nonfinite.get(rnn.path, 0) + int(np.count_nonzero(~np.isfinite(x)))

    count(bias_raw)
    bias = keras_bias(bias_raw, cell)
    del bias_raw

    def blocks(x, rows: int):
        def gen():
            for kk in range(G):
                j = order[order[kk]]
                raw = x.block(np.s_[:, j * H:(j + 1) * H])
                count(raw)
                # a transposed view: the consumer copies it once, into the assembled array or into the
                # contiguous block it writes (``_write_arrays``), not twice
                yield (slice(None), slice(kk * H, (kk + 1) * H)), raw.reshape(H, rows).T
                del raw
        return gen

    return [Pieces((I, G * H), k.dtype, blocks(k, I)), Pieces((H, G * H), rk.dtype, blocks(rk, H)), bias]


def keras_bias(bias, cell: str):
    """A stored CuDNN bias ``(2*G*H,)`` as the Keras 3 layer's, by :mod:`gruconv.model.keras_layout`'s mapping
    composed as in :func:`cudnn_direction` (Keras block ``k`` = stored block ``order[order[k]]`` of each
    half): GRU ``(2, G*H)``, input half then recurrent half; LSTM ``(G*H,)``, the two halves summed in
    float64 and rounded once (:func:`gruconv.model.keras_layout.to_keras_lstm`'s rule)."""
    import numpy as np

    from ..model.canonical import CELLS
    from ..model.keras_layout import KERAS3_BIAS_ROWS, KERAS_GATE_ORDER

    G = CELLS[cell].num_gates
    order = KERAS_GATE_ORDER[cell]
    halves = np.asarray(bias).reshape(2, G, -1)
    picked = halves[:, [order[order[kk]] for kk in range(G)], :]
    if KERAS3_BIAS_ROWS[cell] == 2:  # both biases kept (reset_after GRU); else their sum (LSTM)
        return np.ascontiguousarray(picked.reshape(2, -1))
    return (picked[0].astype(np.float64) + picked[1].astype(np.float64)).astype(bias.dtype).reshape(-1)


def stack_arrays(stack, tops: list, release: Optional[Callable] = None) -> Iterable:
    """``(group, index, array)`` for a canonical stack (TF1 checkpoints) and the plan of
    :func:`gruconv.keras3.config.stack_model_config`: per layer, direction 0 then 1, Keras arrays
    ``kernel, recurrent_kernel, bias`` (:func:`canonical_direction`: the values of
    :func:`gruconv.model.keras_layout.to_keras`, the kernels one gate block at a time)."""
    s = stack.shape
    rnn_tops = [t for t in tops if t.slots]
    if len(rnn_tops) != s.num_layers:
        raise UnsupportedError(f"stack plan has {len(rnn_tops)} layers, the stack {s.num_layers}")
    for layer, top in enumerate(rnn_tops):
        for d in range(s.num_directions):
            arrays = canonical_direction(stack.params[s.pseudo_layer(layer, d)], s.cell,
                                         s.layer_input_size(layer), release)
            slots = top.slots[3 * d:3 * d + 3]
            for slot, value in zip(slots, arrays):
                yield slot.group, slot.index, value
            del arrays, value
            if release is not None:  # e.g. the checkpoint reader's: drop the mapped pages read so far
                release()


def canonical_direction(p, cell: str, input_size: Optional[int] = None, release: Optional[Callable] = None) -> list:
    """One canonical pseudo-layer (:class:`gruconv.model.canonical.GateParams`; a checkpoint's are views of the
    mapped file) as Keras 3 ``[kernel, recurrent_kernel, bias]``, the kernels as :class:`Pieces`: Keras
    block ``k`` is cuDNN gate ``order[k]``'s matrix transposed (``order`` =
    :data:`gruconv.model.keras_layout.KERAS_GATE_ORDER`, as :func:`gruconv.model.keras_layout.to_keras` concatenates
    them; a skip-input pseudo-layer gets its identity blocks), and ``release`` (the reader's: drop the
    mapped pages) runs after each block, so about one gate block of the file is resident at a time.
    The bias follows :func:`gruconv.model.keras_layout.to_keras_gru` / ``to_keras_lstm`` (GRU: input then
    recurrent half; LSTM: the sum in float64, rounded once).  ``tests/writers/test_streaming_writer.py`` checks the
    result against ``to_keras`` for both cells, and the files against the Keras-built route."""
    import numpy as np

    from ..model.keras_layout import KERAS3_BIAS_ROWS, KERAS_GATE_ORDER

    order = KERAS_GATE_ORDER[cell]
    G = len(order)
    H = p.recurrent_weights.shape[1]
    rdtype = p.recurrent_weights.dtype
    if KERAS3_BIAS_ROWS[cell] == 2:  # both biases kept (reset_after GRU); else their sum (LSTM)
        bias = np.stack([np.concatenate([p.input_bias[g] for g in order]),
                         np.concatenate([p.recurrent_bias[g] for g in order])])
    else:
        bias = np.concatenate([p.input_bias[g].astype(np.float64) + p.recurrent_bias[g].astype(np.float64)
                               for g in order]).astype(rdtype)
    if release is not None:
        release()

    def blocks(matrices, rows: int, dtype):
        def gen():
            for kk in range(G):
                if matrices is None:  # CUDNN_SKIP_INPUT: the input is added as is
                    out = np.eye(rows, H, dtype=dtype)
                else:
                    out = np.ascontiguousarray(matrices[order[kk]].T)
                yield (slice(None), slice(kk * H, (kk + 1) * H)), out
                del out
                if release is not None:
                    release()
        return gen

    if p.input_weights is None:
        I, kdtype = input_size or H, rdtype
    else:
        I, kdtype = p.input_weights.shape[2], p.input_weights.dtype
    return [Pieces((I, G * H), kdtype, blocks(p.input_weights, I, kdtype)),
            Pieces((H, G * H), rdtype, blocks(p.recurrent_weights, H, rdtype)), bias]


# --------------------------------------------------------------------------- entry points

def write_keras_h5_doc(doc, target, *, weights_only: bool = False, warnings: Optional[list] = None,
                       nonfinite: Optional[dict] = None, info: Optional[dict] = None) -> list:
    """Stream a legacy Keras HDF5 document into a ``.keras`` archive (or a Keras 3 ``.weights.h5``
    with ``weights_only``).  Raises :class:`UnsupportedError` for what this writer does not cover
    (the caller may fall back to the Keras-built route): a layer outside the vocabulary, a training
    config outside :func:`gruconv.keras3.config.compile_config`'s.  ``warnings`` receives what a
    training config loses (custom losses / metrics), as the Keras route reports it; ``nonfinite`` the
    NaN/Inf count per CuDNN layer (:func:`weight_arrays`); ``info["config"]`` the generated Keras 3
    model config (for :func:`check_load` of a weights-only output)."""
    if doc.model_config is None:
        raise UnsupportedError("a weights-only input needs its architecture (--config)", path=doc.path)
    check_rnn_inputs(doc, warnings)
    # InputError too: a value Keras 3 refuses (keras3/validate.py)
    with about(doc.path, (UnsupportedError, InputError)):
        config = keras3_config.translate(doc.model_config)
        groups, tops = keras3_config.saveable_plan(config)
        custom_slots(doc, config, groups, tops)
        if warnings is not None:
            warnings.extend(dialects.rescale_notes(tops))
        if info is not None:
            info["config"] = config
        arrays = dialects.rescaled(weight_arrays(doc, config, tops, nonfinite), tops, tops)
        hint = _doc_bytes(doc)
        if weights_only:
            return write_weights(target, groups, arrays, size_hint=hint)
        compiled = keras3_config.compile_config(doc.training_config, _n_outputs(config)) \
            if doc.training_config else None
        if doc.training_config and compiled is None and warnings is not None:
            warnings.append("training config is not a JSON object; model written uncompiled")
        if compiled is not None:
            config["compile_config"] = compiled.compile_config
            if warnings is not None:
                warnings.extend(compiled.warnings)
            groups = groups + [("optimizer/vars", compiled.optimizer_name)]
            arrays = with_optimizer(arrays, tops, compiled)
            hint = None if hint is None else hint * 4  # the model + at most three optimizer slots a weight
        return write_keras(target, config, groups, arrays, size_hint=hint)


def custom_slots(doc, config: dict, groups: list, tops: list) -> None:
    """Give each custom layer of ``config`` (:func:`gruconv.keras3.config.custom_layers`) its variables:
    as many as the file stores for it, in the stored order, ``<its object path>/vars/0..n`` (Keras 3
    ``Layer.save_own_variables`` writes ``trainable + non_trainable`` variables in creation order, and
    tf_keras's legacy writer stored ``layer.weights``, the same concatenation: so the i-th stored weight is
    ``vars/i`` when the user's Keras 3 class creates its weights in the order the original did).  Shapes
    and dtypes are the stored ones.  Every such variable counts as trainable (a legacy file does not say;
    it only matters for a compiled model's optimizer slots).

    A custom layer below the top level (inside a nested model or a wrapper) that holds weights is refused
    (:class:`UnsupportedError`): its weights sit in its top-level layer's group under names the file
    alone cannot pair with Keras 3's object paths."""
    names = [n for ns in keras3_config.custom_layers(config).values() for n in ns]
    if not names:
        return
    odd = [n for n in names if not isinstance(n, str)]
    if odd or len(set(names)) != len(names):
        raise UnsupportedError(f"custom layer name {(odd or names)[0]!r:.60} is not a unique layer name")
    by_name = {t.name: t for t in tops}
    counts = {}
    with doc.store.open() as store:
        for name in names:
            if name in by_name and name in doc.layer_names:
                counts[name] = len(store.layer_weights(name))
    for name in names:
        top = by_name.get(name)
        if top is None:
            if _holds_weights_below(doc, name):
                raise UnsupportedError(f"custom layer {name!r} sits inside a nested model or wrapper and holds "
                                       "weights: the streaming writer carries custom layers over at the top "
                                       "level only")
            continue
        group = next((g for g, n in groups if n == name and re.fullmatch(r"layers/[^/]+/vars", g)), None)
        if group is None or top.slots:
            raise UnsupportedError(f"custom layer {name!r}: no object path of its own among the model's layers")
        top.slots = [keras3_config.Slot(group, i, True, f"custom weight {i}") for i in range(counts.get(name, 0))]


def _holds_weights_below(doc, name: str) -> bool:
    """Whether any stored weight name has ``name`` as an owner (``outer/<name>/w:0``)."""
    with doc.store.open() as store:
        for layer in doc.layer_names:
            if any(name in w.split("/")[:-1] for w in store.layer_weights(layer)):
                return True
    return False


def _doc_bytes(doc) -> Optional[int]:
    """The weight bytes of a legacy Keras HDF5 document, estimated for :data:`IN_MEMORY_MAX`: the largest
    of the input file's size, the CuDNN layers' parameter bytes and the bytes its stored weights declare
    (``doc.weight_bytes``, from the headers the reader's scan read).  The declared bytes are what bound
    memory: a file with compressed datasets is far smaller than its weights (a 5 MB file
    of gzip-1 zeros declaring 1.2 GB was assembled in memory, 2.4 GB peak RSS, when only the file's size
    was asked), and a TF2 checkpoint's path is a directory.  None when nothing can be measured."""
    declared = getattr(doc, "weight_bytes", None)
    try:
        size = os.path.getsize(doc.path)
    except (OSError, TypeError, ValueError):
        size = None
    if size is None and declared is None:
        return None
    try:
        rnn_bytes = sum(_stack_bytes(r.shape) for r in doc.rnns)
    except (AttributeError, TypeError, ValueError):
        rnn_bytes = 0
    return max(size or 0, rnn_bytes, declared or 0)


def _stack_bytes(shape) -> int:
    """Parameter bytes of a :class:`gruconv.model.canonical.StackShape` (an upper bound: skip-input layers hold less)."""
    import numpy as np

    G, H = shape.gates, shape.units
    per = 0
    for layer in range(shape.num_layers):
        per += shape.num_directions * (G * H * (shape.layer_input_size(layer) + H) + 2 * G * H)
    return per * np.dtype(shape.dtype).itemsize


#: Layers whose output has as many features as their input (the last axis), for :func:`check_rnn_inputs`.
_SAME_FEATURES = IDENTITY_AT_INFERENCE - {"ActivityRegularization"} | {
    "Activation", "BatchNormalization", "LayerNormalization", "Masking", "ReLU", "LeakyReLU", "ELU", "Softmax",
    "PReLU", "ZeroPadding1D", "Cropping1D", "UpSampling1D", "MaxPooling1D", "AveragePooling1D", "MaxPool1D",
    "AvgPool1D"}
_RNN_CLASSES = {*CELL_OF_CUDNN_CLASS, *KERAS3_CLASS.values(), "SimpleRNN"}


def _features(layer: dict, f_in: Optional[int]) -> Optional[int]:
    """Features (last axis) of a legacy layer's output given its input's, or None when not known here (a
    damaged entry too: a class name that is no string is no class this knows, ``make fuzz``)."""
    cls, cfg = class_name_of(layer), layer.get("config") or {}
    if not isinstance(cfg, dict):
        return None
    if cls == "InputLayer":
        shape = cfg.get("batch_input_shape") or cfg.get("batch_shape")
        return shape[-1] if isinstance(shape, list) and shape and isinstance(shape[-1], int) else None
    if cls in _RNN_CLASSES:
        return cfg.get("units") if isinstance(cfg.get("units"), int) else None
    if cls == "Bidirectional":
        inner = _features(cfg.get("layer") or {}, f_in)
        return None if inner is None else inner * (2 if cfg.get("merge_mode", "concat") == "concat" else 1)
    if cls == "TimeDistributed":
        return _features(cfg.get("layer") or {}, f_in)
    if cls == "Dense":
        return cfg.get("units") if isinstance(cfg.get("units"), int) else None
    if cls == "Embedding":
        return cfg.get("output_dim") if isinstance(cfg.get("output_dim"), int) else None
    if cls in ("Conv1D", "Convolution1D"):
        return cfg.get("filters") if isinstance(cfg.get("filters"), int) else None
    if cls in _SAME_FEATURES:
        return f_in
    return None


def _inner_rnn(layer: dict, path: str) -> Optional[str]:
    """The config path of the CuDNN layer ``layer`` is or wraps, else None."""
    cls, cfg = class_name_of(layer), layer.get("config") or {}
    if cls in CELL_OF_CUDNN_CLASS:
        return path
    if cls in ("Bidirectional", "TimeDistributed") and isinstance(cfg, dict) and isinstance(cfg.get("layer"), dict):
        inner = cfg["layer"]
        name = (inner.get("config") or {}).get("name") if isinstance(inner.get("config"), dict) else None
        return _inner_rnn(inner, f"{path}/{name}") if name else None
    return None


def check_rnn_inputs(doc, notes: Optional[list] = None) -> None:
    """Refuse (:class:`InputError`, one line) a CuDNN layer whose kernel rows differ from the features the
    layer before it gives (Sequential order, or a Functional layer's first inbound tensor), where those are
    known from the config (:func:`_features`).  The Keras-built route found this when loading its output;
    the streaming writer has no Keras to load with, and would otherwise write a model that does not load."""
    from ..model.canonical import CELLS

    damaged = malformed(doc.model_config) if doc.model_config is not None else None
    if damaged:
        raise InputError(f"model_config not understood: {damaged}", path=doc.path)
    by_path = {r.path: r for r in doc.rnns}

    def visit(container: dict, prefix: str, f_in: Optional[int]) -> None:
        cfg = container.get("config")
        layers = cfg if isinstance(cfg, list) else (cfg.get("layers") if isinstance(cfg, dict) else None)
        if not isinstance(layers, list):
            return
        sequential = container.get("class_name") == "Sequential"
        out: dict = {}
        prev = f_in
        for index, layer in enumerate(layers):
            if not isinstance(layer, dict):
                return
            lcfg = layer.get("config") if isinstance(layer.get("config"), dict) else {}
            name = lcfg.get("name") or layer.get("name")
            if not isinstance(name, str):
                # a damaged entry (a list or number as name, ``make fuzz``): nothing can refer to it, and the
                # translation refuses it (keras3/validate.py: "a layer's name is not a string")
                name = None
            if sequential:
                # only the first layer's input shape counts (Keras 2's Sequential.add: keras3/legacy.py
                # _drop_later_input_shape); a later one is ignored, said so where it disagrees
                own = lcfg.get("batch_input_shape") or lcfg.get("batch_shape")
                own = own[-1] if isinstance(own, list) and own and isinstance(own[-1], int) else None
                given = own if index == 0 and own is not None else prev
                if index and own is not None and prev is not None and own != prev and notes is not None:
                    notes.append(f"layer {prefix}{name!s}: its batch_input_shape says {own} features, the layer "
                                 f"before it gives {prev}; ignored, as Keras 2's Sequential did (only the first "
                                 "layer's input shape counts)")
            else:
                given = None
                nodes = layer.get("inbound_nodes")
                try:
                    given = out.get(nodes[0][0][0]) if nodes else None
                except (TypeError, IndexError, KeyError):
                    given = None
            path = f"{prefix}{name}"
            rnn = by_path.get(_inner_rnn(layer, path) or "")
            if rnn is not None and given is not None and rnn.shape.input_size != given:
                cols = CELLS[rnn.shape.cell].num_gates * rnn.shape.units
                raise InputError(f"{rnn.cls} {rnn.path}: the layer before it gives {given} features, so its kernel "
                                 f"should be {(given, cols)}; the file has {(rnn.shape.input_size, cols)}",
                                 path=doc.path)
            if class_name_of(layer) in CONTAINER_CLASSES:
                visit(layer, f"{path}/", given)
                feats = None
            else:
                feats = _features(layer, given)
            out[name] = feats
            prev = feats

    visit(doc.model_config or {}, "", None)


def _n_outputs(config: dict) -> int:
    outs = config["config"].get("output_layers")
    if config["class_name"] == "Sequential" or not outs or isinstance(outs[0], str):
        return 1
    return len(outs)


def with_optimizer(arrays: Iterable, tops: list, compiled) -> Iterable:
    """``arrays`` followed by a freshly built optimizer's variables (``optimizer/vars``), as
    :func:`gruconv.keras3.runtime.compile` (``compile_from_config``) leaves them after
    ``optimizer.build(model.trainable_variables)``: ``iterations`` (int64 0), ``learning_rate``
    (float32), then zero slots per trainable variable (:attr:`keras3_config.Compiled.slot_calls`).
    Shapes are taken from the model arrays as they stream past (only shapes are kept)."""
    import numpy as np

    shapes = {}
    for g, i, a in arrays:
        shapes[g, i] = (a.shape, a.dtype) if isinstance(a, Pieces) else (np.shape(a), np.asarray(a).dtype)
        yield g, i, a
        del a
    trainable = [s for t in tops for s in t.slots if s.trainable]
    yield "optimizer/vars", 0, np.array(0, dtype=np.int64)
    yield "optimizer/vars", 1, np.array(compiled.learning_rate, dtype=np.float32)
    k = 2
    for call in compiled.slot_calls:
        for s in trainable:
            shape, dtype = shapes[s.group, s.index]
            for _ in call:
                yield "optimizer/vars", k, np.zeros(shape, dtype)
                k += 1


def write_stack(stack, target, *, name: Optional[str] = None, initial_state: bool = False,
                return_state: bool = False, mask_input: bool = False, weights_only: bool = False,
                release: Optional[Callable] = None, info: Optional[dict] = None) -> list:
    """Stream a canonical stack into a ``.keras`` archive (or ``.weights.h5``): the model of
    :func:`gruconv.keras3.build.build_stack_model`.  ``release`` is called after each pseudo-layer
    (TF1: ``doc.reader.release``, so about one layer of the mapped checkpoint is resident at a time)."""
    config = keras3_config.stack_model_config(stack.shape, name or stack.name, initial_state=initial_state,
                                              return_state=return_state, mask_input=mask_input)
    groups, tops = keras3_config.saveable_plan(config)
    if info is not None:
        info["config"] = config
    arrays = stack_arrays(stack, tops, release)
    hint = _stack_bytes(stack.shape)
    if weights_only:
        return write_weights(target, groups, arrays, size_hint=hint)
    return write_keras(target, config, groups, arrays, size_hint=hint)


# --------------------------------------------------------------------------- what the config says

def mask_producers(config: dict) -> list:
    """Names of the layers of a Keras model config (nested models included, wrapped layers not: as
    :func:`gruconv.keras3.runtime.mask_producers` walks ``model.layers``) that attach a Keras mask:
    ``Masking`` and ``Embedding(mask_zero=True)``.  Read from the config, so no Keras is needed; a
    Keras <= 2.2 Sequential config (a bare layer list) included."""
    def layers_of(obj) -> Optional[list]:
        cfg = obj.get("config") if isinstance(obj, dict) else None
        if isinstance(cfg, list):
            return cfg
        if isinstance(cfg, dict) and isinstance(cfg.get("layers"), list):
            return cfg["layers"]
        return None

    out, todo = [], list(layers_of(config) or [])
    while todo:
        layer = todo.pop(0)
        if not isinstance(layer, dict):
            continue
        inner = layers_of(layer)
        if inner is not None:
            todo.extend(inner)
            continue
        cfg = layer.get("config") if isinstance(layer.get("config"), dict) else {}
        cls = layer.get("class_name")
        if makes_mask(cls, cfg):
            out.append(cfg.get("name", cls))
    return out


# --------------------------------------------------------------------------- reading back

def is_keras3_weights(path) -> bool:
    """Whether ``path`` holds Keras 3's weights layout (a ``.keras`` zip, or an HDF5 file of ``<path>/vars``
    groups) rather than the legacy one (``layer_names`` attribute)."""
    from ..files import hdf5 as h5safe

    path = Path(path)
    if zipfile.is_zipfile(path):
        return True
    if not h5safe.is_hdf5(path):
        return False
    with h5safe.open_hdf5(path, "a weights file") as f:
        return h5safe.read_attr(f, "layer_names") is None and ("layers" in f or "vars" in f)


def read_weights(path, names: list) -> list:
    """The arrays stored at ``names`` (``layers/lstm/cell/vars/0``, ...) in a Keras 3 weights file: a
    ``.keras`` archive's ``model.weights.h5`` (the zip checked first by
    :func:`gruconv.files.zips.read_keras_zip`: bounded directory, Keras's own member names) or a plain
    ``.weights.h5``, every dataset through :mod:`gruconv.files.hdf5`'s guards.  For ``verify`` of an
    output whose custom layers Keras cannot rebuild: its recurrent weights, read as written."""
    from ..files.zips import read_keras_zip
    from ..files import hdf5 as h5safe

    h5py = _h5()
    path = Path(path)
    if zipfile.is_zipfile(path):
        read_keras_zip(path)
        try:
            with zipfile.ZipFile(path) as zf, zf.open(WEIGHTS_NAME) as fh, h5py.File(fh, "r") as f:
                return [h5safe.read_dataset(h5safe.resolve(f, n, path, "dataset"), path) for n in names]
        except (KeyError, OSError, ValueError, zipfile.BadZipFile) as e:
            raise InputError(f"cannot read the converted weights ({str(e).splitlines()[0][:200]})",
                             path=path) from None
    with h5safe.open_hdf5(path, "a Keras 3 weights file") as f:
        return [h5safe.read_dataset(h5safe.resolve(f, n, path, "dataset"), path) for n in names]


# --------------------------------------------------------------------------- --check-load

OPTIMIZER_GROUP = "optimizer/vars"


def check_load(path, manifest: list, *, config: Optional[dict] = None, custom_objects: Optional[dict] = None) -> None:
    """``convert --check-load``: what a user of the file will do, done once.  A ``.keras`` archive is
    opened with plain ``keras.saving.load_model(path)`` (default arguments: compiled, safe mode); a
    ``.weights.h5`` file (``config`` given: the generated Keras 3 model config) is loaded with
    ``model.load_weights`` into the model that config builds.  The loaded model's weights are then
    written by Keras's own ``save_weights`` (the same object paths as ``model.weights.h5``:
    ``keras/src/saving/saving_lib.py`` ``_save_state``) and every dataset compared by shape, dtype and
    SHA-256 with the manifest recorded while streaming; a compiled model's optimizer variables are
    compared in order with the manifest's ``optimizer/vars``.  Raises :class:`UnsupportedError`
    (one line) at the first difference: the caller writes nothing then.

    In a batch, a ``.keras`` file whose ``config.json`` bytes equal those of a file this process loaded
    before gets that model with this file's weights loaded by ``Model.load_weights``
    (:func:`gruconv.keras3.runtime.load_like_before`: the same build skipped; every variable is compared
    below either way), which took two thirds of a small model's plain ``load_model``.

    ``custom_objects``: the user's classes for the custom layers the file carries, passed to
    ``load_model`` / ``model_from_json`` as a user would pass them (safe mode stays on)."""
    import warnings

    import h5py

    from . import runtime as keras3

    k = keras3.keras()
    path = Path(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if config is None:
                # a file of a config this process loaded before: that model, this file's weights (the same
                # load, its build skipped; the comparison below checks every variable either way)
                loaded = None if custom_objects else keras3.load_like_before(path)
                if loaded is None:
                    loaded = k.saving.load_model(str(path), custom_objects=custom_objects or None)
                    if not custom_objects:
                        keras3.remember(path, loaded)
            else:
                loaded = k.models.model_from_json(json.dumps(config), custom_objects=custom_objects or None)
                loaded.load_weights(str(path))
    except Exception as e:  # noqa: BLE001 - the file is not what we promise: refuse it
        from ..errors import first_line

        how = "keras.saving.load_model" if config is None else "Model.load_weights"
        raise UnsupportedError(f"the converted model does not load with {how} ({first_line(e, 200)}); "
                               "nothing written") from None
    opt_part = sorted((m for m in manifest if m[0].startswith(OPTIMIZER_GROUP + "/")),
                      key=lambda m: int(m[0].rsplit("/", 1)[1]))
    with scratch_dir(prefix="gruconv-check-") as td:
        saved = Path(td) / "loaded.weights.h5"
        loaded.save_weights(str(saved))
        with h5py.File(saved, "r") as f:
            seen = []
            f.visititems(lambda n, o: seen.append(n) if isinstance(o, h5py.Dataset) else None)
            # Keras's save_weights writes a compiled model's optimizer too (when it is built)
            if opt_part and not any(n.startswith(OPTIMIZER_GROUP + "/") for n in seen):
                expected = [m for m in manifest if m not in opt_part]
            else:
                expected, opt_part = list(manifest), []
            if sorted(seen) != sorted(m[0] for m in expected):
                diff = sorted(set(seen) ^ {m[0] for m in expected})
                raise UnsupportedError(f"the converted model loads with a different set of weights (first "
                                       f"difference: {diff[0]}); nothing written")
            for ds_path, shape, dtype, digest in expected:
                a = f[ds_path][()]
                if tuple(a.shape) != tuple(shape) or str(a.dtype) != dtype or _digest(a) != digest:
                    raise UnsupportedError(f"weight {ds_path} does not load back unchanged from the converted "
                                           "model; nothing written")
                del a
    if opt_part:  # an optimizer save_weights left out: compare its variables in order
        opt = getattr(loaded, "optimizer", None)
        got = list(opt.variables) if opt is not None else []
        if len(got) != len(opt_part):
            raise UnsupportedError(f"the converted model's optimizer loads with {len(got)} variables, the file "
                                   f"holds {len(opt_part)}; nothing written")
        for v, (ds_path, shape, dtype, digest) in zip(got, opt_part):
            a = keras3.to_numpy(v)
            if tuple(a.shape) != tuple(shape) or str(a.dtype) != dtype or _digest(a) != digest:
                raise UnsupportedError(f"optimizer variable {ds_path} does not load back unchanged; nothing written")
    if config is None and not custom_objects:  # the plain load_model a following verify would repeat
        keras3.hand_over(path, loaded)
    del loaded
