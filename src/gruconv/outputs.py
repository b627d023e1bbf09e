"""Atomic outputs: a temporary file beside the target, renamed into place on success.

A crash, a kill or an error leaves either the previous file untouched or no
file at all at the output path — never a partial one.  Two conversions
racing for the same path each rename a complete file, so the survivor is
complete too.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from .errors import OutputError


def check_target(out: Path, *, force: bool) -> None:
    """Refuse an output path that cannot or must not be written, before any work is done."""
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise OutputError(f"output directory {str(parent)!r} does not exist", path=out)
    if out.is_dir():
        raise OutputError("output path is a directory", path=out)
    if out.exists() and not force:
        raise OutputError("output exists; pass --force to overwrite it", path=out)
    if not os.access(parent, os.W_OK):
        raise OutputError(f"output directory {str(parent)!r} is not writable", path=out)


@contextlib.contextmanager
def atomic_path(out: Path, *, force: bool, suffix: str = ""):
    """Yield a temporary path in ``out``'s directory; rename it to ``out`` if the block succeeds."""
    out = Path(out)
    check_target(out, force=force)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=f".tmp{suffix}", dir=out.parent or ".")
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        if out.exists() and not force:  # lost a race with another writer that did not force
            raise OutputError("output appeared while converting; pass --force to overwrite it", path=out)
        os.replace(tmp, out)
    except OSError as e:
        raise OutputError(f"cannot write output ({e.strerror or e})", path=out) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
