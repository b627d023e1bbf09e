"""The ``.tflite`` writer over every fixture and user-corpus model (slow tier): each converts to the mobile
profile and to the micro profile, or is refused in one line (exit 2/3, nothing written); every written file
verifies in its runtime(s) (LiteRT; TFLM too for micro)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gruconv.cli import main

pytest.importorskip("ai_edge_litert")
pytest.importorskip("tflite_micro")

FIX = Path(__file__).resolve().parents[2] / "fixtures"


def _inputs() -> list:
    out = []
    for pattern in ("keras/*.h5", "keras_lstm/*.h5", "keras_user/*.h5", "keras_dialects/*.h5", "trained/*.h5",
                    "tf_keras_zip/*.keras", "float16_weights/*.h5"):
        out += sorted(FIX.glob(pattern))
    for folder in ("tf1", "tf1_lstm", "tf24"):
        out += sorted(p for p in (FIX / folder).iterdir() if p.is_dir())
    return [p for p in out if "weights_only" not in p.name]


INPUTS = _inputs()


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["mobile", "micro"])
@pytest.mark.parametrize("src", INPUTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_fixture_converts_and_verifies_or_is_refused(src, profile, tmp_path):
    out = tmp_path / "m.tflite"
    extra = ["--micro", "--timesteps", "6"] if profile == "micro" else []
    r = CliRunner().invoke(main, ["convert", str(src), str(out), *extra])
    if r.exit_code != 0:
        assert r.exit_code in (2, 3), r.output
        errors = [ln for ln in r.output.splitlines() if ln.startswith("gruconv: error:")]
        assert len(errors) == 1, r.output
        assert not any(tmp_path.iterdir()) or "nothing to convert" in r.output
        return
    if not out.exists():  # nothing to convert: said so, nothing written
        assert "nothing to convert" in r.output or "no output written" in r.output, r.output
        return
    v = CliRunner().invoke(main, ["verify", str(src), str(out)])
    assert v.exit_code == 0, v.output
    assert ("TFLM" in v.output) == (profile == "micro")
