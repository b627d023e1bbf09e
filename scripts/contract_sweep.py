"""Systematic sweep of the output contract ("exit 0 iff keras.saving.load_model opens the output").

Where ``make fuzz`` samples mutations at random, this enumerates them: every fixture of the contract
corpus (``tests/contract_cases.CORPUS``) x every value slot of its config (the generative test's
``_slots``) x every plant of ``PLANTS``, each converted in-process by the CLI and, when it exits 0,
loaded with plain ``load_model`` (TensorFlow backend).  By default one fixture stands for each (layer
class, argument, inside a wrapper or not); ``--every-fixture`` takes them all (~63,000 cases).  A counterexample is a convert that exits 0 with
an output Keras refuses, an exit other than 0 or 3, an exception escaping the CLI, or the other way
round a refusal by the value table (``keras3/validate``) of an output TensorFlow's Keras loads once
the table is switched off.

    .venv/bin/python scripts/contract_sweep.py [--shard K/N] [--limit N] > sweep.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "src")]
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shard", default="1/1")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--every-fixture", action="store_true",
                    help="every (fixture, slot); default: one fixture per (class, argument, wrapped or not)")
    args = ap.parse_args()
    k, n = map(int, args.shard.split("/"))

    sys.path.insert(0, str(ROOT / "tests" / "keras3"))
    import contract_cases as cases
    from test_contract_generative import CONFIGS, PLANTS, SLOTS, _convert

    from gruconv.keras3 import validate

    slots, seen = [], set()
    for src in sorted(CONFIGS):
        found = list(cases.layers(CONFIGS[src]))
        wrapped = {id(l["config"].get(k)) for l in found for k in ("layer", "backward_layer")
                   if isinstance(l.get("config"), dict)}
        for i, key, sub in SLOTS[src]:
            what = (found[i].get("class_name"), key, sub, id(found[i]) in wrapped)
            if args.every_fixture or what not in seen:
                seen.add(what)
                slots.append((src, (i, key, sub)))
    todo = [(src, slot, j) for src, slot in slots for j in range(len(PLANTS))]
    todo = todo[k - 1::n]
    if args.limit:
        todo = todo[:args.limit]
    bad = 0
    unsure: list = []  # refused by the table, loaded by TensorFlow's Keras: asked of JAX and torch at the end
    keep_dir = tempfile.mkdtemp(prefix="gruconv-sweep-unsure-")
    for idx, (src, (i, key, sub), j) in enumerate(todo):
        config = json.loads(json.dumps(CONFIGS[src]))
        layer = list(cases.layers(config))[i]
        holder = layer["config"] if sub is None else layer["config"][key]["config"]
        holder[key if sub is None else sub] = PLANTS[j]
        with tempfile.TemporaryDirectory(prefix="gruconv-sweep-") as td:
            td = Path(td)
            out = td / "out.keras"
            code, output, escaped = _convert(cases.write_config(src, td / "in.h5", config), out)
            why = None
            if code == 0 and out.exists():
                why = cases.load_verdict(out)
            problem = (f"escaped {escaped!r}" if escaped is not None else
                       f"exit {code}" if code not in (0, 3) else
                       f"exit 0, load refuses: {why}" if why else None)
            if problem is None and code == 3 and "load_model would refuse it" in output \
                    and "would refuse it on " not in output:
                # the other direction: a refusal the value table made must be one Keras makes too
                original = validate.check_model
                validate.check_model = lambda doc: None
                try:
                    code2, _, _ = _convert(td / "in.h5", td / "unchecked.keras")
                finally:
                    validate.check_model = original
                if code2 == 0 and cases.load_verdict(td / "unchecked.keras") is None:  # JAX or torch, then?
                    kept = Path(keep_dir) / f"{len(unsure)}.keras"
                    os.replace(td / "unchecked.keras", kept)
                    unsure.append((kept, {"fixture": str(src.relative_to(ROOT)), "class": layer.get("class_name"),
                                          "arg": key if sub is None else f"{key}.{sub}", "value": repr(PLANTS[j]),
                                          "output": output.strip()[-300:]}))
        if problem:
            bad += 1
            print(json.dumps({"fixture": str(src.relative_to(ROOT)), "class": layer.get("class_name"),
                              "arg": key if sub is None else f"{key}.{sub}", "value": repr(PLANTS[j]),
                              "problem": problem, "output": output.strip()[-300:]}), flush=True)
        if idx % 200 == 0:
            print(f"# {idx}/{len(todo)} done, {bad} counterexamples", file=sys.stderr, flush=True)
    refused = cases.refusals_elsewhere([p for p, _ in unsure]) if unsure else {}
    for p, entry in unsure:
        if not any((refused.get(str(p)) or {}).values()):
            bad += 1
            print(json.dumps({**entry, "problem": "refused, but Keras loads the unchecked output on every backend"}),
                  flush=True)
    print(f"# {len(todo)} cases, {bad} counterexamples ({len(unsure)} refusals TensorFlow alone would load, "
          "checked on JAX and torch)", file=sys.stderr, flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
