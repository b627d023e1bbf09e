"""Verdict rules of ``verify`` (issue 12), on the CPU: what counts, what is only shown, what never passes.

The GPU rows themselves are exercised on a GPU machine (``tests/test_gpu_path.py``); here the rules that
turn rows into a verdict and a report, and what a machine without a usable GPU says.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, planted_error_copy
from gruconv import report
from gruconv.cli import main
from gruconv.verify import Check, VerifyReport
from gruconv.verify import compare as _compare


def _report(*checks) -> VerifyReport:
    rep = VerifyReport(input="m.h5", converted=None, reference="oracle", reference_reason="requested",
                       tolerance=1e-5, math_mode="float64", seed=0, batch=2, steps=8)
    rep.checks.extend(checks)
    return rep


def _check(name, max_abs, *, device="cpu", counts=True, tol=1e-5):
    return Check(name, max_abs, max_abs, tol, max_abs <= tol, 0.0, (2, 8, 4), device=device, counts=counts)


def test_default_math_rows_are_shown_but_never_decide():
    rep = _report(_check("g: sequence", 1e-7), _check("g: sequence", 2e-7, device="gpu strict"),
                  _check("g: sequence", 3e-3, device="gpu default", counts=False))
    assert rep.passed
    text = report.verify_text(rep.to_json())
    assert "(info) over" in text and "parity: PASS (2/2 checks" in text
    rep.checks[1] = _check("g: sequence", 2e-5, device="gpu strict")  # strict GPU math does decide
    assert not rep.passed


def test_nonfinite_outputs_never_pass_even_when_equal():
    got = np.array([[np.nan, 1.0]])
    c = _compare("g: sequence", got, got.copy(), got.copy(), 1e-5, "float32")
    assert not c.passed and c.nonfinite == 2 and "never a pass" in c.reason
    assert not _report(c).passed


def test_float16_floor_is_applied_and_said():
    c = _compare("g: sequence", np.full((1, 2), 1e-3), np.zeros((1, 2)), np.zeros((1, 2)), 1e-5, "float16")
    assert c.passed and c.tolerance == pytest.approx(4e-3)
    text = report.verify_text(_report(c).to_json())
    assert "tolerance applied 0.004 (float16 checks use the float16 floor, not the requested 1e-05)" in text


def test_shape_mismatch_fails_with_a_reason():
    c = _compare("g: sequence", np.zeros((2, 3)), np.zeros((2, 4)), None, 1e-5, "float32")
    assert not c.passed and "shape (2, 3) where the reference has (2, 4)" in c.reason


def test_no_gpu_here_auto_says_why_and_gpu_refuses_in_one_line(tmp_path):
    src = str(FIXTURES / "keras" / "sequential.h5")
    res = CliRunner().invoke(main, ["verify", src, "--reference", "oracle", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert "note: GPU path not run: " in res.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert {c["device"] for c in data["checks"]} == {"cpu"}
    assert data["devices"] and data["devices"][0]["ran"] is False and data["devices"][0]["reason"]
    res = CliRunner().invoke(main, ["verify", src, "--reference", "oracle", "--device", "gpu"])
    assert res.exit_code == 3
    assert res.output.count("gruconv: error:") == 1 and "--device gpu: the " in res.output


def test_inputs_file_sets_batch_and_steps_in_the_report(tmp_path):
    src = FIXTURES / "keras" / "sequential.h5"
    x = np.random.default_rng(0).uniform(-1, 1, (5, 11, 6)).astype("float32")
    np.savez(tmp_path / "x.npz", x=x)
    res = CliRunner().invoke(main, ["verify", str(src), "--reference", "oracle", "--device", "cpu",
                                    "--inputs", str(tmp_path / "x.npz"), "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert (data["batch"], data["steps"]) == (5, 11)
    assert "inputs batch 5 x steps 11" in res.output


def test_bad_inputs_are_usage_errors_in_one_line(tmp_path):
    src = FIXTURES / "keras" / "time_distributed.h5"  # Embedding(20, 6): token ids 0..19
    np.savez(tmp_path / "ids.npz", x=np.full((2, 5), 25, dtype="int32"))
    res = CliRunner().invoke(main, ["verify", str(src), "--reference", "oracle", "--device", "cpu",
                                    "--inputs", str(tmp_path / "ids.npz")])
    assert res.exit_code == 2, res.output
    assert res.output.count("gruconv: error:") == 1 and "outside the Embedding vocabulary 0..19" in res.output
    np.savez(tmp_path / "shape.npz", x=np.zeros((2, 5, 7), dtype="float32"))
    res = CliRunner().invoke(main, ["verify", str(FIXTURES / "keras" / "sequential.h5"), "--reference", "oracle",
                                    "--device", "cpu", "--inputs", str(tmp_path / "shape.npz")])
    assert res.exit_code == 2 and "has shape (2, 5, 7)" in res.output


def test_a_parity_failure_says_so_on_stderr_once(tmp_path):
    """A converted file with one recurrent weight changed: exit 1, the table on stdout, one error line."""
    src = FIXTURES / "keras" / "sequential.h5"
    bad = planted_error_copy(src, tmp_path)
    res = CliRunner().invoke(main, ["verify", str(src), str(bad), "--reference", "oracle",
                                    "--device", "cpu"])
    assert res.exit_code == 1
    assert "parity: FAIL" in res.output
    assert res.output.count("gruconv: error:") == 1 and "parity FAIL, " in res.output
