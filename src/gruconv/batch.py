"""Batch conversion for CI: many inputs into one output directory, in parallel, with reports.

:func:`convert_many` is what ``gruconv convert INPUT... --out-dir DIR`` runs:

1. **Discover** inputs: files, directories (searched recursively; every file's format is detected
   from its content with :func:`gruconv.formats.detect`; a TF1 checkpoint directory or prefix is
   one input and is not descended into) and glob patterns (``**`` allowed), expanded by
   :meth:`_Discovery.walk`, not :mod:`glob`: no symlink leads out of the argument's directory
   (a symlinked directory outside is a failed input, "not followed"), loops are cut, the walk is
   bounded (:data:`MAX_WALK_ENTRIES`, :data:`MAX_WALK_DEPTH`), FIFOs and devices are never
   opened. Files in a directory that are not models are ignored; an explicitly named path that
   is not a model is a failure. Inputs are deduplicated by their real path and sorted.
2. **Shard** (``K/N``): input ``i`` of the sorted list belongs to shard ``i % N + 1``.
3. **Plan** each input's output: its path relative to the argument it was found under, mirrored
   under ``DIR`` with the name the input's format gives it (:func:`output_name`). Outputs are
   resolved and must stay inside ``DIR``; inputs (of any shard) that would share one output all
   fail (none of them is converted). No output, and no ``--report``/``--junit`` file, may be an
   input (a model's files or the ``--config`` file; any spelling, symlink or hard link) — that
   refuses the whole run before any work. Nothing is written before these checks: ``DIR`` is
   created only once something is to be converted (a path component too long for the file
   system is a one-line refusal, or a failed input).
   A named checkpoint directory whose prefix cannot be resolved and that holds no other model is
   a failed input. ``--skip-existing`` skips an input only if
   ``DIR/.gruconv.batch.json`` records a successful conversion of it whose output files are
   unchanged (size, mtime, SHA-256) and whose input has not changed since; anything else is
   converted again (``--force`` implied for it).
4. **Convert** with :func:`gruconv.api.convert`, in-process for ``jobs=1``, else in a pool of
   spawned worker processes (each imports Keras once and is reused). A :class:`GruconvError`
   fails one input; any other exception is a bug, recorded as ``internal error`` with its
   traceback in the JSON report. A failed input leaves no output (what it created or replaced is
   removed, with the directories made for it). Without ``keep_going`` the first failure stops
   the run (pending work is cancelled); the reports still cover what ran.
5. **Report**: one line per input through ``print_fn`` (stderr by default; a progress line on a
   terminal; names with control characters escaped), a summary table (stdout), and optionally a
   JSON report and a JUnit XML file (both written atomically).

Exit code (:attr:`Summary.exit_code`): ``InputError.exit_code`` (3) if any input failed, else
``ParityError.exit_code`` (1) if any failed verification, else 0 (converted, skipped, nothing to
convert, or no inputs at all).

This module prints nothing itself and imports no Click; format knowledge is asked of the format
modules (``output_name``, ``input_files``), with the old rules as a marked fallback.
No TensorFlow/Keras is imported in the calling process unless ``jobs=1``.
"""

from __future__ import annotations

import concurrent.futures as cf
import datetime as _dt
import json
import os
import re
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from . import __version__
from .errors import GruconvError, InputError, OutputError, ParityError, UsageError

STATUSES = ("ok", "nothing-to-convert", "skipped", "parity-failed", "failed")
_GLOB_MAGIC = re.compile(r"[*?[]")
#: Discovery bounds: entries looked at per root argument, and directory depth below it.
MAX_WALK_ENTRIES = 1_000_000
MAX_WALK_DEPTH = 128
#: The record of successful conversions kept in ``--out-dir`` (for ``--skip-existing``).
STATE_FILE = ".gruconv.batch.json"


# --------------------------------------------------------------------------- records

@dataclass
class Record:
    """What happened to one input (one line of the console, one JSON entry, one JUnit testcase)."""

    input: str
    status: str = "failed"
    format: Optional[str] = None
    output: Optional[str] = None          # the planned output path (file or directory)
    outputs: list = field(default_factory=list)
    stacks: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    verification: Optional[dict] = None
    error: Optional[str] = None
    error_type: Optional[str] = None
    exit_code: int = 0
    seconds: float = 0.0
    traceback: Optional[str] = None

    def to_json(self) -> dict:
        out = {
            "input": self.input, "format": self.format, "status": self.status, "output": self.output,
            "outputs": self.outputs, "stacks": self.stacks, "warnings": self.warnings,
            "verification": self.verification, "error": self.error, "exit_code": self.exit_code,
            "seconds": round(self.seconds, 4),
        }
        if self.traceback is not None:
            out["traceback"] = self.traceback
        return out


@dataclass
class Summary:
    """The outcome of :func:`convert_many`: per-input records (sorted by input) and the exit code."""

    records: list
    not_run: list = field(default_factory=list)   # inputs never started (the run stopped first)
    started: str = ""
    duration_s: float = 0.0
    jobs: int = 1
    shard: Optional[str] = None
    out_dir: str = ""

    @property
    def counts(self) -> dict:
        c = {s: 0 for s in STATUSES}
        for r in self.records:
            c[r.status] += 1
        return c

    @property
    def exit_code(self) -> int:
        """``InputError.exit_code`` if any input failed (whatever its own error was: the README's
        "3 an input failed"), else ``ParityError.exit_code`` for a parity failure, else 0."""
        if any(r.status == "failed" for r in self.records):
            return InputError.exit_code
        if any(r.status == "parity-failed" for r in self.records):
            return ParityError.exit_code
        return 0

    @property
    def converted(self) -> int:
        return sum(1 for r in self.records if r.status in ("ok", "parity-failed"))

    def to_json(self) -> dict:
        return {
            "gruconv_version": __version__, "started": self.started, "duration_s": round(self.duration_s, 4),
            "jobs": self.jobs, "shard": self.shard, "out_dir": self.out_dir,
            "summary": self.counts, "exit_code": self.exit_code,
            "inputs": [r.to_json() for r in self.records], "not_run": list(self.not_run),
        }


# --------------------------------------------------------------------------- discovery

@dataclass
class _Input:
    display: str                 # the path as the user will recognise it (built from the argument)
    path: Path                   # what api.convert gets
    rel: Optional[str]           # path relative to its root argument, for mirroring (posix)
    key: str                     # real path, for deduplication
    format: Optional[str] = None
    error: Optional[GruconvError] = None
    out_rel: Optional[str] = None    # its output relative to --out-dir, once planned (:func:`_output_rel`)


def _detect(path: Path) -> Optional[str]:
    """The format of ``path``, or None when it is no model (or its reader cannot even be imported)."""
    from . import readers as formats

    try:
        return formats.detect(path)
    except GruconvError:
        return None
    except ImportError:  # a registered reader that does not import: treat as "not this format"
        return None


def _detect_explicit(path: Path) -> str:
    from . import readers as formats

    try:
        return formats.detect(path)
    except ImportError as e:
        raise InputError(f"cannot detect the format: a reader failed to import ({e})", path=path) from None


def _spans_files(fmt: Optional[str]) -> bool:
    """Whether an input of reader ``fmt`` is a set of files named by one prefix (a directory or a
    prefix is one input, not descended into): the reader has ``input_prefix``."""
    if fmt is None:
        return False
    from . import readers

    return getattr(readers.module(fmt), "input_prefix", None) is not None


def _input_prefix(fmt: str, path: Path) -> Path:
    """The prefix naming the one input at ``path`` (the reader's ``input_prefix``; a
    :class:`GruconvError` when it cannot be resolved)."""
    from . import readers

    return Path(readers.module(fmt).input_prefix(path))


def _real(path) -> str:
    return os.path.realpath(os.fspath(path))


def _name_too_long(path) -> Optional[str]:
    """Why ``path`` cannot exist on this file system (a component longer than ``NAME_MAX`` bytes, or
    the whole longer than ``PATH_MAX``), in words; None if its names fit. Asked before any ``stat``,
    so an over-long name is a one-line refusal, never ``OSError: [Errno 36]``."""
    raw = os.fsencode(os.fspath(path))
    probe = Path(os.fspath(path)).parent
    while str(probe) not in ("", ".") and not os.path.isdir(probe):
        probe = probe.parent
    try:
        name_max = os.pathconf(probe if str(probe) else ".", "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        name_max = 255
    try:
        path_max = os.pathconf(probe if str(probe) else ".", "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):
        path_max = 4096
    for part in raw.split(b"/"):
        if name_max and len(part) > name_max:
            return (f"a path component is {len(part)} bytes long, more than the file system allows "
                    f"({name_max}): file name too long")
    if path_max and len(raw) >= path_max:
        return f"the path is {len(raw)} bytes long, more than the file system allows ({path_max - 1})"
    return None


def _glob_root(pattern: str) -> Path:
    """The directory part of ``pattern`` before its first component with glob magic."""
    parts = Path(pattern).parts
    static = []
    for p in parts:
        if _GLOB_MAGIC.search(p):
            break
        static.append(p)
    return Path(*static) if static else Path(".")


def _rel(item_path: Path, root: Path) -> str:
    """``item_path`` (resolved) relative to ``root`` (resolved), posix; may start with ``..``."""
    return Path(os.path.relpath(_real(item_path), _real(root))).as_posix()


def _inside(real: str, base: str) -> bool:
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def _glob_component(comp: str) -> str:
    """One path component of a glob as a regex (``*``, ``?``, ``[...]``, ``[!...]``); like glob,
    a name starting with ``.`` is only matched by a component that starts with ``.``."""
    rx = "" if comp.startswith(".") else r"(?!\.)"
    j = 0
    while j < len(comp):
        c = comp[j]
        if c == "*":
            rx += r"[^/]*"
        elif c == "?":
            rx += r"[^/]"
        elif c == "[":
            k = j + 1
            if k < len(comp) and comp[k] in "!^":
                k += 1
            if k < len(comp) and comp[k] == "]":
                k += 1
            while k < len(comp) and comp[k] != "]":
                k += 1
            if k >= len(comp):
                rx += re.escape(c)
            else:
                body = comp[j + 1:k]
                neg = body[:1] in ("!", "^")
                body = (body[1:] if neg else body).replace("\\", "\\\\")
                rx += f"[{'^' if neg else ''}{body}]"
                j = k
        else:
            rx += re.escape(c)
        j += 1
    return rx


def _glob_regex(pattern: str, root: Path) -> "re.Pattern[str]":
    """A regex for the posix paths relative to ``root`` that ``pattern`` matches (glob's rules;
    ``**`` is any number of non-hidden directories)."""
    rest = Path(pattern).parts[len(root.parts):]
    rx = ""
    for i, comp in enumerate(rest):
        last = i == len(rest) - 1
        if comp == "**":
            rx += r"(?:[^/.][^/]*/)*" if not last else r"[^/.][^/]*(?:/[^/.][^/]*)*"
            continue
        rx += _glob_component(comp) + ("" if last else "/")
    return re.compile(rx + r"\Z", re.S)


class _Discovery:
    def __init__(self, out_dir: Path):
        self.items: list[_Input] = []
        self.seen: set[str] = set()
        self.skip_dirs = {_real(out_dir)}
        self.unresolved: Optional[GruconvError] = None   # why a named checkpoint directory did not resolve

    def add(self, item: _Input) -> None:
        if item.key in self.seen:
            return
        self.seen.add(item.key)
        self.items.append(item)

    def fail(self, display: str, error: GruconvError) -> None:
        self.add(_Input(display, Path(display), None, f"\0error:{display}", error=error))

    # A model found under a root (walked directory or glob).
    def found(self, path: Path, root: Path, fmt: str) -> bool:
        """Add ``path``; False for a checkpoint directory whose prefix cannot be resolved (several
        ``*.index`` files and no ``checkpoint`` file, or a broken one): walk it instead."""
        if _spans_files(fmt):
            try:
                prefix = _input_prefix(fmt, path)
            except GruconvError:
                return False
            if not path.is_dir():      # its .index / .data-* / .meta file: the input is the prefix
                path = prefix
            self.add(_Input(str(path), path, _rel(path, root), "ckpt:" + _real(prefix), fmt))
            return True
        self.add(_Input(str(path), path, _rel(path, root), _real(path), fmt))
        return True

    def explicit(self, arg: Path) -> None:
        """A path named on the command line: a model, a checkpoint (dir or prefix) or a directory."""
        from . import inputs

        try:
            is_dir = arg.is_dir()
        except OSError:
            is_dir = False
        if is_dir:
            if _real(arg) in self.skip_dirs:
                self.fail(str(arg), UsageError("input directory is the output directory", path=arg))
                return
            self.unresolved = None
            fmt = _detect(arg)
            if not (_spans_files(fmt) and self._explicit_prefix(arg, fmt, walk_on_error=True)):
                unresolved, before = self.unresolved, len(self.items)
                self._walk_checked(arg, arg)
                if unresolved is not None and len(self.items) == before:
                    # a checkpoint directory the user named whose prefix cannot be resolved (e.g. its
                    # 'checkpoint' file points outside) and no other model in it: a failure, never
                    # silently nothing
                    self.fail(str(arg), unresolved)
            return
        if os.path.exists(arg) and not inputs.is_regular(arg):
            try:
                inputs.regular_file(arg, "a model file, a checkpoint or a directory")
            except GruconvError as e:
                self.fail(str(arg), e)
                return
        try:
            fmt = _detect_explicit(arg)
        except GruconvError as e:
            self.fail(str(arg), e)
            return
        if _spans_files(fmt):
            self._explicit_prefix(arg, fmt)
            return
        self.add(_Input(str(arg), arg, arg.name, _real(arg), fmt))

    def _explicit_prefix(self, arg: Path, fmt: str, walk_on_error: bool = False) -> bool:
        try:
            prefix = _input_prefix(fmt, arg)
        except GruconvError as e:
            if walk_on_error:   # a directory of several checkpoints: each prefix is found by its .index
                self.unresolved = e
                return False
            self.fail(str(arg), e)
            return True
        if arg.is_dir():
            name = Path(_real(arg)).name if arg.name in ("", ".", "..") else arg.name
        else:
            name = prefix.name
        self.add(_Input(str(arg), arg, name, "ckpt:" + _real(prefix), fmt))
        return True

    def pattern(self, pattern: str) -> None:
        """Expand a glob with the walker's rules (no symlink leaves the root; loops, depth and
        entry count bounded) — never with :mod:`glob`, whose ``**`` follows symlink loops."""
        root = _glob_root(pattern)
        matches: list = []
        if root.is_dir():
            rx = _glob_regex(pattern, root)
            depth = None if "**" in Path(pattern).parts else len(Path(pattern).parts) - len(root.parts)
            try:
                self.walk(root, root, match=(rx, matches), max_depth=depth)
            except GruconvError as e:
                self.fail(pattern, e)
                return
        if not matches:
            self.fail(pattern, InputError("no such file or directory, and the glob pattern matches nothing",
                                          path=pattern))
            return
        for p in sorted(matches):
            if p.is_dir():
                if _real(p) in self.skip_dirs:
                    continue
                if not ((fmt := _detect(p)) is not None and _spans_files(fmt) and self.found(p, root, fmt)):
                    self._walk_checked(p, root)
            else:
                fmt = _detect(p)
                if fmt is not None:
                    self.found(p, root, fmt)

    def _walk_checked(self, top: Path, root: Path) -> None:
        try:
            self.walk(top, root)
        except GruconvError as e:
            self.fail(str(top), e)

    def walk(self, top: Path, root: Path, match=None, max_depth: Optional[int] = None) -> None:
        """Every model under ``top`` (sorted; ``out_dir`` excluded), never leaving ``root``.

        A symlink to a directory is followed only if it resolves inside ``root`` (then once: loops
        are cut by the resolved paths already visited); one that leads outside is a failed input
        ("not followed").  A symlink to a file outside ``root`` is kept as an input and then
        refused by :func:`safe_output` (its mirrored path would leave ``--out-dir``).  FIFOs,
        sockets and devices are never opened.  At most :data:`MAX_WALK_ENTRIES` entries and
        :data:`MAX_WALK_DEPTH` levels, else :class:`InputError`.

        ``match=(regex, found)``: glob mode — append the entries (files and directories) whose
        posix path relative to ``root`` the regex matches to ``found`` instead of detecting
        models; ``max_depth`` limits the descent.
        """
        from . import inputs

        base = _real(root)
        visited = {_real(top)}
        stack = [(top, 0)]
        count = 0
        while stack:
            d, depth = stack.pop()
            try:
                entries = sorted(os.scandir(d), key=lambda e: e.name)
            except OSError:
                continue
            subdirs = []
            for entry in entries:
                count += 1
                if count > MAX_WALK_ENTRIES:
                    raise InputError(f"more than {MAX_WALK_ENTRIES} entries under this directory; "
                                     "name fewer or smaller directories", path=top)
                p = Path(d) / entry.name
                try:
                    is_link = entry.is_symlink()
                    is_dir = entry.is_dir()          # follows a symlink
                except OSError:
                    continue
                hit = False
                if match is not None:
                    hit = match[0].match(Path(os.path.relpath(p, root)).as_posix()) is not None
                if is_dir:
                    real = _real(p)
                    if real in visited or real in self.skip_dirs:
                        continue
                    visited.add(real)
                    if is_link and not _inside(real, base):
                        if match is None or hit:
                            self.fail(str(p), InputError(
                                f"is a symbolic link to a directory outside '{inputs.display(root)}' "
                                f"('{inputs.display(real)}'); not followed", path=p))
                        continue
                    if depth + 1 > MAX_WALK_DEPTH:
                        raise InputError(f"directories nested deeper than {MAX_WALK_DEPTH} levels", path=top)
                    if match is not None:
                        if hit:
                            match[1].append(p)
                        if max_depth is None or depth + 1 < max_depth:
                            subdirs.append((p, depth + 1))
                        continue
                    if not ((fmt := _detect(p)) is not None and _spans_files(fmt) and self.found(p, root, fmt)):
                        subdirs.append((p, depth + 1))
                    continue
                if match is not None:
                    if hit:
                        match[1].append(p)
                    continue
                if not inputs.is_regular(p):
                    continue                          # FIFO, socket, device, dangling link: not a model
                fmt = _detect(p)
                if fmt is not None:
                    self.found(p, root, fmt)
            stack.extend(reversed(subdirs))


def discover(paths, out_dir) -> list[_Input]:
    """Expand ``paths`` (files, directories, globs) into deduplicated inputs sorted by their path."""
    d = _Discovery(Path(out_dir))
    for raw in paths:
        arg = Path(raw)
        s = os.fspath(raw)
        why = _name_too_long(s)
        if why is not None:
            d.fail(s, InputError(why, path=s))
            continue
        try:
            exists = os.path.lexists(arg) or os.path.exists(s + ".index")
            if not exists and _GLOB_MAGIC.search(s):
                d.pattern(s)
            else:
                d.explicit(arg)
        except OSError as e:   # e.g. ENAMETOOLONG, ELOOP: one failed input, never a traceback
            d.fail(s, InputError(f"cannot read ({e.strerror or e})", path=s))
    return sorted(d.items, key=lambda i: (i.display, i.key))


# --------------------------------------------------------------------------- sharding

def parse_shard(spec) -> Optional[tuple[int, int]]:
    """``"K/N"`` (1 <= K <= N) -> ``(K, N)``; None -> None; anything else is a :class:`UsageError`."""
    if spec is None:
        return None
    if isinstance(spec, tuple) and len(spec) == 2:
        k, n = spec
    else:
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(spec))
        if not m:
            raise UsageError(f"--shard must be K/N (e.g. 2/4), got {spec!r}")
        k, n = int(m.group(1)), int(m.group(2))
    if not (isinstance(k, int) and isinstance(n, int) and 1 <= k <= n):
        raise UsageError(f"--shard K/N needs 1 <= K <= N, got {k}/{n}")
    return k, n


def select_shard(items: list, shard: Optional[tuple[int, int]]) -> list:
    """The K-th of N parts of the sorted list: index ``i`` goes to shard ``i % N + 1``."""
    if shard is None:
        return list(items)
    k, n = shard
    return [x for i, x in enumerate(items) if i % n == k - 1]


# --------------------------------------------------------------------------- planning

def safe_output(out_dir: Path, rel: str) -> Path:
    """``out_dir / rel``, refusing anything that would land outside ``out_dir``.

    Refuses absolute paths, ``..`` components and paths whose resolved location (following any
    symlink already inside ``out_dir``) is not under the resolved ``out_dir``.
    """
    p = Path(rel)
    if not rel or p.is_absolute() or p.drive or p.root:
        raise OutputError(f"output path {rel!r} is absolute; refusing to write outside {str(out_dir)!r}")
    if any(part == ".." for part in p.parts):
        raise OutputError(f"output path {rel!r} has a '..' component (the input resolves outside the "
                          f"argument it was found under, e.g. through a symlink); refusing to write "
                          f"outside {str(out_dir)!r}")
    target = Path(out_dir) / p
    base = _real(out_dir)
    real = _real(target)
    if real != base and not real.startswith(base.rstrip(os.sep) + os.sep):
        raise OutputError(f"output {str(target)!r} resolves to {real!r}, outside {str(out_dir)!r} "
                          "(a symlink in the output tree?); refusing to write there")
    if real == base:
        raise OutputError(f"output {str(target)!r} is the output directory itself")
    return target


# ----- format facts: the only place batch knows anything about a format; each asks the format's
# module first (``output_name(path, options) -> str``, the registry verb) and falls back to the
# knowledge below until every format module has the verb.

def _format_module(fmt: str):
    from . import readers as formats

    return formats.module(fmt)


def _options_record(options: dict):
    """``options`` as the :class:`gruconv.results.Options` that format verbs take."""
    from .results import Options

    return Options.of({k: v for k, v in options.items() if k in Options.__dataclass_fields__})


def _stem(name: str) -> str:
    from . import readers

    return name[: -len(Path(name).suffix)] if Path(name).suffix.lower() in readers.input_suffixes() else name


def output_name(path: Path, fmt: str, options: dict) -> str:
    """The file (or, for a TF1 checkpoint with several stacks, directory) name the output of input
    ``path`` gets, from ``path.name``: the format's own ``output_name`` verb decides."""
    return _format_module(fmt).output_name(path, _options_record(options), _stem(path.name))


def _output_rel(item: _Input, options: dict) -> str:
    if item.out_rel is None:   # asked twice per run (collision check, plan): the format reads the input
        rel = Path(item.rel)
        name = output_name(Path(_real(item.path)).with_name(rel.name), item.format, options)
        item.out_rel = (rel.parent / name).as_posix() if str(rel.parent) != "." else name
    return item.out_rel


def _extra_outputs(out: Path, fmt: Optional[str]) -> list:
    """Files written beside ``out`` (for the overlap check), as the reader says (``extra_outputs``:
    a checkpoint's other tensors in ``OUT.rest.npz``)."""
    if fmt is None:
        return []
    return list(_format_module(fmt).extra_outputs(out))


def _input_files(item: _Input) -> list:
    """Every file converting ``item`` reads, as its format module lists them (``input_files``)."""
    if not item.format:
        return [item.path]
    try:
        return [item.path] + [Path(f) for f in _format_module(item.format).input_files(item.path)]
    except (GruconvError, OSError):
        return [item.path]


def _input_mtime(item: _Input) -> int:
    return max(f.stat().st_mtime_ns for f in _input_files(item) if f.exists())


def _output_mtime(out: Path) -> Optional[int]:
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


def _output_files(out) -> list:
    """The files of an output (or a list of them): a file itself, or every file below a directory
    output (no symlinks followed)."""
    if isinstance(out, (list, tuple)):
        return [f for o in out for f in _output_files(o)]
    if out.is_symlink() or out.is_file():
        return [out]
    if out.is_dir():
        return sorted(p for p in out.rglob("*") if p.is_file() and not p.is_symlink())
    return []


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
    for f in _output_files(out):
        st = f.lstat()
        files[Path(os.path.relpath(f, out_dir)).as_posix()] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                                               "sha256": _sha256(f)}
    return files


class _State:
    """``DIR/.gruconv.batch.json``: per output (relative to DIR), the input it came from, the input's
    mtime and each output file's size, mtime and SHA-256 — written only for a conversion that
    succeeded, dropped for one that failed. An output is skipped only if all of that still holds."""

    def __init__(self, out_dir: Path):
        self.out_dir = out_dir
        self.path = out_dir / STATE_FILE
        self.entries = self._load()
        self.changes: dict = {}

    def _load(self) -> dict:
        from . import inputs

        try:
            doc = inputs.load_json(self.path, "a gruconv batch record")
        except GruconvError:
            return {}
        out = doc.get("outputs") if isinstance(doc, dict) else None
        return out if isinstance(out, dict) else {}

    def key(self, out: Path) -> str:
        return Path(os.path.relpath(out, self.out_dir)).as_posix()

    def up_to_date(self, item: _Input, outs: list) -> bool:
        e = self.entries.get(self.key(outs[0]))
        if not isinstance(e, dict) or e.get("input") != item.key or not e.get("files"):
            return False
        try:
            if _input_mtime(item) != e.get("input_mtime_ns"):
                return False
            want = e["files"]
            have = {Path(os.path.relpath(f, self.out_dir)).as_posix(): f for f in _output_files(outs)}
            if set(have) != set(want):
                return False
            for rel, f in have.items():
                st, w = f.lstat(), want[rel]
                if (st.st_size, st.st_mtime_ns) != (w.get("size"), w.get("mtime_ns")) or _sha256(f) != w.get("sha256"):
                    return False
        except (OSError, KeyError, TypeError, ValueError, AttributeError):
            return False
        return True

    def succeeded(self, item: _Input, outs: list, input_mtime: Optional[int]) -> None:
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
            _write(self.path, (json.dumps(doc, indent=1) + "\n").encode("utf-8"))
        except (GruconvError, OSError):
            pass  # without a record the next --skip-existing converts again: safe


# ----- what a failed job leaves: nothing

def _snapshot(outs: list) -> dict:
    snap = {}
    for f in _output_files(outs):
        try:
            st = f.lstat()
            snap[str(f)] = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            continue
    return snap


def _undo(outs: list, snap: dict) -> list:
    """Remove the files of ``outs`` that the failed job created or replaced; return them."""
    removed = []
    for f in _output_files(outs):
        try:
            st = f.lstat()
            if snap.get(str(f)) != (st.st_ino, st.st_mtime_ns, st.st_size):
                f.unlink()
                removed.append(str(f))
        except OSError:
            continue
    for out in outs:
        if out.is_dir() and not out.is_symlink() and not any(k.startswith(str(out) + os.sep) for k in snap):
            for d in sorted((p for p in out.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [out]:
                try:
                    d.rmdir()
                except OSError:
                    pass
    return removed


@dataclass
class _Job:
    record: Record
    item: _Input
    output: Optional[Path] = None
    outs: list = field(default_factory=list)    # output and the files written beside it
    force: bool = False
    todo: bool = False        # needs converting (else: the record is final: failed or skipped)
    snap: dict = field(default_factory=dict)    # the output files before the job ran
    input_mtime: Optional[int] = None
    made_dirs: list = field(default_factory=list)


def _collisions(items: list[_Input], out_dir: Path, options: dict) -> dict:
    """Before any work: inputs (of any shard: shards share ``out_dir``) that map to one output, or
    whose output lies inside another's (a directory output). Every one of them fails while planning
    — the first claimant too, so nothing of a colliding pair is converted — and the others run.
    Returns ``{input key: OutputError}``; an input whose output cannot be planned at all is left to
    fail on its own in :func:`_plan`."""
    claims: dict = {}     # real output path -> [(input, output)]
    for item in items:
        if item.error is not None:
            continue
        try:
            out = safe_output(out_dir, _output_rel(item, options))
        except (GruconvError, OSError):
            continue
        claims.setdefault(_real(out), []).append((item, out))
    base = _real(out_dir)
    clash: dict = {}      # input key -> (its output, the other input)

    def mark(a, b) -> None:
        clash.setdefault(a[0].key, (a[1], b[0]))
        clash.setdefault(b[0].key, (b[1], a[0]))

    for real, group in claims.items():
        for a in group[1:]:
            mark(a, group[0])
        child, parent = real, os.path.dirname(real)
        while parent != child and len(parent) > len(base):    # an output inside another's directory
            for other in claims.get(parent, ()):
                for a in group:
                    mark(a, other)
            child, parent = parent, os.path.dirname(parent)
    return {key: OutputError(f"output {str(out)!r} collides with the output of {other.display}; neither is "
                             "converted (rename one, or convert them into separate --out-dir directories)")
            for key, (out, other) in clash.items()}


def _plan(items: list[_Input], out_dir: Path, options: dict, skip_existing: bool,
          state: Optional["_State"] = None, collisions: Optional[dict] = None) -> list[_Job]:
    """One job per input; ``collisions`` (:func:`_collisions`, over every shard's inputs; computed
    here from ``items`` when not given) fail the inputs that share an output."""
    if collisions is None:
        collisions = _collisions(items, out_dir, options)
    jobs = []
    for item in items:
        rec = Record(input=item.display, format=item.format)
        job = _Job(rec, item)
        jobs.append(job)
        try:
            if item.error is not None:
                raise item.error
            out = safe_output(out_dir, _output_rel(item, options))
            if item.key in collisions:
                raise collisions[item.key]
            rec.output = str(out)
            job.output = out
            job.outs = [out] + _extra_outputs(out, item.format)
            if skip_existing and _output_mtime(out) is not None:
                if state is not None and state.up_to_date(item, job.outs):
                    rec.status, rec.outputs = "skipped", [str(out)]
                    continue
                # stale, or not known to come from a successful conversion: rebuild it
                job.force = True
            job.todo = True
        except GruconvError as e:
            _fail(rec, e)
        except OSError as e:
            _fail(rec, InputError(f"cannot plan the output ({e.strerror or e})", path=item.display))
    return jobs


def _check_no_input_is_written(plan: list[_Job], items: list[_Input], extra_outputs: list,
                               extra_inputs: tuple = ()) -> None:
    """Before any work: no planned output, no report file may be (or link to) any input file —
    a model's files, or ``extra_inputs`` (the ``--config`` file)."""
    from .outputs import check_outputs

    for p in extra_outputs:
        why = None if p is None else _name_too_long(p)
        if why is not None:
            raise OutputError(why, path=p)
    inputs = [f for item in items if item.error is None for f in _input_files(item)]
    inputs += [Path(p) for p in extra_inputs if p is not None]
    if not inputs:
        return
    outs = [o for job in plan if job.todo for o in job.outs] + [Path(p) for p in extra_outputs if p is not None]
    try:
        check_outputs(outs, inputs)
    except OutputError as e:
        raise OutputError(e.message + " (with --out-dir: choose an output directory apart from the inputs, "
                                      "or another --report/--junit path)", path=e.path) from None
    reports = [Path(p) for p in extra_outputs if p is not None]
    planned = {_real(o) for job in plan if job.output is not None for o in job.outs}
    for r in reports:
        if _real(r) in planned:
            raise OutputError("report path is also a converted model's output", path=r)
    if len(reports) == 2 and _real(reports[0]) == _real(reports[1]):
        raise UsageError("--report and --junit name the same file", path=reports[0])


def _fail(rec: Record, e: GruconvError) -> None:
    rec.status = "parity-failed" if isinstance(e, ParityError) else "failed"
    rec.error, rec.error_type, rec.exit_code = str(e), type(e).__name__, e.exit_code


# --------------------------------------------------------------------------- workers

def _worker_init(threads: int) -> None:
    """Pool initializer: cap the framework's thread pools at this worker's share of the CPUs (N
    workers each spinning up one thread per core only fight each other), then pay the framework
    start-up once per worker, before its first job."""
    for var in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, str(threads))
    try:
        from .formats.keras3 import keras

        keras()
    except Exception:  # noqa: BLE001 - the first conversion reports it properly
        pass


def _jsonable(obj):
    return json.loads(json.dumps(obj, default=str))


def _convert_one(input: str, output: str, options: dict) -> dict:
    """Convert one input; never raises for a per-input problem (returns the record's fields)."""
    from . import api

    t0 = time.perf_counter()
    out: dict = {"status": "failed", "exit_code": GruconvError.exit_code}
    try:
        result = api.convert(input, output, **options)
        res = _jsonable(result.to_json())
        out.update(format=res.get("format"), outputs=res.get("outputs") or [],
                   stacks=res.get("rnns") or res.get("stacks") or [],
                   warnings=res.get("warnings") or [], verification=res.get("verification"))
        ver = res.get("verification")
        if result.nothing_to_convert and not res.get("outputs"):
            out.update(status="nothing-to-convert", exit_code=0)
        elif ver is not None and not ver.get("passed", True):
            out.update(status="parity-failed", exit_code=ParityError.exit_code, error_type="ParityError",
                       error=_parity_message(ver))
        else:
            out.update(status="ok", exit_code=0)
    except GruconvError as e:
        out.update(status="parity-failed" if isinstance(e, ParityError) else "failed", exit_code=e.exit_code,
                   error=str(e), error_type=type(e).__name__)
    except Exception as e:  # noqa: BLE001 - a bug: record it, keep the batch alive
        out.update(status="failed", exit_code=GruconvError.exit_code, error=f"internal error: {type(e).__name__}: {e}",
                   error_type="InternalError", traceback=traceback.format_exc())
    out["seconds"] = time.perf_counter() - t0
    return out


def _parity_message(ver: dict) -> str:
    bad = [c for c in ver.get("checks") or [] if not c.get("passed", True)]
    if not bad:
        return "verification failed"
    parts = [f"{c.get('name')}: max abs {c.get('max_abs'):.3g} > {c.get('tolerance'):.3g}" for c in bad[:3]]
    more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
    return "converted model outside tolerance: " + "; ".join(parts) + more


def _apply(rec: Record, res: dict) -> None:
    rec.status = res["status"]
    rec.exit_code = res.get("exit_code", 0)
    rec.format = res.get("format") or rec.format
    for k in ("outputs", "stacks", "warnings"):
        setattr(rec, k, res.get(k) or [])
    rec.verification = res.get("verification")
    rec.error, rec.error_type = res.get("error"), res.get("error_type")
    rec.traceback = res.get("traceback")
    rec.seconds = res.get("seconds", 0.0)


# --------------------------------------------------------------------------- console

class _Console:
    def __init__(self, total: int, enabled: bool, say=None):
        self.total, self.done, self.enabled = total, 0, enabled
        self.tty = enabled and _isatty(sys.stderr)
        self.width = 0
        self.say = say or _print

    def record(self, rec: Record) -> None:
        self.done += 1
        if not self.enabled:
            return
        line = _line(rec)
        if self.tty:
            self._clear()
            if rec.status in ("failed", "parity-failed"):
                self.say(line, err=True)
            progress = f"[{self.done}/{self.total}] {rec.status}  {_display(rec.input)}"
            cols = _columns()
            progress = progress if len(progress) < cols else progress[: cols - 4] + "..."
            self.say("\r" + progress, err=True, nl=False)
            self.width = len(progress)
        else:
            self.say(line, err=True)

    def _clear(self) -> None:
        if self.width:
            self.say("\r" + " " * self.width + "\r", err=True, nl=False)
            self.width = 0

    def close(self) -> None:
        if self.tty:
            self._clear()


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _columns() -> int:
    try:
        return max(20, os.get_terminal_size(sys.stderr.fileno()).columns)
    except (OSError, ValueError, AttributeError):
        return 80


def _display(text) -> str:
    from .inputs import display

    return display(text)


def _short_error(rec: Record) -> str:
    err = rec.error or rec.status
    for prefix in (f"{rec.input}: ", f"{_display(rec.input)}: "):
        if err.startswith(prefix):
            return err[len(prefix):]
    return err


def _line(rec: Record) -> str:
    """One console line for a record; control characters in names escaped (one line, always)."""
    t = f"({rec.seconds:.1f}s)"
    name = _display(rec.input)
    if rec.status == "ok":
        outs = ", ".join(rec.outputs) or rec.output or "?"
        return f"ok  {name} -> {_display(outs)} {t}"
    if rec.status == "nothing-to-convert":
        return f"ok  {name}: nothing to convert {t}"
    if rec.status == "skipped":
        return f"skipped {name}"
    return f"FAILED {name}: {_display(_short_error(rec))}"


def summary_text(summary: Summary) -> str:
    """The table printed on stdout at the end of a batch."""
    c = summary.counts
    rows = [(s, str(c[s])) for s in STATUSES]
    if summary.not_run:
        rows.append(("not run", str(len(summary.not_run))))
    rows.append(("total", str(len(summary.records) + len(summary.not_run))))
    rate = summary.converted / summary.duration_s if summary.duration_s > 0 else 0.0
    rows += [("time", f"{summary.duration_s:.1f} s"), ("throughput", f"{rate:.2f} models/s"),
             ("jobs", str(summary.jobs))]
    if summary.shard:
        rows.append(("shard", summary.shard))
    w = max(len(k) for k, _ in rows)
    v = max(len(x) for _, x in rows)
    return "\n".join(f"{k:<{w}}  {x:>{v}}" for k, x in rows)


# --------------------------------------------------------------------------- reports

_XML_BAD = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(s) -> str:
    s = str(s).encode("utf-8", "backslashreplace").decode("utf-8")  # lone surrogates from odd file names
    return _XML_BAD.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


def junit_xml(summary: Summary) -> bytes:
    """One ``<testsuite name="gruconv">``, one ``<testcase>`` per input that ran (or was skipped)."""
    import xml.etree.ElementTree as ET

    c = summary.counts
    failures = c["failed"] + c["parity-failed"]
    suite = ET.Element("testsuite", {
        "name": "gruconv", "tests": str(len(summary.records)), "failures": str(failures), "errors": "0",
        "skipped": str(c["skipped"]), "time": f"{summary.duration_s:.3f}", "timestamp": summary.started,
        "hostname": _xml_text(socket.gethostname() or "localhost"),
    })
    props = ET.SubElement(suite, "properties")
    for name, value in (("gruconv_version", __version__), ("jobs", summary.jobs), ("shard", summary.shard or ""),
                        ("out_dir", summary.out_dir)):
        ET.SubElement(props, "property", {"name": name, "value": _xml_text(value)})
    for r in summary.records:
        case = ET.SubElement(suite, "testcase", {"classname": "gruconv.convert", "name": _xml_text(r.input),
                                                 "time": f"{r.seconds:.3f}"})
        if r.status in ("failed", "parity-failed"):
            fail = ET.SubElement(case, "failure", {"message": _xml_text(_short_error(r)),
                                                   "type": _xml_text(r.error_type or r.status)})
            fail.text = _xml_text(r.error or "") + ("\n\n" + _xml_text(r.traceback) if r.traceback else "")
        elif r.status == "skipped":
            ET.SubElement(case, "skipped", {"message": "output is up to date (recorded as converted, unchanged since)"})
        out_lines = [f"status: {r.status}"] + [f"output: {o}" for o in r.outputs] + \
                    [f"warning: {w}" for w in r.warnings]
        ET.SubElement(case, "system-out").text = _xml_text("\n".join(out_lines))
    ET.indent(suite)
    return ET.tostring(suite, encoding="utf-8", xml_declaration=True) + b"\n"


def _write(path: Path, data: bytes) -> None:
    from .outputs import atomic_path

    path = Path(path)
    if str(path.parent):
        path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, force=True) as tmp:
        tmp.write_bytes(data)


def write_reports(summary: Summary, report=None, junit=None) -> None:
    if report is not None:
        _write(Path(report), (json.dumps(summary.to_json(), indent=2) + "\n").encode("utf-8"))
    if junit is not None:
        _write(Path(junit), junit_xml(summary))


# --------------------------------------------------------------------------- driver

def convert_many(paths, out_dir, *, jobs: Optional[int] = None, keep_going: bool = False,
                 skip_existing: bool = False, shard=None, report=None, junit=None, echo: bool = True,
                 print_fn=None, **options) -> Summary:
    """Convert every model in ``paths`` into ``out_dir``; see the module docstring.

    ``options`` are :func:`gruconv.api.convert`'s (``force``, ``format``, ``config``, ``verify``,
    ``tolerance``, ``hints``, ``rnn``, ``prefer``, ...). ``echo=False`` silences the console.
    ``print_fn(text, err=False, nl=True)`` prints the console (per-input lines and progress with
    ``err=True``, the summary table with ``err=False``); ``click.echo`` fits, and the default
    writes to ``sys.stderr`` / ``sys.stdout``.
    Before any conversion, refuses (:class:`OutputError`) a planned output or ``report`` /
    ``junit`` file that is one of the inputs (same path, symlink or hard link).
    With ``jobs > 1`` the workers are *spawned* (TensorFlow is not fork-safe), so a script calling
    this must guard its top level with ``if __name__ == "__main__":``, as for any spawn pool.
    Raises :class:`UsageError` for a bad ``shard``/``jobs``/``format``; per-input problems are
    records in the returned :class:`Summary`, never exceptions.
    """
    t0 = time.perf_counter()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    shard_t = parse_shard(shard)
    if jobs is None:
        jobs = _cpu_count()
    if not isinstance(jobs, int) or jobs < 1:
        raise UsageError(f"--jobs must be a positive integer, got {jobs!r}")
    if options.get("format") is not None:
        from . import writers

        writers.module(options["format"])  # a writer's name, or the one usage line
    if not paths:
        raise UsageError("no inputs given")
    config_file = None
    if options.get("config") is not None and not isinstance(options["config"], dict):
        config_file = Path(options["config"])   # an input: no output or report may overwrite it
        why = _name_too_long(config_file)
        if why is not None:
            raise InputError(why, path=config_file)
        options["config"] = str(config_file.resolve())  # workers may not share our cwd
    out_dir = Path(out_dir)
    why = _name_too_long(out_dir)
    if why is not None:
        raise OutputError(f"--out-dir: {why}", path=out_dir)
    try:
        if os.path.lexists(out_dir) and not out_dir.is_dir():
            raise UsageError(f"--out-dir {str(out_dir)!r} exists and is not a directory")
    except OSError as e:
        raise OutputError(f"cannot use the output directory ({e.strerror or e})", path=out_dir) from None

    # Every whole-run refusal comes before anything is written: --out-dir is created only once the
    # plan stands and something is to be converted.
    all_items = discover(paths, out_dir)
    items = select_shard(all_items, shard_t)
    _refuse_unread_options(all_items, options)
    state = _State(out_dir)
    plan = _plan(items, out_dir, options, skip_existing, state, _collisions(all_items, out_dir, options))
    _check_no_input_is_written(plan, all_items, [report, junit], (config_file,))
    if any(job.todo for job in plan):
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise OutputError(f"cannot create the output directory ({e.strerror or e})", path=out_dir) from None
    summary = Summary(records=[], started=started, jobs=jobs,
                      shard=None if shard_t is None else f"{shard_t[0]}/{shard_t[1]}", out_dir=str(out_dir))
    say = print_fn or _print
    console = _Console(len(plan), echo, say)
    done: list[_Job] = []
    try:
        _run(plan, jobs, keep_going, options, console, done, state)
    finally:
        console.close()
        state.save()
        done_ids = {id(j) for j in done}
        summary.records = [j.record for j in plan if id(j) in done_ids]
        summary.not_run = [j.record.input for j in plan if id(j) not in done_ids]
        summary.duration_s = time.perf_counter() - t0
        write_reports(summary, report, junit)
    if echo:
        say(summary_text(summary))
    return summary


def _print(text: str, err: bool = False, nl: bool = True) -> None:
    """The default ``print_fn``: like ``click.echo`` for text, to the current ``sys.stderr`` /
    ``sys.stdout`` (looked up at each call, so test runners that swap them see the output)."""
    stream = sys.stderr if err else sys.stdout
    if stream is None:
        return
    stream.write(text + ("\n" if nl else ""))
    stream.flush()


def _cpu_count() -> int:
    """CPUs this process may use (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _prepare(job: _Job) -> None:
    """Create the output's parent directories (remembered, so a failure can remove them again),
    and note what the output files are before the job (:func:`_snapshot`)."""
    job.snap = _snapshot(job.outs)
    try:
        job.input_mtime = _input_mtime(job.item)
    except (OSError, ValueError):
        job.input_mtime = None
    if job.output is not None and str(job.output.parent):
        missing = []
        d = job.output.parent
        while str(d) not in ("", ".") and not os.path.lexists(d):
            missing.append(d)
            d = d.parent
        job.output.parent.mkdir(parents=True, exist_ok=True)
        job.made_dirs = missing


def _settle(job: _Job, state: Optional[_State]) -> None:
    """After a job: a failure leaves no output (files it created or replaced are removed, and the
    directories made for it); the record of successful conversions is updated either way."""
    rec = job.record
    if rec.status in ("failed", "parity-failed"):
        removed = _undo(job.outs, job.snap)
        if removed and rec.status == "parity-failed":
            rec.warnings.append(f"output removed because verification failed: {', '.join(removed)}")
        if removed:
            rec.outputs = [o for o in rec.outputs if o not in removed]
        for d in getattr(job, "made_dirs", []):
            try:
                d.rmdir()
            except OSError:
                break
        if state is not None and job.output is not None:
            state.failed(job.output)
    elif state is not None and job.output is not None:
        if rec.status == "ok" and _output_files(job.outs):
            state.succeeded(job.item, job.outs, job.input_mtime)
        else:
            state.failed(job.output)


def _run_formats(options: dict) -> list:
    """The writers a run may use: ``--format``'s, else any (each input's own default)."""
    from . import writers

    return [options["format"]] if options.get("format") else list(writers.WRITERS)


def _refuse_unread_options(items: list, options: dict) -> None:
    """Refuse (exit 2) before any work an option that no reader or writer of the run reads (a
    ``--config`` in a run of checkpoints only, ``--rnn`` with Keras files only, ...)."""
    from . import readers

    names = sorted({item.format for item in items if item.format})
    if not names:
        return  # nothing is read: nothing to refuse
    accepted = set()
    for name in names:
        accepted |= readers.accepted_options(name, _run_formats(options))
    readers.refuse_unread(_options_record(options), accepted, "any input of this run")


def _job_options(job: _Job, options: dict) -> dict:
    """``options`` for one input: those its reader and writers do not read are left out (they are
    for the run's other inputs; the run refused any that no input reads)."""
    if job.item.format:
        from . import readers
        from .results import Options

        accepted = readers.accepted_options(job.item.format, _run_formats(options))
        options = {k: v for k, v in options.items() if k not in Options.__dataclass_fields__ or k in accepted}
    return dict(options, force=True) if job.force else options


def _run(plan: list[_Job], jobs: int, keep_going: bool, options: dict, console: _Console, done: list,
         state: Optional[_State] = None) -> None:
    """Execute the plan; append each finished job to ``done`` (in completion order)."""
    # Without keep_going, nothing after a failure decided while planning is started.
    runnable = []
    for job in plan:
        runnable.append(job)
        if job.record.status == "failed" and not job.todo and not keep_going:
            break

    def finish(job: _Job) -> bool:
        if job.todo:
            _settle(job, state)
        done.append(job)
        console.record(job.record)
        return job.record.status in ("failed", "parity-failed")

    todo = [j for j in runnable if j.todo]
    workers = min(jobs, len(todo))
    if workers <= 1:
        for job in runnable:
            if job.todo:
                try:
                    _prepare(job)
                except OSError as e:
                    _fail(job.record, OutputError(f"cannot create the output directory ({e.strerror or e})",
                                                  path=job.output))
                else:
                    _apply(job.record, _convert_one(str(job.item.path), str(job.output),
                                                    _job_options(job, options)))
            if finish(job) and not keep_going:
                return
        return

    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    threads = max(1, _cpu_count() // workers)
    pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                                  initargs=(threads,))
    futures: dict = {}
    try:
        for job in runnable:
            if not job.todo:
                finish(job)  # skipped, or failed while planning (then last in `runnable`: earlier jobs run)
                continue
            try:
                _prepare(job)
            except OSError as e:
                _fail(job.record, OutputError(f"cannot create the output directory ({e.strerror or e})",
                                              path=job.output))
                if finish(job) and not keep_going:
                    break
                continue
            futures[pool.submit(_convert_one, str(job.item.path), str(job.output),
                                _job_options(job, options))] = job
        for fut in cf.as_completed(futures):
            job = futures[fut]
            if fut.cancelled():
                continue
            try:
                _apply(job.record, fut.result())
            except cf.CancelledError:
                continue
            except Exception as e:  # noqa: BLE001 - a worker died (BrokenProcessPool) or the result broke
                job.record.status, job.record.exit_code = "failed", GruconvError.exit_code
                job.record.error = (f"internal error: worker process failed: {type(e).__name__}: {e}"
                                    + (" (a worker died: out of memory, killed, or a spawned worker could not "
                                       "import the calling script's __main__)"
                                       if isinstance(e, cf.process.BrokenProcessPool) else ""))
                job.record.error_type = "InternalError"
                job.record.traceback = "".join(traceback.format_exception(e))
            if finish(job) and not keep_going:
                for f in futures:
                    f.cancel()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
