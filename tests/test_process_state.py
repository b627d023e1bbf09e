"""Collecting the tests leaves the process as it found it: no environment variable set at import, no
hardware probed (issue 31: ``scripts/measure_verdicts.py``, executed while ``test_sensitivity.py`` was
collected, set ``CUDA_VISIBLE_DEVICES=""`` and hid the GPU from a whole ``pytest -m gpu`` run;
``test_cudnn_gpu.py`` loaded libcudart/libcudnn and called ``cudaGetDeviceCount`` at import, in
every process, ``-m 'not gpu'`` included).  Both run pytest in a subprocess: collection state is
per process."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT

TESTS = ROOT / "tests"

# xdist_group (docs/testing.md): the module fixture `planted` (a nested pytest on two workers) runs once.
pytestmark = pytest.mark.xdist_group("test_process_state")


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(TESTS)])}


def test_collection_that_changes_the_environment_fails(tmp_path):
    """The conftest hook (``pytest_make_collect_report``) on a planted module that sets a variable at
    import: the run fails, naming the module and the variable, and a clean module beside it is not
    blamed."""
    (tmp_path / "test_clean.py").write_text("def test_ok():\n    pass\n")
    (tmp_path / "test_planted.py").write_text(textwrap.dedent("""\
        import os
        os.environ.setdefault("GRUCONV_PLANTED_AT_IMPORT", "1")

        def test_ok():
            pass
        """))
    env = {k: v for k, v in _env().items() if k != "GRUCONV_PLANTED_AT_IMPORT"}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
                        "--rootdir", str(tmp_path), str(tmp_path)],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert p.returncode != 0, p.stdout
    assert "collecting test_planted.py changed os.environ: GRUCONV_PLANTED_AT_IMPORT (" in p.stdout, p.stdout
    assert "ERROR collecting test_planted.py" in p.stdout and "1 error" in p.stdout
    assert "test_clean.py" not in p.stdout


_COLLECT = """
import os, sys
import pytest
before = dict(os.environ)
rc = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "-m", "gpu or not gpu", *sys.argv[1:]])
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
lib = sys.modules.get("gruconv.verify.reference.cudnn_lib")
probed = lib is not None and (lib._STATE is not None or lib._STATE_ERROR is not None)
print("RESULT", rc, changed, probed)
"""


def test_collecting_the_gpu_tests_probes_nothing_and_changes_nothing():
    """The reproduction of issue 31: collecting the GPU tests with the sensitivity harness used to leave
    ``CUDA_VISIBLE_DEVICES=''``; now nothing changes and cuDNN is never loaded while collecting."""
    env = {k: v for k, v in _env().items() if k != "CUDA_VISIBLE_DEVICES"}
    files = ["tests/verify/test_sensitivity.py", "tests/verify/test_cudnn_gpu.py",
             "tests/eligibility/test_eligibility_gpu.py", "tests/verify/test_gpu_path.py"]
    p = subprocess.run([sys.executable, "-c", _COLLECT, *files], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=300)
    assert "RESULT 0 [] False" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]


#: The planted suite of the two tests below, run once on two xdist workers (``planted``): three modules for the
#: budget table, and two with the same module fixture, one marked ``xdist_group`` and one not.
PLANTED = {
    "test_sleeps.py": "import time, pytest\n@pytest.fixture(scope='module')\ndef built():\n    time.sleep(1.0)\n"
                      "@pytest.mark.parametrize('n', range(3))\ndef test_a(built, n):\n    pass\n",
    "test_child_burns.py": textwrap.dedent("""\
        import subprocess, sys
        def test_b():
            subprocess.run([sys.executable, "-c",
                            "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.6: pass"],
                           check=True)
        """),
    "test_quick.py": "def test_c():\n    pass\n\ndef test_d():\n    pass\n",
}
GROUPED = textwrap.dedent("""\
    import os, time, pytest
    {mark}
    @pytest.fixture(scope="module")
    def shared():
        with open({log!r}, "a") as f:
            f.write(str(os.getpid()) + "\\n")
        time.sleep(0.3)

    @pytest.mark.parametrize("n", range(8))
    def test_uses(shared, n):
        with open({log!r} + ".tests", "a") as f:
            f.write(f"{{os.getpid()}} {{time.time()}}\\n")
        while True:
            rows = [ln.split() for ln in open({log!r} + ".tests").read().splitlines()]
            if len({{pid for pid, _ in rows}}) >= 2 or time.time() > min(float(t) for _, t in rows) + ({wait}):
                break
            time.sleep(0.05)
    """)


def _pytest(root, *args) -> str:
    """pytest on the planted suite in ``root``, with the suite's own conftest (``tests/module_budget.py``)."""
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest",
                        "--rootdir", str(root), *args, str(root)],
                       capture_output=True, text=True, env=_env(), cwd=root, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """``(root, stdout)`` of the planted suite run on two workers with ``--dist loadgroup`` (one run serves both
    tests below: each nested pytest on two workers is three interpreters)."""
    root = tmp_path_factory.mktemp("planted")
    for name, text in PLANTED.items():
        (root / name).write_text(text)
    # the ungrouped module's tests wait until both workers have run one of them (at most 30 s after the first began,
    # all eight together): which worker is free when they are handed out is timing, and under load one worker once
    # took all eight (the property then vacuous)
    for name, mark, wait in (("grouped", 'pytestmark = pytest.mark.xdist_group("g")', 0), ("ungrouped", "", 30)):
        (root / f"test_{name}.py").write_text(GROUPED.format(mark=mark, log=str(root / f"{name}.log"), wait=wait))
    return root, _pytest(root, "-n", "2", "--dist", "loadgroup")


def test_xdist_groups_keep_a_module_on_one_worker(planted):
    """``make test`` relies on ``--dist loadgroup`` to build an ``xdist_group`` module's batched module
    fixture once (``test_streaming_writer``, ``test_tf1_h5_weights``, ``test_user_models``, ...).  With
    pytest 9.2 and pytest-xdist 3.8 the mark silently stopped working (pytest-dev/pytest-xdist#1386) and
    each fixture ran on both workers, ~90 s of the quick tier; ``.ci/constraints.txt`` pins pytest
    below 9.2.  A planted grouped module beside the same module ungrouped, on two workers: the grouped fixture
    is set up in one process only, the ungrouped one in both (so the property is not vacuous)."""
    root, _ = planted
    assert len(set((root / "grouped.log").read_text().split())) == 1
    assert len(set((root / "ungrouped.log").read_text().split())) == 2


def test_every_run_lists_its_slowest_modules(planted):
    """The quick tier's budget in every run's output (issue 47 item 1; ``tests/module_budget.py``, loaded
    by ``tests/conftest.py``): a planted suite run with the suite's own conftest, on two xdist workers and
    in one process.  The modules are ranked by their summed time (a module fixture's set-up included), a
    module that burns CPU in a child shows it in the CPU column and one that sleeps does not, the option
    bounds the list, and with workers each one's sum is printed."""
    root, out = planted

    def rows(out: str) -> dict:
        head = out.index("test modules (setup + call + teardown summed")
        table = {}
        for line in out[head:].splitlines()[2:]:
            parts = line.split()
            if len(parts) != 4 or not parts[3].startswith("test_"):
                break
            table[parts[3]] = (float(parts[0]), float(parts[1]), int(parts[2]))
        return table, out[head:]

    table, text = rows(out)
    assert sorted(table) == sorted([*PLANTED, "test_grouped.py", "test_ungrouped.py"]), text
    assert list(table).index("test_sleeps.py") < list(table).index("test_quick.py"), text   # ranked by time
    assert table["test_sleeps.py"][0] >= 1.0 and table["test_sleeps.py"][2] == 3, text
    assert table["test_child_burns.py"][1] >= 0.5, text   # the child's CPU is charged to its test
    assert table["test_sleeps.py"][1] < 0.5, text         # sleeping costs none
    assert "all 5 modules" in text and "per worker (summed wall s of its tests): gw0 " in text and " gw1 " in text

    run = functools.partial(_pytest, root)
    table, text = rows(run("-n", "0", "--slowest-modules", "1", "-k", "not test_b and not test_uses"))
    assert list(table) == ["test_sleeps.py"] and "all 2 modules" in text, text
    assert "per worker" not in text


def test_the_rewrite_cache_make_writes_is_the_one_pytest_reads(tmp_path):
    """``make test`` writes pytest's assertion-rewriting cache first (``scripts/cache_test_rewrites.py``): under
    ``PYTHONDONTWRITEBYTECODE`` pytest never writes it, and each worker rewrote every module at collection (3.6 of
    its 10.6 s).  A planted module: with the cache written, pytest (that variable set) loads the cached rewrite;
    without, it rewrites.  Either way an assertion still says what it compared."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cache_test_rewrites", ROOT / "scripts" / "cache_test_rewrites.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    test = tmp_path / "test_planted.py"
    test.write_text("def test_x():\n    left = [1, 2]\n    assert left == [1, 3]\n")

    def run() -> tuple:
        log = tmp_path / "debug.log"
        p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--debug={log}",
                            "--rootdir", str(tmp_path), str(test)], capture_output=True, text=True,
                           env={**_env(), "PYTHONDONTWRITEBYTECODE": "1"}, cwd=tmp_path, timeout=300)
        assert p.returncode == 1 and "assert [1, 2] == [1, 3]" in p.stdout, p.stdout + p.stderr
        return log.read_text()

    assert script._cache(str(test)) is True and script._cache(str(test)) is False  # written once, then current
    assert f"found cached rewritten pyc for {test}" in run()
    for pyc in (tmp_path / "__pycache__").glob("*-pytest-*.pyc"):
        pyc.unlink()
    text = run()
    assert f"rewriting {test!r}" in text and f"found cached rewritten pyc for {test}" not in text
