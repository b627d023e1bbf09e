"""An edge file is the user's goal whatever the model holds (``EVERY_MODEL``): a legacy Keras model with no cuDNN
layer is converted to ``.tflite`` / OpenVINO IR without ``--force`` and verified in the target runtime, where the
rescue outputs still say "nothing to convert"; an input gruconv cannot write such a file from is refused in one
line (exit 3), never exit 0 without the file (issue 46 item 4)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import FIXTURES
from gruconv.cli import main as cli

PLAIN = FIXTURES / "keras" / "plain_gru.h5"


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.mark.parametrize("suffix", [".tflite", ".xml"])
def test_a_model_with_no_cudnn_layer_becomes_an_edge_file_and_verifies(suffix, tmp_path):
    out = tmp_path / f"plain{suffix}"
    r = run("convert", PLAIN, out)
    assert r.exit_code == 0 and r.exception is None, r.output
    assert out.is_file() and f"wrote {out}" in r.output
    v = run("verify", PLAIN, out, "--json", tmp_path / "v.json")
    assert v.exit_code == 0, v.output
    rep = json.loads((tmp_path / "v.json").read_text())
    names = [c["name"] for c in rep["checks"]]
    # the file against the model it was made from, and the original (tf_keras) end to end: checked, not skipped
    assert rep["passed"] and any(n.startswith(("LiteRT:", "OpenVINO:")) for n in names), names
    assert any(n.startswith("end to end") for n in names), names


def test_the_rescue_outputs_still_say_nothing_to_convert(tmp_path):
    r = run("convert", PLAIN, tmp_path / "plain.keras")
    assert r.exit_code == 0 and "nothing to convert" in r.output, r.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".tflite", ".xml"])
def test_an_input_no_edge_file_is_written_from_is_refused_not_green(suffix, tmp_path):
    r = run("convert", FIXTURES / "keras3" / "eligible.keras", tmp_path / f"e{suffix}")
    assert r.exit_code == 3 and r.exception is None or isinstance(r.exception, SystemExit), r.output
    assert r.exit_code == 3, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "already a Keras 3 file" in lines[0] and f"e{suffix}" in lines[0], r.output
    assert list(tmp_path.iterdir()) == []
