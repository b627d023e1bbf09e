"""Render the README's example verify page (docs/img/verify-report.png): a trained two-layer GRU
verified over 100 steps, converted once correctly and once with a planted error (the second layer's
recurrent bias dropped), both checks on one page so a PASS and a FAIL curve show side by side.

    PYTHONPATH=src python scripts/render_report_example.py /tmp/verify-report.html
    chromium --headless --screenshot=docs/img/verify-report.png --window-size=940,1050 --no-sandbox --hide-scrollbars /tmp/verify-report.html
"""

import sys
import tempfile
from pathlib import Path

import numpy as np

from gruconv import api
from gruconv.keras3.runtime import keras
from gruconv.report_html import verify_page
from gruconv.verify import verify


def main(out: str, model: str = "fixtures/trained/gru2.h5", steps: int = 100) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        good = Path(tmp) / "gru2.keras"
        api.convert(model, good)
        m = keras().saving.load_model(good)
        rnns = [l for l in m.layers if l.__class__.__name__ == "GRU"]
        k, rk, b = rnns[-1].get_weights()
        rnns[-1].set_weights([k, rk, np.stack([b[0], np.zeros_like(b[1])])])  # planted: recurrent bias dropped
        bad = Path(out).with_name("gru2-planted-error.keras")
        m.save(bad)
        rep = verify(model, bad, steps=steps, reference="oracle")
    Path(out).write_text(verify_page(rep.to_json()), encoding="utf-8")
    print(f"{out}: parity {'PASS' if rep.passed else 'FAIL'}")


if __name__ == "__main__":
    main(*sys.argv[1:])
