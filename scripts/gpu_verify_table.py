"""Run `gruconv verify --reference cudnn` on every fixture and print a Markdown table (GPU session).

Each row: the fixture, the number of checks, the largest |converted - cuDNN| over all checks, the
largest |cuDNN - float64| (the reference's own noise floor), and the verdict at the tolerance.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gruconv.options import Bounds  # noqa: E402
from gruconv.verify import verify # noqa: E402

TOL = 1e-5


def tf1_hints(case: dict) -> dict:
    st = case["stacks"][0]
    if st.get("canonical"):
        return {}
    sh = st["shape"]
    return {"num_units": sh["units"], "num_layers": sh["num_layers"], "variable": st["opaque"]["name"],
            "direction": "bi" if sh["bidirectional"] else "uni", "input_mode": sh["input_mode"]}


def main() -> int:
    rows = []
    keras_manifest = json.loads((ROOT / "fixtures/keras/manifest.json").read_text())["fixtures"]
    for name, entry in sorted(keras_manifest.items()):
        if entry["weights_only"] or not entry["cudnngru_layers"]:
            continue
        rows.append((f"keras/{name}", verify(ROOT / "fixtures/keras" / name, reference="cudnn", bounds=Bounds(tolerance=TOL))))
    tf1_manifest = json.loads((ROOT / "fixtures/tf1/manifest.json").read_text())["cases"]
    for case, entry in sorted(tf1_manifest.items()):
        rows.append((f"tf1/{case}", verify(ROOT / "fixtures/tf1" / case, reference="cudnn", bounds=Bounds(tolerance=TOL),
                                           hints=tf1_hints(entry))))
    env = rows[0][1].environment
    print(f"GPU: {env.get('gpu')}, cuDNN {env.get('cudnn_version')}, CUDA runtime "
          f"{env.get('cuda_runtime_version')}, Keras {env.get('keras')} ({env.get('backend')} backend), "
          f"math: {rows[0][1].math_mode}, tolerance {TOL:g}\n")
    print("| fixture | checks | max abs converted vs cuDNN | max abs cuDNN vs float64 | tolerance | result |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, rep in rows:
        worst = max(c.max_abs for c in rep.checks)
        floor = max((c.reference_error or 0.0) for c in rep.checks)
        tol = max(c.tolerance for c in rep.checks)
        print(f"| {name} | {len(rep.checks)} | {worst:.2e} | {floor:.2e} | {tol:g} | "
              f"{'pass' if rep.passed else 'FAIL'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
