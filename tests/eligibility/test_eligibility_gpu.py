"""The static cuDNN verdicts (gruconv.eligibility) equal the kernel Keras takes on a GPU (issue 22).

Run on a GPU machine: ``pytest -m gpu tests/eligibility/test_eligibility_gpu.py``.  Each backend runs in its own
subprocess (``KERAS_BACKEND`` is fixed at import): torch and JAX always; TensorFlow when it is installed
and sees a GPU.  The subprocess (``tests/eligibility_probe.py``) builds or loads every case, runs it on
the GPU and records which kernel each recurrent layer took; this file evaluates the *same* model config
with the static rules and asserts the two agree, layer by layer.  Every rule of ``eligibility.RULES`` is
covered by at least one case that fails it (checked below), so a wrong rule fails this file.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES
from gruconv import eligibility as el

pytestmark = pytest.mark.gpu

HERE = Path(__file__).resolve().parents[1]  # tests/: the support modules
K3 = FIXTURES / "keras3"


def _cases():
    cases = []
    for layer in ("GRU", "LSTM"):
        flips = [("base", {}), ("relu", {"activation": "relu"}),
                 ("hard_sigmoid", {"recurrent_activation": "hard_sigmoid"}), ("unroll", {"unroll": True}),
                 ("no_bias", {"use_bias": False}), ("recurrent_dropout", {"recurrent_dropout": 0.2}),
                 ("use_cudnn_false", {"use_cudnn": False})]
        if layer == "GRU":
            flips.append(("reset_before", {"reset_after": False}))
        for name, kw in flips:
            cases.append({"id": f"{layer.lower()}_{name}", "layer": layer, "kwargs": kw})
        cases.append({"id": f"{layer.lower()}_mask", "layer": layer, "kwargs": {}, "mask": True})
        cases.append({"id": f"{layer.lower()}_bidir", "layer": layer, "kwargs": {}, "wrap": "Bidirectional"})
        cases.append({"id": f"{layer.lower()}_bidir_dropout", "layer": layer, "kwargs": {"dropout": 0.1},
                      "wrap": "Bidirectional"})
        cases.append({"id": f"{layer.lower()}_bidir_mask", "layer": layer, "kwargs": {}, "mask": True,
                      "wrap": "Bidirectional"})
        cases.append({"id": f"{layer.lower()}_td", "layer": layer, "kwargs": {}, "wrap": "TimeDistributed"})
        cases.append({"id": f"{layer.lower()}_cell", "layer": layer, "kwargs": {}, "wrap": "RNNCell"})
    for name in ("eligible", "mixed", "masked_text", "nested", "wrappers"):  # fixtures/make_keras3_fixtures.py
        cases.append({"id": f"model_{name}", "builder": name})
    # the saved files, when present.  (Not the tf_keras legacy .h5 files: Keras 3.15.1 load_model refuses
    # them, "Unrecognized keyword arguments passed to GRU: {'time_major': False}".)
    for p in sorted(K3.glob("*.keras")):
        cases.append({"id": f"file_{p.name}", "path": str(p)})
    return cases


CASES = _cases()


def _backends():
    out = ["torch", "jax"]
    if importlib.util.find_spec("tensorflow") is not None:
        out.append("tensorflow")
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{backend: probe output} - one subprocess per backend, all cases in it."""
    tmp = tmp_path_factory.mktemp("elig")
    cases = tmp / "cases.json"
    cases.write_text(json.dumps(CASES))
    out = {}
    for be in _backends():
        dest = tmp / f"{be}.json"
        env = dict(os.environ, KERAS_BACKEND=be, XLA_PYTHON_CLIENT_PREALLOCATE="false",
                   TF_CPP_MIN_LOG_LEVEL="3")
        proc = subprocess.run([sys.executable, str(HERE / "eligibility_probe.py"), str(cases), str(dest)],
                              env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{be} probe failed:\n{proc.stderr[-3000:]}"
        out[be] = json.loads(dest.read_text())
    return out


def _static(config) -> dict:
    rep = el.evaluate(config)
    return {e["path"].rsplit("/", 1)[-1]: e for e in rep["layers"]}


def test_every_rule_is_exercised_by_a_case():
    """Each (backend, rule) fails in at least one case, else the GPU comparison would not test it."""
    failed = set()
    for case in CASES:
        if "path" in case or "builder" in case:
            continue
        fields = el._defaults(case["layer"], case["kwargs"], legacy=False)
        for be in el.BACKENDS:
            v = el.verdict_for(case["layer"], fields, be, bool(case.get("mask")))
            failed |= {(be, case["layer"], f["rule"]) for f in v["failing"]}
    want = {(r["backend"], cls, r["id"]) for r in el.RULES for cls in r["layers"]}
    assert want <= failed, sorted(want - failed)


@pytest.mark.parametrize("backend", _backends())
@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_static_verdict_equals_observed_kernel(runs, backend, case):
    rec = runs[backend][case["id"]]
    assert rec["error"] is None, rec["error"]
    static = _static(rec["config"])
    assert static, f"no recurrent layer found statically in {case['id']}"
    assert set(static) == set(rec["observed"]), (sorted(static), rec["observed"])
    for key, entry in static.items():
        want = entry["backends"][backend]["verdict"]
        got = rec["observed"][key]
        assert got == [want], (f"{case['id']} {key} on {backend}: static {want} "
                               f"(failing {entry['backends'][backend]['failing']}), observed {got}; "
                               f"events {rec.get('events')}")
