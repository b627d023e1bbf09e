#!/usr/bin/env python3
"""Measure ``gruconv.verify.verify`` itself (the wired rule) on the trained fixtures (docs/verdicts.md,
"Wired into verify").  ``correct``: each fixture (full .h5, weights-only .h5 without --config, TF1) at
8/100/400 steps on the CPU against the float64 oracle: max diff, max diff/floor, which bounds decided,
the floor's time against the whole run's.  ``planted``: each planted error of scripts/measure_verdicts.py
in the CLI-converted file (tests/verify/test_verdicts.py's helpers), 8 and 100 steps: how far the worst check is
over its loosest bound.  Usage: ``PYTHONPATH=src .venv/bin/python scripts/measure_verify.py correct|planted``
"""
import sys, time, tempfile, warnings
from pathlib import Path
TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS / "verify"), str(TESTS)]  # test_verdicts (tests/verify/), its conftest (tests/)
warnings.simplefilter("ignore")
import numpy as np
from gruconv.verify import verify
import test_verdicts as T

mode = sys.argv[1]
rows = []
if mode == "correct":
    for steps in (8, 100, 400):
        for fam in T.FAMILIES:
            for form, pat in T.FORMS.items():
                src = T.TRAINED / pat.format(fam)
                t0 = time.perf_counter()
                rep = verify(src, reference="oracle", device="cpu", steps=steps)
                wall = time.perf_counter() - t0
                ratios = [c.max_abs / c.floor for c in rep.checks if c.floor]
                bounds = {}
                for c in rep.checks:
                    bounds[c.bound] = bounds.get(c.bound, 0) + 1
                over = sum(c.max_abs > 1e-5 for c in rep.checks)
                print(f"{fam:6} {form:12} T={steps:<4} checks {len(rep.checks):2} passed {rep.passed} max diff {max(c.max_abs for c in rep.checks):.2e} "
                      f"max diff/floor {max(ratios):.2f} max rel {max(c.max_rel for c in rep.checks):.1e} over1e-5 {over} bounds {bounds} "
                      f"floor {rep.floor_seconds:.2f}s of {wall:.2f}s", flush=True)
else:
    for fam, form, plant in T._PLANTED:
        with tempfile.TemporaryDirectory() as td:
            td = Path(td)
            src = T.TRAINED / T.FORMS[form].format(fam)
            conv = T._converted(src, td)
            bad, cell = T._plant_in(conv, plant, td)
            for steps in (8, 100):
                rep = verify(src, bad, reference="oracle", device="cpu", steps=steps)
                worst = max(rep.checks, key=lambda c: c.max_abs / max(v for v in c.limits.values() if v is not None))
                m = worst.max_abs / max(v for v in worst.limits.values() if v is not None)
                print(f"{fam:6} {form:12} {plant:20} T={steps:<4} passed {rep.passed} worst {worst.name[-28:]:28} diff {worst.max_abs:.2e} "
                      f"over loosest bound x{m:.3g} (tol {worst.limits['tolerance']:.0e} rtol {worst.limits['rtol']:.1e} kfloor {worst.limits['floor']:.1e})", flush=True)
