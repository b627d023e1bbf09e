"""verify of a graph holding cuDNN ops: its two conversions (the CPU SavedModel and the whole graph as ONNX)
against each other on every serving_default output (:mod:`gruconv.verify.tfgraph`), beside each node's check
against the reference."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, assert_parity_failure
from gruconv.cli import main
from gruconv.model import target_gates

pytestmark = pytest.mark.xdist_group("test_graph_cross_check")

LABEL = "end to end (SavedModel vs ONNX)"


def run(*args):
    """The CLI in-process; no exception may escape it (an exit code is gruconv's own)."""
    res = CliRunner().invoke(main, [str(a) for a in args])
    escaped = res.exception if not isinstance(res.exception, (SystemExit, type(None))) else None
    assert escaped is None, f"{type(escaped).__name__}: {escaped}"
    return res


def _rows(path) -> dict:
    return {c["name"]: c for c in json.loads(path.read_text())["checks"]}


@pytest.mark.parametrize("src, outputs", [
    (FIXTURES / "graphs" / "keras3_export", ["output_0"]),
    (FIXTURES / "graphs_golden" / "lstm_2l_bidir_varlen_v3_bt.pb", ["cy", "hy", "y"]),
])
def test_verify_compares_every_output_of_the_two_conversions(tmp_path, src, outputs):
    res = run("verify", src, "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    rows = _rows(tmp_path / "r.json")
    assert sorted(k[len(LABEL) + 2:] for k in rows if k.startswith(LABEL)) == outputs
    assert all(rows[f"{LABEL}: {k}"]["passed"] for k in outputs)


def test_a_planted_error_in_the_onnx_output_fails_the_cross_check(tmp_path, monkeypatch):
    """An ONNX output with gate blocks left in cuDNN's order: each node's check (the SavedModel replacement
    against the reference) passes, the cross-check fails, exit 1."""
    src, bad = FIXTURES / "graphs_golden" / "gru_2l_uni_v2.pb", tmp_path / "bad.onnx"
    monkeypatch.setitem(target_gates.TARGET_GATE_NAMES["onnx"], "gru", target_gates.CELLS["gru"].gates)
    assert run("convert", src, bad).exit_code == 0
    monkeypatch.undo()
    res = run("verify", src, bad, "--json", tmp_path / "r.json")
    assert_parity_failure(res)
    failed = sorted(k for k, c in _rows(tmp_path / "r.json").items() if not c["passed"])
    assert failed == [f"{LABEL}: hy", f"{LABEL}: y"], failed


def test_without_tf2onnx_the_report_says_what_was_not_checked(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "tf2onnx", None)  # import tf2onnx: ModuleNotFoundError, as uninstalled
    res = run("verify", FIXTURES / "graphs_golden" / "gru_1l_uni_v1.pb", "--json", tmp_path / "r.json")
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert not any(c["name"].startswith(LABEL) for c in report["checks"])
    assert any(n.startswith(f"{LABEL}: not checked, tf2onnx is not installed") for n in report["notes"]), report["notes"]
