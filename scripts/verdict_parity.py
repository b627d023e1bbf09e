#!/usr/bin/env python3
"""Verdicts of ``gruconv verify`` on every fixture, as JSON, for a before/after comparison of a change
that must not move a verdict (issue 30: verify speed work).

For each fixture input: ``verify(IN)`` (the in-memory model), ``verify(IN, CONVERTED)`` (CONVERTED written
by ``convert IN tmp/out.keras`` of the same tree) and ``convert IN --verify``'s own report (its default
reference), CPU, float64 oracle, default batch/steps/seed; the report's
JSON without its timing field (``floor_seconds``), or the error's class and message.  One process per
backend (``KERAS_BACKEND``); run it once per tree and diff:

    PYTHONPATH=/work/main/src KERAS_BACKEND=jax python scripts/verdict_parity.py before-jax.json
    PYTHONPATH=src            KERAS_BACKEND=jax python scripts/verdict_parity.py after-jax.json
    python scripts/verdict_parity.py --diff before-jax.json after-jax.json
"""
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(os.environ.get("GRUCONV_FIXTURES") or Path(__file__).resolve().parents[1] / "fixtures")


def inputs() -> list:
    out = []
    for d in ("keras", "keras_lstm", "keras_user", "keras_custom", "keras3", "tf_keras_zip", "float16_weights",
              "trained"):
        out += sorted(p for p in (ROOT / d).iterdir() if p.suffix in (".h5", ".keras"))
    for d in ("tf1", "tf1_lstm", "tf2"):
        out += sorted(p for p in (ROOT / d).iterdir() if p.is_dir())
    out += sorted(p for p in (ROOT / "trained").iterdir() if p.suffix == ".tf1")
    return out


def strip(rep: dict) -> dict:
    rep.pop("floor_seconds", None)
    for key in ("input", "converted"):
        if rep.get(key):
            rep[key] = Path(rep[key]).name
    return rep


def run(out_path: str) -> None:
    warnings.simplefilter("ignore")
    from gruconv import api
    from gruconv.errors import GruconvError

    results = {}
    for src in inputs():
        name = str(src.relative_to(ROOT))
        with tempfile.TemporaryDirectory() as td:
            for mode in ("in-memory", "converted", "convert --verify"):
                try:
                    conv = None
                    if mode == "convert --verify":  # convert's own verify (after its check-load)
                        res = api.convert(src, Path(td) / "v.keras", verify=True)
                        results[f"{name} {mode}"] = strip(dict(res.verification or {"verification": None}))
                    else:
                        if mode == "converted":
                            conv = Path(td) / "out.keras"
                            api.convert(src, conv)
                        rep = api.verify(src, conv, reference="oracle", device="cpu")
                        results[f"{name} {mode}"] = strip(rep.to_json())
                except GruconvError as e:
                    results[f"{name} {mode}"] = {"error": type(e).__name__, "message": str(e).replace(td, "TMP")}
                Path(out_path).write_text(json.dumps(results, indent=1, sort_keys=True, default=str))
                print(name, mode, results[f"{name} {mode}"].get("passed", results[f"{name} {mode}"].get("error")),
                      flush=True)
    Path(out_path).write_text(json.dumps(results, indent=1, sort_keys=True, default=str))


def diff(a_path: str, b_path: str) -> int:
    a, b = json.loads(Path(a_path).read_text()), json.loads(Path(b_path).read_text())
    bad = 0
    keys = set(a) | set(b) if "--partial" not in sys.argv else set(a) & set(b)  # --partial: runs in both
    for key in sorted(keys):
        if a.get(key) != b.get(key):
            bad += 1
            print("DIFFERS:", key)
    print(f"{len(a)} / {len(b)} runs, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "--diff":
        sys.exit(diff(sys.argv[2], sys.argv[3]))
    run(sys.argv[1])
