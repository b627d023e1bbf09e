"""Shared test fixtures: paths to the golden cuDNN data and the committed fixture files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"

# Every run ends with its slowest test modules, wall and CPU seconds (issue 47: the quick tier's budget,
# visible to whoever spends it); the hooks live in tests/module_budget.py, registered here by name.
from module_budget import (pytest_addoption, pytest_configure, pytest_runtest_call,  # noqa: E402,F401
                           pytest_runtest_logreport, pytest_runtest_makereport, pytest_runtest_setup,
                           pytest_runtest_teardown, pytest_terminal_summary)


# --------------------------------------------------------------------------- process-wide state

def environ_changes(before: dict) -> list:
    """The names of the environment variables that differ from ``before`` (added, removed, changed)."""
    return sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Collecting a test module must not change ``os.environ``: one that did (``scripts/
    measure_verdicts.py``'s ``CUDA_VISIBLE_DEVICES=""``, executed when ``test_sensitivity.py`` was
    collected) changed it for every test of the process, and hid the GPU from a whole ``pytest -m
    gpu`` run (issue 31).  Such a module is a collection error naming the variables (values are not
    shown); set them in a fixture with ``monkeypatch.setenv`` or in a script's ``__main__`` path.
    Works under xdist too (each worker's collection error fails the run); proven on a planted module
    by ``tests/test_process_state.py``."""
    before = dict(os.environ)
    outcome = yield
    changed = environ_changes(before)
    if changed:
        rep = outcome.get_result()
        if rep.outcome != "failed":
            rep.outcome = "failed"
            rep.longrepr = (f"collecting {collector.nodeid or collector.name} changed os.environ: "
                            f"{', '.join(changed)} (tests set variables with monkeypatch.setenv in a fixture; "
                            "nothing is set at import)")


def assert_parity_failure(result) -> None:
    """Exit 1 because verification found the numbers differ, never because something crashed.

    Click's ``CliRunner`` reports an exception that escaped the command as ``exit_code == 1`` (with
    ``result.exception`` that exception), the same code as a parity failure; a real process that
    dies of an uncaught exception exits 1 too.  So exit 1 alone proves nothing: the exit must be
    gruconv's own (``sys.exit``, i.e. a ``SystemExit``, or a process's return code), with no
    traceback and the parity line on stderr (``parity FAIL`` from single mode, ``outside tolerance``
    from a batch record).  Takes a ``click.testing.Result`` or a ``subprocess.CompletedProcess``."""
    import re
    import subprocess

    if isinstance(result, subprocess.CompletedProcess):
        code, err, out = result.returncode, result.stderr, result.stdout
        err = err.decode("utf-8", "replace") if isinstance(err, bytes) else err
        out = out.decode("utf-8", "replace") if isinstance(out, bytes) else out
    else:
        assert result.exception is None or isinstance(result.exception, SystemExit), \
            f"an exception escaped the command: {result.exception!r}"
        code, err, out = result.exit_code, result.stderr, result.stdout
    assert code == 1, f"exit {code}, expected 1 (parity failure): {err[-2000:]}"
    assert "Traceback" not in err and "Traceback" not in (out or ""), err[-2000:]
    assert re.search(r"parity FAIL|outside tolerance", err), f"no parity-failure line on stderr: {err[-2000:]}"


def golden_dir() -> Path:
    """The real-cuDNN golden files: ``fixtures/cudnn-golden`` (a byte-identical copy of
    ``shared/cudnn-golden``, so a clone or an sdist runs its tests alone; ``test_oracle.py`` checks
    the copy against ``../shared`` where that exists)."""
    env = os.environ.get("GRUCONV_GOLDEN_DIR")
    for cand in ([Path(env)] if env else []) + [FIXTURES / "cudnn-golden",
                                                  ROOT.parent / "shared" / "cudnn-golden",
                                                  ROOT / "shared" / "cudnn-golden",
                                                  ROOT / ".golden"]:
        if cand.is_dir() and any(cand.glob("*.npz")):
            return cand
    raise RuntimeError("shared/cudnn-golden not found: set GRUCONV_GOLDEN_DIR")


GOLDEN_FILES = sorted(p.name for p in golden_dir().glob("*.npz"))


def load_golden(name: str) -> dict:
    with np.load(golden_dir() / name) as d:
        out = {k: d[k] for k in d.files}
    out["config"] = json.loads(str(out["config"]))
    return out


@pytest.fixture(params=GOLDEN_FILES)
def golden(request) -> dict:
    g = load_golden(request.param)
    g["file"] = request.param
    return g


def planted_error_copy(src: Path, tmp_path: Path) -> Path:
    """``src`` converted, then one recurrent weight of its first GRU moved by 0.05 and saved again: a
    conversion error every numerical check must catch."""
    from gruconv import api
    from gruconv.keras3 import runtime as keras3

    out = tmp_path / "planted_ok.keras"
    api.convert(src, out)
    k = keras3.keras()
    model = k.saving.load_model(out)
    gru = next(l for l in model.layers if isinstance(l, k.layers.GRU))
    w = [np.array(keras3.to_numpy(v)) for v in gru.weights]
    w[1][0, 0] += 0.05
    gru.set_weights(w)
    bad = tmp_path / "planted_bad.keras"
    model.save(bad)
    return bad
