"""Discovery and sharding: files, directories and globs into sorted, deduplicated inputs (no symlink out of an argument, bounded walks, FIFOs never opened); "what is one input here" is the reader's (``input_prefix``)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import GruconvError, InputError, UsageError


MAX_WALK_DEPTH = 128


#: Discovery bounds: entries looked at per root argument, and directory depth below it.
MAX_WALK_ENTRIES = 1_000_000


_GLOB_MAGIC = re.compile(r"[*?[]")

#: The walk's directory listing (one name, so tests can make a directory unreadable for the walk
#: alone: they run as root, whom file modes do not lock out).
_scandir = os.scandir


# --------------------------------------------------------------------------- discovery

@dataclass
class Input:
    display: str                 # the path as the user will recognise it (built from the argument)
    path: Path                   # what api.convert gets
    rel: Optional[str]           # path relative to its root argument, for mirroring (posix)
    key: str                     # real path, for deduplication
    format: Optional[str] = None
    error: Optional[GruconvError] = None
    skip: Optional[str] = None       # a directory passed over, and why (never converted, always reported)
    out_rel: Optional[str] = None    # its output relative to --out-dir, once planned (:func:`_output_rel`)


def _detect(path: Path) -> Optional[str]:
    """The format of ``path``, or None when it is no model (or its reader cannot even be imported)."""
    from .. import readers as formats

    try:
        return formats.detect(path)
    except GruconvError:
        return None
    except ImportError:  # a registered reader that does not import: treat as "not this format"
        return None


def _detect_explicit(path: Path) -> str:
    from .. import readers as formats

    try:
        return formats.detect(path)
    except ImportError as e:
        raise InputError(f"cannot detect the format: a reader failed to import ({e})", path=path) from None


def _spans_files(fmt: Optional[str]) -> bool:
    """Whether an input of reader ``fmt`` is a set of files named by one prefix (a directory or a
    prefix is one input, not descended into): the reader has ``input_prefix``."""
    if fmt is None:
        return False
    from .. import readers

    return getattr(readers.module(fmt), "input_prefix", None) is not None


def _input_prefix(fmt: str, path: Path) -> Path:
    """The prefix naming the one input at ``path`` (the reader's ``input_prefix``; a
    :class:`GruconvError` when it cannot be resolved)."""
    from .. import readers

    return Path(readers.module(fmt).input_prefix(path))


def real_path(path) -> str:
    return os.path.realpath(os.fspath(path))


def name_too_long(path) -> Optional[str]:
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
    return Path(os.path.relpath(real_path(item_path), real_path(root))).as_posix()


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
        self.items: list[Input] = []
        self.seen: set[str] = set()
        self.skip_dirs = {real_path(out_dir)}
        self.unresolved: Optional[GruconvError] = None   # why a named checkpoint directory did not resolve
        self.roots: list = []                            # every argument, as given (the "nothing found" line)
        self.passed_over: dict = {}                      # walked directory -> why it is not an input

    def add(self, item: Input) -> None:
        if item.key in self.seen:
            return
        self.seen.add(item.key)
        self.items.append(item)

    def fail(self, display: str, error: GruconvError) -> None:
        self.add(Input(display, Path(display), None, f"\0error:{display}", error=error))

    def pass_over(self, path: Path, reason: str) -> None:
        """Remember a directory the walk could not take as an input (a checkpoint whose state file
        cannot be followed, an unreadable directory, a SavedModel no reader reads); it is reported as
        skipped unless an input is found inside it after all (:meth:`finish`)."""
        self.passed_over.setdefault(str(path), (path, reason))

    def finish(self) -> None:
        """Every passed-over directory holding no input becomes a skipped record with its reason."""
        for display, (path, reason) in self.passed_over.items():
            base = real_path(path)
            if any(i.error is None and i.skip is None and _inside(real_path(i.path), base) for i in self.items):
                continue
            self.add(Input(display, path, None, f"\0skip:{base}", skip=reason))

    # A model found under a root (walked directory or glob).
    def found(self, path: Path, root: Path, fmt: str) -> bool:
        """Add ``path``; False for a checkpoint directory whose prefix cannot be resolved (several
        ``*.index`` files and no ``checkpoint`` file, or a broken one): walk it instead."""
        if _spans_files(fmt):
            try:
                prefix = _input_prefix(fmt, path)
            except GruconvError as e:
                if path.is_dir():
                    self.pass_over(path, _reason(e, path))
                return False
            if not path.is_dir():      # its .index / .data-* / .meta file: the input is the prefix
                path = prefix
            self.add(Input(str(path), path, _rel(path, root), "ckpt:" + real_path(prefix), fmt))
            return True
        self.add(Input(str(path), path, _rel(path, root), real_path(path), fmt))
        return True

    def explicit(self, arg: Path) -> None:
        """A path named on the command line: a model, a checkpoint (dir or prefix) or a directory."""
        from ..files import inputs

        try:
            is_dir = arg.is_dir()
        except OSError:
            is_dir = False
        if is_dir:
            if real_path(arg) in self.skip_dirs:
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
        self.add(Input(str(arg), arg, arg.name, real_path(arg), fmt))

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
            name = Path(real_path(arg)).name if arg.name in ("", ".", "..") else arg.name
        else:
            name = prefix.name
        self.add(Input(str(arg), arg, name, "ckpt:" + real_path(prefix), fmt))
        return True

    def _unconvertible(self, path: Path) -> None:
        """A directory that is a TensorFlow model in a form no reader takes (a SavedModel without the
        variables bundle gruconv reads): passed over with that reason."""
        try:
            from ..model.saved_model import SAVED_MODEL_FILES

            marker = next((n for n in SAVED_MODEL_FILES if (path / n).is_file()), None)
        except OSError:
            marker = None
        if marker is not None:
            self.pass_over(path, f"a SavedModel ({marker}) whose variables/variables bundle holds no checkpoint "
                                 "gruconv reads: not converted")

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
                if real_path(p) in self.skip_dirs:
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
        from ..files import inputs

        base = real_path(root)
        visited = {real_path(top)}
        stack = [(top, 0)]
        count = 0
        while stack:
            d, depth = stack.pop()
            try:
                entries = sorted(_scandir(d), key=lambda e: e.name)
            except OSError as e:
                if match is None:
                    self.pass_over(Path(d), f"directory cannot be read ({e.strerror or e})")
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
                    real = real_path(p)
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
                    fmt = _detect(p)
                    if not (fmt is not None and _spans_files(fmt) and self.found(p, root, fmt)):
                        if fmt is None:
                            self._unconvertible(p)
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


def _reason(e: GruconvError, path: Path) -> str:
    """A skip reason from an error: its message, naming the file it concerns when that is not the
    directory itself (the state file)."""
    where = getattr(e, "path", None)
    msg = getattr(e, "message", str(e))
    if where is not None and real_path(where) != real_path(path):
        return f"{Path(where).name}: {msg}"
    return msg


def discover(paths, out_dir) -> list[Input]:
    """Expand ``paths`` (files, directories, globs) into deduplicated inputs sorted by their path;
    directories passed over for a reason are inputs with ``skip`` set (reported, never converted)."""
    return discover_all(paths, out_dir)[0]


def discover_all(paths, out_dir) -> tuple:
    """``(inputs, roots)``: :func:`discover`'s list and the arguments as given (for the one line that
    says nothing convertible was found under them)."""
    d = _Discovery(Path(out_dir))
    for raw in paths:
        d.roots.append(os.fspath(raw))
        arg = Path(raw)
        s = os.fspath(raw)
        why = name_too_long(s)
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
    d.finish()
    return sorted(d.items, key=lambda i: (i.display, i.key)), list(d.roots)


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


# --------------------------------------------------------------------------- nothing found

def nothing_converted(records: list, roots: list) -> Optional[str]:
    """After an unsharded run: the one line when every input was read and none held anything to convert
    (legacy Keras files with plain GRU/LSTM layers only), naming the roots; else None.  A shard cannot
    say this of the whole tree (another shard may convert), so the caller asks only without --shard."""
    if not records or any(r.status != "nothing-to-convert" for r in records):
        return None
    from ..files.inputs import display

    names = ", ".join(f"'{display(r)}'" for r in roots) or "(none)"
    return (f"no convertible input found under {names} ({len(records)} model file(s) read, none with a "
            "CuDNNGRU/CuDNNLSTM layer or a cuDNN RNN checkpoint)")


def nothing_convertible(items: list, roots: list) -> Optional[str]:
    """The one line for a run in which no input (of any shard) can be converted -- nothing found, or
    every directory skipped or failed -- naming the roots; None when some input can be.  A CI job
    that converts nothing must not look green."""
    from .. import readers

    def converts(i) -> bool:  # a reader that never converts (Keras 3 files) does not count
        return i.format is None or getattr(readers.module(i.format), "CONVERTS", True)

    if any(i.error is None and i.skip is None and converts(i) for i in items):
        return None
    from ..files.inputs import display

    names = ", ".join(f"'{display(r)}'" for r in roots) or "(none)"
    skipped = sum(1 for i in items if i.skip is not None)
    failed = sum(1 for i in items if i.error is not None)
    keras3 = sum(1 for i in items if i.error is None and i.skip is None and not converts(i))
    more = [f"{n} {w}" for n, w in ((keras3, "already Keras 3"), (skipped, "skipped"), (failed, "failed")) if n]
    return f"no convertible input found under {names}" + (f" ({', '.join(more)})" if more else "")
