#!/usr/bin/env python
"""Long runs of the legacy-dialect property (issue 40 item 2; ``tests/keras3/test_dialect_property.py`` is its test):
"tf_keras accepts it => gruconv converts it (exit 0) and its output computes what the original computes".

Each case is a seed (``tests/dialect_cases.py``: a random tf_keras CuDNN model, saved by tf_keras's legacy
HDF5 writer, rewritten into older dialects).  Cases run in chunks: one tf_keras child per chunk writes the
files, checks that tf_keras opens them and computes the oracle; this process converts, loads, predicts and
verifies.  A failed case is classified (its unmutated file, then each of its mutations alone).  Writes a
JSON summary: cases, passed, discarded (tf_keras refused the file) with reasons, and counterexamples by
class, each with its seeds and a reproducer.

Examples::

    PYTHONPATH=src python scripts/dialect_sweep.py --cases 200 --out sweep.json        # random profiles
    PYTHONPATH=src python scripts/dialect_sweep.py --per-kind 3 --out kinds.json        # each mutation alone
    PYTHONPATH=src python scripts/dialect_sweep.py --seed 17 --kinds hard_sigmoid_rnn --keep /tmp/s17   # one case
    PYTHONPATH=src python scripts/dialect_sweep.py --corpus --out corpus.json           # the real older writers' files

Seeds: ``--seed S`` starts there (default: random, printed); the same seed, kinds and save mode give the
same case.  ``--keep DIR`` keeps every file (the case's ``orig.h5``, each variant, the oracle ``.npz`` and
gruconv's output) for a reproducer.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "keras3"))

import dialect_cases as dc  # noqa: E402


def _known():
    """KNOWN_OPEN and ACCEPTED_REFUSALS from the test module (one list, kept where the test is)."""
    try:
        import test_dialect_property as t

        return t.KNOWN_OPEN, t.ACCEPTED_REFUSALS
    except Exception:  # noqa: BLE001 - pytest missing: run without the labels
        return {}, {}


def plan(args) -> list:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10 ** 6)
    print(f"start seed {seed}", flush=True)
    cases = []
    if args.corpus:
        cases += dc.corpus_cases()
        if args.corpus_kinds:
            cases += [dict(c, id=f"{c['id']}-{k}", kinds=[k]) for c in dc.corpus_cases()
                      for k in dc.MUTATIONS if not (dc.MUTATIONS[k].full_only and c["spec"]["save"] == "weights")]
    if args.per_kind:
        for k in dc.MUTATIONS:
            for i in range(args.per_kind):
                cases.append(dc.plan_case(seed + i, kinds=[k], save=args.save))
    elif args.kinds is not None:
        kinds = [] if args.kinds == "none" else args.kinds.split(",")
        cases += [dc.plan_case(seed + i, kinds=kinds, save=args.save) for i in range(args.cases)]
    elif not args.corpus:
        cases += [dc.plan_case(seed + i, profile=args.profile, save=args.save) for i in range(args.cases)]
    return cases


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--kinds", help="comma-separated mutations for every case ('none': unmutated)")
    ap.add_argument("--profile", choices=sorted(dc.PROFILES), help="draw mutations from this profile only")
    ap.add_argument("--per-kind", type=int, default=0, help="N cases of each mutation alone")
    ap.add_argument("--save", choices=["model", "weights"], help="force the save mode")
    ap.add_argument("--corpus", action="store_true", help="also the real older writers' files (fixtures/legacy_writers)")
    ap.add_argument("--corpus-kinds", action="store_true", help="with --corpus: each file also under each mutation")
    ap.add_argument("--no-verify", action="store_true", help="skip `gruconv verify` on cases that match")
    ap.add_argument("--chunk", type=int, default=10, help="cases per tf_keras child")
    ap.add_argument("--keep", type=Path, help="keep the case files here")
    ap.add_argument("--out", type=Path, help="JSON summary")
    args = ap.parse_args(argv)
    known, accepted = _known()
    dc.ACCEPTED_REFUSALS.update(accepted)
    cases = plan(args)
    work = args.keep or Path(tempfile.mkdtemp(prefix="gruconv-dialects-"))
    t0 = time.time()
    records = []

    def log(rec):
        extra = rec.get("class") or ""
        detail = (rec.get("result") or {}).get("detail") or rec.get("detail") or ""
        print(f"[{time.time() - t0:6.0f}s] {rec['id']}: {rec['status']} {extra} {str(detail)[:240]}", flush=True)

    try:
        for i in range(0, len(cases), args.chunk):
            records += dc.run_cases(cases[i:i + args.chunk], work, verify=not args.no_verify, log=log)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    wall = time.time() - t0
    status = Counter(r["status"] for r in records)
    by_class = defaultdict(list)
    for r in records:
        if r["status"] == "counterexample":
            by_class[r["class"]].append(r)
    discarded = Counter(f"{'+'.join(r['kinds']) or 'base'}: {str(r['detail'])[:160]}" for r in records
                        if r["status"] == "discarded")
    summary = {
        "cases": len(records), "wall_s": round(wall, 1), "per_case_s": round(wall / max(1, len(records)), 2),
        "status": dict(status),
        "discarded": dict(discarded),
        "other": [{k: r[k] for k in ("id", "status", "detail")} for r in records
                  if r["status"] in ("inapplicable", "build_error", "oracle_error")],
        "counterexamples": {
            cls: {"count": len(rs),
                  "known_open": sorted(k for k in dc.kinds_of_class(cls) if k in known),
                  "new": not dc.kinds_of_class(cls) <= set(known),
                  "examples": [{"seed": r["seed"], "kinds": r["kinds"], "spec": r["spec"],
                                "detail": r["result"].get("detail"), "verify_exit": r["result"].get("verify_exit"),
                                "reproducer": dc.reproducer(r)} for r in rs[:3]]}
            for cls, rs in sorted(by_class.items())},
    }
    print(json.dumps({k: summary[k] for k in ("cases", "wall_s", "per_case_s", "status")}))
    for cls, c in summary["counterexamples"].items():
        print(f"  {c['count']:4d}  {cls}{'  (NEW)' if c['new'] else ''}")
    if args.out:
        args.out.write_text(json.dumps(dict(summary, records=records), indent=1, default=str))
    return 1 if any(c["new"] for c in summary["counterexamples"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
