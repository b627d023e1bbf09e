"""Collecting the tests leaves the process as it found it: no environment variable set at import, no
hardware probed (issue 31: ``scripts/measure_verdicts.py``, executed while ``test_sensitivity.py`` was
collected, set ``CUDA_VISIBLE_DEVICES=""`` and hid the GPU from a whole ``pytest -m gpu`` run;
``test_cudnn_gpu.py`` loaded libcudart/libcudnn and called ``cudaGetDeviceCount`` at import, in
every process, ``-m 'not gpu'`` included).  Both run pytest in a subprocess: collection state is
per process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from conftest import ROOT

TESTS = ROOT / "tests"


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
    files = ["tests/test_sensitivity.py", "tests/test_cudnn_gpu.py", "tests/test_eligibility_gpu.py",
             "tests/test_gpu_path.py"]
    p = subprocess.run([sys.executable, "-c", _COLLECT, *files], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=300)
    assert "RESULT 0 [] False" in p.stdout, p.stdout[-3000:] + p.stderr[-3000:]
