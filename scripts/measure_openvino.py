"""Measure the OpenVINO output (docs/openvino.md, "Measured"): conversion time, the float error verify reports
in OpenVINO f32, and what OpenVINO's defaults (fp16 weights in ``ov.save_model``, the CPU plugin's default
inference precision) would have given on the same IR and inputs.

    PYTHONPATH=src python scripts/measure_openvino.py [CASE ...]

CASE: a fixture path under fixtures/ (default: a TF1 stack, a 3-layer bidirectional stack, two trained full
models).  Each conversion and verify is a fresh ``python -m gruconv`` process (wall time includes imports).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CASES = ["tf1/layer_80x256", "tf1/layer_3l_bidir", "trained/bilstm.h5", "trained/gru2.h5"]


def cli(*args) -> tuple:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "gruconv", *map(str, args)], capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "3"})
    return r, time.perf_counter() - t0


def feed_for(model, rng, batch=2, steps=50):
    feed = []
    for p in model.inputs:
        shape = [(batch if i == 0 else steps) if d.is_dynamic else d.get_length()
                 for i, d in enumerate(p.get_partial_shape())]
        if p.get_any_name() in ("h0", "c0"):
            shape[1] = batch
        dtype = p.get_element_type().to_dtype()
        feed.append(rng.integers(1, 20, shape).astype(dtype) if np.issubdtype(dtype, np.integer)
                    else rng.uniform(-1, 1, shape).astype(dtype))
    return feed


def main(cases) -> None:
    import openvino as ov

    core = ov.Core()
    print(f"openvino {ov.__version__}; CPU capabilities {core.get_property('CPU', 'OPTIMIZATION_CAPABILITIES')}")
    for case in cases:
        with tempfile.TemporaryDirectory() as td:
            out = Path(td) / "m.xml"
            r, secs = cli("convert", ROOT / "fixtures" / case, out)
            if r.returncode:
                print(case, "convert failed:", r.stderr.strip().splitlines()[-1])
                continue
            v, vsecs = cli("verify", ROOT / "fixtures" / case, out, "--steps", "50", "--json", Path(td) / "v.json")
            rep = json.loads((Path(td) / "v.json").read_text())
            worst = max(c["max_abs"] for c in rep["checks"])
            model = core.read_model(str(out))
            ov.save_model(model, str(Path(td) / "fp16.xml"), compress_to_fp16=True)
            rng = np.random.default_rng(0)
            feed = feed_for(model, rng)
            f32 = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            dflt = core.compile_model(model, "CPU")
            fp16 = core.compile_model(core.read_model(str(Path(td) / "fp16.xml")), "CPU",
                                      {"INFERENCE_PRECISION_HINT": "f32"})
            base = [np.asarray(a) for a in f32(feed).values()]

            def err(c):
                return max(float(np.max(np.abs(np.asarray(a, np.float64) - b))) for a, b in zip(c(feed).values(), base))

            print(f"{case}: convert {secs:.1f} s (process wall), IR {out.stat().st_size + out.with_suffix('.bin').stat().st_size} "
                  f"bytes; verify {'PASS' if rep['passed'] else 'FAIL'} worst max abs {worst:.2e} over "
                  f"{len(rep['checks'])} checks ({vsecs:.1f} s); fp16 weights vs f32 IR {err(fp16):.2e}; "
                  f"default hint ({dflt.get_property('INFERENCE_PRECISION_HINT')}) vs f32 {err(dflt):.2e}")


if __name__ == "__main__":
    main(sys.argv[1:] or CASES)
