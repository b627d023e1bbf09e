"""The record of successful conversions in ``--out-dir`` (``--skip-existing`` trusts nothing else): output fingerprints (size, mtime, SHA-256) and input mtimes."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

from ..errors import GruconvError
from .records import write_atomic
from .discovery import Input


#: The record of successful conversions kept in ``--out-dir`` (for ``--skip-existing``).
STATE_FILE = ".gruconv.batch.json"


# ----- the record of successful conversions (``--skip-existing`` trusts nothing else)

def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fingerprint(out: Path, out_dir: Path) -> dict:
    files = {}
    for f in output_files(out):
        st = f.lstat()
        files[Path(os.path.relpath(f, out_dir)).as_posix()] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                                               "sha256": _sha256(f)}
    return files


class State:
    """``DIR/.gruconv.batch.json``: per output (relative to DIR), the input it came from, the input's
    mtime and each output file's size, mtime and SHA-256 — written only for a conversion that
    succeeded, dropped for one that failed. An output is skipped only if all of that still holds."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.path = out_dir / STATE_FILE
        self.entries = self._load()
        self.changes: dict = {}

    def _load(self) -> dict:
        from ..files import inputs

        try:
            doc = inputs.load_json(self.path, "a gruconv batch record")
        except GruconvError:
            return {}
        out = doc.get("outputs") if isinstance(doc, dict) else None
        return out if isinstance(out, dict) else {}

    def key(self, out: Path) -> str:
        return Path(os.path.relpath(out, self.out_dir)).as_posix()

    def up_to_date(self, item: Input, outs: list) -> bool:
        e = self.entries.get(self.key(outs[0]))
        if not isinstance(e, dict) or e.get("input") != item.key or not e.get("files"):
            return False
        try:
            if input_mtime(item) != e.get("input_mtime_ns"):
                return False
            want = e["files"]
            have = {Path(os.path.relpath(f, self.out_dir)).as_posix(): f for f in output_files(outs)}
            if set(have) != set(want):
                return False
            for rel, f in have.items():
                st, w = f.lstat(), want[rel]
                if (st.st_size, st.st_mtime_ns) != (w.get("size"), w.get("mtime_ns")) or _sha256(f) != w.get("sha256"):
                    return False
        except (OSError, KeyError, TypeError, ValueError, AttributeError):
            return False
        return True

    def succeeded(self, item: Input, outs: list, input_mtime: Optional[int]) -> None:
        try:
            self.changes[self.key(outs[0])] = {"input": item.key, "input_mtime_ns": input_mtime,
                                               "files": _fingerprint(outs, self.out_dir)}
        except OSError:
            self.changes[self.key(outs[0])] = None

    def failed(self, out: Path) -> None:
        self.changes[self.key(out)] = None

    def save(self) -> None:
        if not self.changes:
            return
        entries = self._load()      # merge: another shard may have written meanwhile
        for k, v in self.changes.items():
            if v is None:
                entries.pop(k, None)
            else:
                entries[k] = v
        doc = {"gruconv_batch_record": 1, "outputs": dict(sorted(entries.items()))}
        try:
            write_atomic(self.path, (json.dumps(doc, indent=1) + "\n").encode("utf-8"))
        except (GruconvError, OSError):
            pass  # without a record the next --skip-existing converts again: safe


# ----- the files of inputs and outputs, as their readers list them

def format_module(fmt: str):
    from .. import readers as formats

    return formats.module(fmt)


def input_files(item: Input) -> list:
    """Every file converting ``item`` reads, as its format module lists them (``input_files``)."""
    if not item.format:
        return [item.path]
    try:
        return [item.path] + [Path(f) for f in format_module(item.format).input_files(item.path)]
    except (GruconvError, OSError):
        return [item.path]


def input_mtime(item: Input) -> int:
    return max(f.stat().st_mtime_ns for f in input_files(item) if f.exists())


def output_mtime(out: Path) -> Optional[int]:
    """The output's age: a file's mtime, or a directory output's oldest file; None if absent."""
    try:
        if out.is_file():
            return out.stat().st_mtime_ns
        if out.is_dir():
            times = [f.stat().st_mtime_ns for f in out.rglob("*") if f.is_file()]
            return min(times) if times else None
    except OSError:
        return None
    return None


def output_files(out) -> list:
    """The files of an output (or a list of them): a file itself, or every file below a directory
    output (no symlinks followed)."""
    if isinstance(out, (list, tuple)):
        return [f for o in out for f in output_files(o)]
    if out.is_symlink() or out.is_file():
        return [out]
    if out.is_dir():
        return sorted(p for p in out.rglob("*") if p.is_file() and not p.is_symlink())
    return []
