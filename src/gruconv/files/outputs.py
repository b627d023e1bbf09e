"""Atomic outputs: a temporary file beside the target, renamed into place on success.

A crash, a kill or an error leaves either the previous file untouched or no
file at all at the output path — never a partial one.  Two conversions
racing for the same path each rename a complete file, so the survivor is
complete too.

Temporary files are named ``.NAME.PID-XXXXXXXX.tmpSUFFIX`` beside ``NAME``.
An error removes its own; a process killed with SIGKILL cannot, so the next
:func:`atomic_path` for the same target removes those whose writing process
no longer exists (and that are older than :data:`STALE_AFTER_S`, so a
writer on another host sharing the directory is left alone while it works).

The finished file gets the permissions a plain ``open(..., "w")`` would give
(``0666 & ~umask``), or keeps those of the file it replaces — not
``mkstemp``'s private ``0600``.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Optional

from ..errors import OutputError

#: A temporary file of a dead process is removed once it is at least this old (seconds).
STALE_AFTER_S = 60.0


def write_failure(e: BaseException) -> str:
    """Why a write failed, in a few words: the OS's text for its errno (libhdf5 buries it in a
    multi-line message: "Unable to extend file properly, errno = 27, error message = 'file too
    large' ... time = ...")."""
    errno_ = getattr(e, "errno", None)
    if not errno_:
        m = re.search(r"errno = (\d+)", str(e))
        errno_ = int(m.group(1)) if m else None
    if errno_:
        try:
            return os.strerror(errno_)
        except ValueError:
            pass
    from ..errors import first_line

    return first_line(e)[:200]


def check_target(out: Path, *, force: bool) -> None:
    """Refuse an output path that cannot or must not be written, before any work is done."""
    from .inputs import display

    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        why = "is not a directory" if os.path.lexists(parent) else "does not exist"
        raise OutputError(f"output directory '{display(parent)}' {why}", path=out)
    if out.is_dir():
        raise OutputError("output path is a directory", path=out)
    if os.path.islink(out) and not out.exists() and not force:
        try:
            to = os.readlink(out)
        except OSError:
            to = "?"
        raise OutputError(f"output is a dangling symbolic link (to '{display(to)}'); remove it, or pass --force "
                          "to replace the link itself", path=out)
    if out.exists() and not out.is_file():
        from .inputs import file_kind

        raise OutputError(f"output exists and is {file_kind(os.stat(out))}, not a regular file; gruconv "
                          "replaces only regular files, even with --force", path=out)
    if out.exists() and not force:
        raise OutputError("output exists; pass --force to overwrite it", path=out)
    if not os.access(parent, os.W_OK):
        raise OutputError(f"output directory '{display(parent)}' is not writable", path=out)


def check_creatable(out: Path, *, what: str = "output") -> None:
    """Refuse, before any work, a file that will be written at the end of the run with its missing
    directories made then (a batch ``--report`` / ``--junit``): the nearest existing ancestor must be
    a writable directory, and ``out`` must not be a directory or anything but a regular file.  So a
    run never converts everything and then fails on its report (``--report afile/r.json`` under a
    regular file ``afile`` was a traceback after the conversions).  Paths the OS refuses
    outright (a name too long, a symlink loop) are the same one-line :class:`OutputError`."""
    from .inputs import display

    out = Path(out)
    label = f"{what}: " if what != "output" else ""
    try:
        parent = out.parent if str(out.parent) else Path(".")
        while not os.path.lexists(parent) and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise OutputError(f"{label}'{display(parent)}' is not a directory", path=out)
        if out.is_dir():
            raise OutputError(f"{label}output path is a directory", path=out)
        if os.path.lexists(out) and out.exists() and not out.is_file():
            from .inputs import file_kind

            raise OutputError(f"{label}output exists and is {file_kind(os.stat(out))}, not a regular file", path=out)
        if not os.access(parent, os.W_OK):
            raise OutputError(f"{label}directory '{display(parent)}' is not writable", path=out)
    except OSError as e:
        raise OutputError(f"{label}cannot use this path ({e.strerror or e})", path=out) from None


def _umask() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # not thread-safe, only used where /proc is missing
    os.umask(mask)
    return mask


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # not ours to judge
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def temp_pattern(out: Path) -> "re.Pattern[str]":
    """The names :func:`atomic_path` gives its temporary files for ``out`` (group 1: the pid)."""
    return re.compile(rf"^\.{re.escape(Path(out).name)}\.(\d+)-[A-Za-z0-9_]+\.tmp.*$")


def remove_stale_temps(out: Path, *, older_than: float = STALE_AFTER_S) -> list:
    """Remove temporary files left beside ``out`` by writers that were killed; return their paths."""
    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    pat = temp_pattern(out)
    removed = []
    now = time.time()
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        m = pat.match(name)
        if not m or int(m.group(1)) == os.getpid() or _pid_alive(int(m.group(1))):
            continue
        p = parent / name
        try:
            if now - p.lstat().st_mtime < older_than or not p.is_file():
                continue
            p.unlink()
            removed.append(p)
        except OSError:
            continue
    return removed


def staging_pattern() -> "re.Pattern[str]":
    """Names of :func:`staging_dir` directories (group 1: the pid)."""
    return re.compile(r"^\.gruconv-(\d+)-[A-Za-z0-9_]+$")


def remove_stale_staging(directory: Path, *, older_than: float = STALE_AFTER_S) -> list:
    """Remove :func:`staging_dir` directories in ``directory`` left by processes that no longer exist
    (and at least ``older_than`` seconds old); return their paths."""
    import shutil

    pat, now, removed = staging_pattern(), time.time(), []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        m = pat.match(name)
        if not m or int(m.group(1)) == os.getpid() or _pid_alive(int(m.group(1))):
            continue
        p = Path(directory) / name
        try:
            if p.is_dir() and not p.is_symlink() and now - p.lstat().st_mtime >= older_than:
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
        except OSError:
            continue
    return removed


@contextlib.contextmanager
def staging_dir(directory: Path):
    """A private temporary directory inside ``directory`` (``.gruconv-PID-XXXX``), removed on exit.

    For work files that must live on the output's filesystem.  A SIGKILLed process cannot remove
    its own; the next :func:`staging_dir` in the same directory removes those of dead processes
    (older than :data:`STALE_AFTER_S`), as :func:`remove_stale_temps` does for temporary files.
    """
    directory = Path(directory) if str(directory) else Path(".")
    remove_stale_staging(directory)
    with scratch_dir(directory, prefix=f".gruconv-{os.getpid()}-") as name:
        yield name


@contextlib.contextmanager
def scratch_file(directory: Path, *, prefix: str, suffix: str = ""):
    """A new empty file in ``directory`` (``mkstemp``: ``PREFIX XXXXXXXX SUFFIX``, mode 0600),
    removed when the block ends unless it was renamed away meanwhile.

    The one way this package makes a temporary file: it is created with SIGTERM/SIGINT held
    (:func:`gruconv.signals.held`), so no signal lands between its creation and the ``finally``
    that removes it.  ``OSError`` from creating it propagates (each caller words its own error)."""
    from ..signals import held

    path = None
    try:
        with held():
            fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
            os.close(fd)
        yield Path(path)
    finally:
        if path is not None:
            with contextlib.suppress(OSError):  # FileNotFoundError: renamed into place
                os.unlink(path)


@contextlib.contextmanager
def scratch_dir(directory: Optional[Path] = None, *, prefix: str):
    """A new private directory in ``directory`` (``None``: ``$TMPDIR``), removed with its contents
    when the block ends; created with the signals held, as :func:`scratch_file` is.  ``OSError``
    from creating it is an :class:`OutputError` naming ``directory``."""
    import shutil

    from ..signals import held

    path = None
    try:
        try:
            with held():
                path = tempfile.mkdtemp(prefix=prefix, dir=directory)
        except OSError as e:
            raise OutputError(f"cannot create a working directory ({e.strerror or e})",
                              path=directory or Path(tempfile.gettempdir())) from None
        yield Path(path)
    finally:
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


#: Set (a set of directories) while a batch runs in this process (:func:`defer_sync`): the fsyncs
#: after each output are postponed to :func:`sync_deferred` at the end of the run.
_deferred_dirs = None


def defer_sync(on: bool = True):
    """Batch mode (:mod:`gruconv.batch`): :func:`atomic_path` renames each finished file into place
    without fsyncing it or its directory; the batch makes the whole run durable at once at its end
    (:func:`sync_deferred`: one ``syncfs`` per file system written to), *before* it writes its record
    of successful conversions (which ``--skip-existing`` trusts, with each output's SHA-256) and its
    reports.

    What this keeps: a killed or crashed process still leaves each output complete or absent (the
    rename is atomic and the page cache outlives the process: the SIGKILL tests in
    ``tests/files/test_safety_round3.py``).  What it gives up: after a *power loss* during the run, an output
    renamed since the last sync may be empty or partial; the run's record was not written then, so it
    lists none of them, and the rerun (``--skip-existing`` included) converts them again.  Why: the
    data fsyncs (one per output file; a TF1 checkpoint writes two) cost ~6 ms a model in
    ``bench/run.py``'s batch of 100 (22 vs 28 ms in-process, fsync disabled vs on, loaded 2-core machine;
    docs/streaming.md, "Speed"), the largest single item; one ``syncfs`` at the end costs about one fsync.  Returns the previous setting (``None`` or a set), for
    :func:`restore_sync`; the directories written to are in :func:`deferred_dirs`."""
    global _deferred_dirs
    previous = _deferred_dirs
    _deferred_dirs = set() if on else None
    return previous


def restore_sync(previous) -> None:
    global _deferred_dirs
    _deferred_dirs = previous


def deferred_dirs() -> list:
    """Directories :func:`atomic_path` wrote to without syncing since :func:`defer_sync`."""
    return sorted(_deferred_dirs or ())


def _syncfs(fd: int) -> bool:
    """``syncfs(2)`` (Linux): write back every file system buffer of ``fd``'s file system; False
    where the call is missing or fails (the caller falls back to ``sync(2)``)."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syncfs(ctypes.c_int(fd)) == 0
    except (OSError, AttributeError, TypeError):
        return False


def sync_deferred(directories) -> None:
    """Make everything written to ``directories`` durable: one ``syncfs`` per file system among
    them (which covers every file, directory entry and rename on it, workers' writes included: they
    are the kernel's, not the process's), ``os.sync`` if that is not available; best effort, as the
    fsyncs outside batch mode are."""
    seen, fallback = set(), False
    for d in sorted({os.fspath(d) for d in directories}):
        try:
            fd = os.open(d, os.O_RDONLY)
        except OSError:
            continue
        try:
            dev = os.fstat(fd).st_dev
            if dev not in seen:
                seen.add(dev)
                fallback = fallback or not _syncfs(fd)
        except OSError:
            fallback = True
        finally:
            os.close(fd)
    if fallback:
        with contextlib.suppress(AttributeError, OSError):
            os.sync()


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def place_new(tmp: Path, out: Path) -> None:
    """Move ``tmp`` to ``out`` only if ``out`` does not exist, atomically where the filesystem
    has hard links (``link`` fails if the name exists), so a racing writer is never clobbered."""
    appeared = OutputError("output appeared while converting; pass --force to overwrite it", path=out)
    try:
        os.link(tmp, out)
    except FileExistsError:
        raise appeared from None
    except OSError:  # no hard links here (some network/FUSE filesystems): check, then rename
        if os.path.lexists(out):
            raise appeared from None
        os.replace(tmp, out)
        return
    tmp.unlink()


@contextlib.contextmanager
def atomic_path(out: Path, *, force: bool, suffix: str = ""):
    """Yield a temporary path in ``out``'s directory; rename it to ``out`` if the block succeeds."""
    out = Path(out)
    check_target(out, force=force)
    parent = out.parent if str(out.parent) else Path(".")
    remove_stale_temps(out)
    with contextlib.ExitStack() as stack:
        try:
            tmp = stack.enter_context(scratch_file(parent, prefix=f".{out.name}.{os.getpid()}-",
                                                   suffix=f".tmp{suffix}"))
        except OSError as e:
            raise OutputError(f"cannot write output ({e.strerror or e})", path=out) from None
        try:
            try:
                yield tmp
            except OutputError as e:  # a writer's error about the temporary file is about the output
                if e.path is not None and os.fspath(e.path) == os.fspath(tmp):
                    raise OutputError(e.message, path=out) from None
                raise
            if _deferred_dirs is None:
                with open(tmp, "rb+") as f:
                    os.fsync(f.fileno())
            try:
                mode = os.stat(out).st_mode & 0o7777
            except OSError:
                mode = 0o666 & ~_umask()
            os.chmod(tmp, mode)
            if force:
                os.replace(tmp, out)
            else:
                place_new(tmp, out)
            if _deferred_dirs is None:
                _fsync_dir(parent)
            else:
                _deferred_dirs.add(os.path.abspath(parent))
        except OSError as e:
            raise OutputError(f"cannot write output ({write_failure(e)})", path=out) from None


# --------------------------------------------------------------------------- outputs vs inputs

def _identity(path: Path) -> tuple:
    """(resolved path, (st_dev, st_ino) or None): the two ways two spellings can be one file."""
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        real = os.path.abspath(path)
    try:
        st = os.stat(path)
        ident = (st.st_dev, st.st_ino)
    except (OSError, ValueError):
        ident = None
    return real, ident


def check_outputs(outputs, inputs) -> None:
    """Refuse, before any work, an output that is one of the inputs — whatever the spelling.

    ``outputs``: every file the command will write (e.g. ``OUT`` and ``OUT.rest.npz``; for a
    directory output, the files it will hold).  ``inputs``: every path it will read
    (every file of the model as its format's ``input_files`` lists them, and any
    ``--config`` / ``--inputs`` file).  Compared by resolved path (symlinks, ``..``) and by
    ``(st_dev, st_ino)`` (hard links).  Refused even with ``--force``: overwriting the file
    being converted destroys the only copy.  Raises :class:`OutputError` (one line).
    """
    from .inputs import display

    reals: dict = {}
    idents: dict = {}
    for f in inputs:
        real, ident = _identity(Path(os.fspath(f)))
        reals.setdefault(real, f)
        if ident is not None:
            idents.setdefault(ident, f)
    for out in outputs:
        out = Path(os.fspath(out))
        real, ident = _identity(out)
        hit = reals.get(real)
        how = "same path"
        if hit is None and ident is not None:
            hit, how = idents.get(ident), "same file: a hard or symbolic link"
        if hit is not None:
            raise OutputError(f"output is the input '{display(hit)}' ({how}); refusing to overwrite an input, "
                              "even with --force: name another output", path=out)


# --------------------------------------------------------------------------- HDF5 outputs

def hdf5_file(path):
    """A new HDF5 file at ``path``, written through a Python file object (h5py's ``fileobj`` driver).

    Why not ``h5py.File(path, "w")``: when libhdf5's own ``sec2`` driver hits a full disk or a
    file-size limit (``write()`` returns ENOSPC/EFBIG), the failure surfaces first in h5py's
    object deallocation ("Exception ignored in ... __dealloc__", printed on stderr) and closing the
    file afterwards segfaults (measured here with HDF5 1.14 / h5py under ``RLIMIT_FSIZE`` and
    SIGXFSZ ignored).  Through a Python file object the same failure is a Python
    ``OSError`` raised where the write happens, and the file closes cleanly.  The file object is
    closed with the HDF5 file.  Raises :class:`OutputError` when the file cannot be created.
    """
    import h5py

    class _Output(h5py.File):
        def close(self):
            try:
                super().close()
            finally:
                self._raw.close()

    try:
        raw = open(path, "w+b")
    except OSError as e:
        raise OutputError(f"cannot create output ({e.strerror or e})", path=path) from None
    try:
        f = _Output(raw, "w")
    except BaseException as e:
        raw.close()
        if isinstance(e, (OSError, RuntimeError, ValueError)):
            raise OutputError(f"cannot create output ({e})", path=path) from None
        raise
    f._raw = raw
    return f


# --------------------------------------------------------------------------- one conversion's outputs

#: Files whose presence makes an existing directory one ``--force`` may replace (a SavedModel's graph
#: file, ``tensorflow/python/saved_model/constants.py``); any other non-empty directory is refused.
from ..model.saved_model import SAVED_MODEL_FILES as REPLACEABLE_TREES  # noqa: E402


def check_tree_target(out: Path, *, force: bool) -> None:
    """Refuse a directory output that cannot or must not be written, before any work: its parent must be
    a writable directory; an existing one is replaced only with ``--force`` and only when it is empty
    or a SavedModel (never an arbitrary directory of the user's)."""
    from .inputs import display

    out = Path(out)
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        why = "is not a directory" if os.path.lexists(parent) else "does not exist"
        raise OutputError(f"output directory '{display(parent)}' {why}", path=out)
    if os.path.islink(out) or (os.path.lexists(out) and not out.is_dir()):
        raise OutputError("output exists and is not a directory (a SavedModel is one)", path=out)
    if out.is_dir():
        if not force:
            raise OutputError("output exists; pass --force to replace it", path=out)
        entries = os.listdir(out)
        if entries and not any(name in entries for name in REPLACEABLE_TREES):
            raise OutputError("output is a directory that is not a SavedModel; gruconv replaces only an empty "
                              "directory or a SavedModel, even with --force", path=out)
    if not os.access(parent, os.W_OK):
        raise OutputError(f"output directory '{display(parent)}' is not writable", path=out)


class Outputs:
    """One conversion's output transaction: the one place a conversion's files are placed.

    ``api.convert`` opens one per conversion (:meth:`writing`); writers are handed temporary paths
    (:meth:`file`: :func:`atomic_path`, a temporary beside each target renamed into place when it is
    complete), a directory output is made by :meth:`directory`, and the conversion is all or nothing:
    if anything fails, every file this transaction placed is removed again and a directory it made is
    removed (:meth:`abort`).  With ``--verify`` the whole conversion is first written into a private
    staging directory beside the output (:meth:`staged`) and :meth:`promote` moves what passed into
    place.  Replaces the placement code that was spread over ``api._promote`` and the readers."""

    def __init__(self, *, force: bool):
        self.force = force
        self.placed: list = []
        self.placed_trees: list = []
        self.created: Optional[Path] = None

    # -- writing

    def directory(self, path: Path) -> None:
        """Make ``path`` (a directory output) if it does not exist; :meth:`abort` removes it again."""
        path = Path(path)
        if path.exists():
            return
        try:
            path.mkdir()
        except OSError as err:
            raise OutputError(f"cannot create output directory ({err.strerror or err})", path=path) from None
        self.created = path

    @contextlib.contextmanager
    def file(self, target: Path, *, suffix: str = "", force: Optional[bool] = None):
        """A temporary path beside ``target``, renamed to ``target`` when the block succeeds
        (:func:`atomic_path`); the file is this transaction's from then on."""
        with atomic_path(Path(target), force=self.force if force is None else force, suffix=suffix) as tmp:
            yield tmp
        self.placed.append(Path(target))

    @contextlib.contextmanager
    def tree(self, target: Path, *, force: Optional[bool] = None):
        """A new private directory beside ``target``, renamed to ``target`` when the block succeeds (an
        existing one, which :func:`check_tree_target` allows only with ``--force``, is moved aside first
        and removed after); the directory is this transaction's from then on."""
        target = Path(target)
        force = self.force if force is None else force
        check_tree_target(target, force=force)
        parent = target.parent if str(target.parent) else Path(".")
        with scratch_dir(parent, prefix=f".{target.name}.{os.getpid()}-") as tmp:
            yield tmp
            try:
                if os.path.lexists(target):
                    with scratch_dir(parent, prefix=f".{target.name}.old-") as aside:
                        os.rename(target, aside / "old")
                        os.rename(tmp, target)
                else:
                    os.mkdir(target)  # fails if it appeared meanwhile: never merged into
                    os.rmdir(target)
                    os.rename(tmp, target)
            except FileExistsError:
                raise OutputError("output appeared while converting; pass --force to replace it", path=target) from None
            except OSError as e:
                raise OutputError(f"cannot write output ({write_failure(e)})", path=target) from None
            _fsync_dir(parent)
        self.placed_trees.append(target)

    def abort(self) -> None:
        """Remove every file placed so far and a directory this transaction made (all or nothing)."""
        import shutil

        for f in self.placed:
            with contextlib.suppress(OSError):
                Path(f).unlink()
        for d in self.placed_trees:
            shutil.rmtree(d, ignore_errors=True)
        self.placed_trees = []
        self.placed = []
        if self.created is not None:
            with contextlib.suppress(OSError):
                self.created.rmdir()
            self.created = None

    @contextlib.contextmanager
    def writing(self):
        """The transaction: on any exception, :meth:`abort` and re-raise."""
        try:
            yield self
        except BaseException:
            self.abort()
            raise

    # -- staging (``convert --verify``)

    @staticmethod
    def staged(output: Path):
        """A private staging directory beside ``output`` (:func:`staging_dir`): the conversion writes
        there, is verified there, and :meth:`promote` places what passed."""
        output = Path(output)
        return staging_dir(output.parent if str(output.parent) else Path("."))

    def promote(self, staged: Path, output: Path, produced: list) -> list:
        """Move the staged outputs ``produced`` (``staged`` itself, files under it when it is a
        directory, or siblings named after it such as ``staged.rest.npz``) to where the user asked
        for them; returns the final paths."""
        moved = []
        staged, output = Path(staged), Path(output)
        for p in produced:
            p = Path(p)
            rel = p.relative_to(staged) if p != staged and staged in p.parents else None
            if p == staged:
                target = output
            elif rel is not None:
                target = output / rel
            elif p.name.startswith(staged.name):  # a sibling of the staged output (OUT.rest.npz)
                target = output.parent / (output.name + p.name[len(staged.name):])
            else:  # a file beside it with its stem (OUT.bin beside OUT.xml)
                target = output.parent / (output.stem + p.name[len(staged.stem):])
            try:
                if rel is not None:
                    os.makedirs(target.parent, exist_ok=True)
                check_target(target, force=self.force)
                if self.force:
                    os.replace(p, target)
                else:
                    place_new(p, target)
            except OSError as e:
                raise OutputError(f"cannot write output ({e.strerror or e})", path=target) from None
            moved.append(str(target))
        return moved
