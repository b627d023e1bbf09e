"""Write pytest's assertion-rewriting cache for the test modules before a tier runs (``make test``).

Why: pytest rewrites the ``assert`` statements of every test module it imports, and caches the result in
``__pycache__/*.cpython-3X-pytest-X.Y.Z.pyc`` -- but only where ``sys.dont_write_bytecode`` is false.  Where
``PYTHONDONTWRITEBYTECODE`` is set (this project's 2-core box, and likely CI's image) nothing is cached, so every
pytest process rewrites every module it collects, each run: measured 3.6 s of a worker's 10.6 s collection (92
files; a plain ``compile`` of the same files is 0.4 s), in each of the two workers.  pytest reads a cached
rewrite whatever that setting (``_read_pyc`` before ``_rewrite_test`` in ``AssertionRewritingHook.exec_module``),
so writing the cache once here serves every worker and every later run until a file changes.

The rewrite is pytest's own (``_rewrite_test`` with no config: the same code pytest makes where
``enable_assertion_pass_hook`` is off, its default and this project's setting), written the way pytest writes it
(``_write_pyc``: a temporary name, then an atomic rename).  These are pytest internals; where they are missing
(another pytest than ``.ci/constraints.txt`` pins) the cache is not written and the line below says so: the
tests run the same, only slower.  Written: ``tests/``'s caches (as ``compileall`` writes ``src``'s and ``tests``'s)
and the installed pytest plugins' in the virtual environment.
"""

from __future__ import annotations

import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class _NoTrace:
    def trace(self, *_):
        pass


def _cache(path: str) -> bool:
    """Rewrite ``path`` into pytest's cache unless a current rewrite is there; whether it was written."""
    from _pytest.assertion import rewrite

    fn = Path(path)
    pyc = rewrite.get_cache_dir(fn) / (fn.name[:-3] + rewrite.PYC_TAIL)
    if rewrite._read_pyc(fn, pyc) is not None:
        return False
    stat, co = rewrite._rewrite_test(fn, None)
    pyc.parent.mkdir(exist_ok=True)
    return rewrite._write_pyc(_NoTrace(), co, stat, pyc)


def _plugin_files() -> list:
    """The Python files of every installed pytest plugin (a distribution with a ``pytest11`` entry point):
    pytest rewrites the modules of those it loads too (``_mark_plugins_for_rewrite``) -- 73 of hypothesis's at
    every collection here, 1.1 s a process."""
    from importlib import metadata

    files = []
    for dist in metadata.distributions():
        if any(ep.group == "pytest11" for ep in dist.entry_points) and dist.files:
            files += [str(dist.locate_file(f)) for f in dist.files if f.suffix == ".py"]
    return files


def main() -> int:
    files = sorted(str(p) for p in (ROOT / "tests").rglob("*.py")
                   if p.name.startswith("test_") or p.name == "conftest.py")
    files += sorted(f for f in _plugin_files() if os.path.isfile(f))
    try:
        with ProcessPoolExecutor(max(1, min(len(files), os.cpu_count() or 1))) as pool:
            written = sum(pool.map(_cache, files, chunksize=4))
    except (ImportError, AttributeError, TypeError) as e:
        print(f"cache_test_rewrites: pytest's rewrite cache not written ({type(e).__name__}: {e}); the tests run "
              "the same, each pytest process rewriting them again", file=sys.stderr)
        return 0
    if "-v" in sys.argv[1:]:
        print(f"cache_test_rewrites: {written} of {len(files)} test and plugin modules rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
