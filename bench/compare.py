"""Before / after: the same measurements on a baseline commit's sources and on this tree's, interleaved.

    .venv/bin/python bench/compare.py               # baseline: git merge-base HEAD main (or --base REF), 3 repetitions
    .venv/bin/python bench/compare.py --base 7734be6 --reps 5

The baseline's ``src/`` is extracted with ``git archive`` into ``bench-out/base-<commit>/src`` (git-ignored,
read only; nothing else of the repository is touched) and every command runs once per repetition on each
side, alternating (base, head, base, head, ...), with the interpreter and packages of this venv; only
``PYTHONPATH`` differs.  The inputs are ``bench/run.py``'s (the large model is built or reused in
``bench-out/large``; the batch of 100 small models is rebuilt).  Figures: median wall time of a fresh
process (start-up included) and peak RSS, as in ``bench/run.py``; the manual tf_keras route is measured
in the same loop so the large conversions' ratios are from interleaved runs.  Results go to
``bench-out/compare.json``; ``docs/benchmarks.md`` is then re-rendered (``bench/run.py --render-only``
includes them in its "Before and after" section).  No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as R  # noqa: E402  (bench/run.py: inputs, run_once, the manual route)

COMPARE = R.OUT / "compare.json"


def baseline_src(ref: str) -> tuple:
    """``(commit, path of its src/)``, extracted once per commit."""
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=R.REPO, check=True,
                            capture_output=True, text=True).stdout.strip()
    root = R.OUT / f"base-{commit[:12]}"
    if not (root / "src" / "gruconv" / "__init__.py").is_file():
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", "--format=tar", commit, "src"], cwd=R.REPO, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    return commit, root / "src"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default=None,
                    help="baseline commit or branch (default: where this branch left main, git merge-base HEAD main)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of every command on each side")
    ap.add_argument("--models", type=int, default=100, help="small models in the batch")
    ap.add_argument("--verify-only", action="store_true",
                    help="only the verify cases (bench/run.py's verify section: issue 30)")
    args = ap.parse_args(argv)
    t_start = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - t_start:6.1f}s] {msg}", flush=True)

    R.OUT.mkdir(exist_ok=True)
    if args.base is None:
        args.base = "merge-base HEAD main"
        ref = R._git("merge-base", "HEAD", "main")
    else:
        ref = args.base
    commit, base_src = baseline_src(ref)
    head = R._git("rev-parse", "--short", "HEAD")
    dirty = bool(R._git("status", "--porcelain", "--untracked-files=no", "--", "src"))  # the code measured
    load_start = os.getloadavg()
    log(f"baseline {args.base} = {commit[:12]} ({base_src}); head {head}{' (uncommitted changes)' if dirty else ''}")
    big = R.large_inputs(R.OUT, False, log)
    root, items = (None, []) if args.verify_only else R.batch_inputs(R.OUT, args.models)[:2]
    d = R.OUT / "compare-out"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    g = R.gruconv_cmd()
    small = R.REPO / "fixtures" / "keras" / "sequential.h5"
    sides = {"base": base_src, "head": R.SRC}
    verify = R.verify_commands(big, R.OUT, R.VERIFY_COPIES)
    commands = {} if args.verify_only else {
        "convert big.h5": lambda o: g + ["convert", str(big["h5"]), str(o / "h5.keras")],
        "convert big_ckpt": lambda o: g + ["convert", str(big["ckpt"]), str(o / "ckpt.keras")],
        f"batch of {len(items)}, --jobs 2": lambda o: g + ["convert", str(root), "--out-dir", str(o / "batch"),
                                                          "--jobs", "2", "--keep-going"],
        f"batch of {len(items)}, --jobs 1": lambda o: g + ["convert", str(root), "--out-dir", str(o / "batch"),
                                                          "--jobs", "1", "--keep-going"],
        "convert one small model": lambda o: g + ["convert", str(small), str(o / "small.keras")],
        "inspect big.h5": lambda o: g + ["inspect", str(big["h5"])],
        "inspect big_ckpt": lambda o: g + ["inspect", str(big["ckpt"])],
    }
    commands.update(verify)
    # warm-up (untimed): bytecode of both trees (bench/run.py's child_env lets them write it), inputs into the page cache
    for side, src in sides.items():
        o = d / f"warm-{side}"
        o.mkdir()
        for name in ("convert one small model", "inspect big.h5", "inspect big_ckpt", "verify one small model"):
            if name in commands:
                R.run_once(commands[name](o), src=src)
        R.run_once(g + ["convert", str(small), "--out-dir", str(o / "warm-batch"), "--jobs", "2"], src=src)
        shutil.rmtree(o, ignore_errors=True)
    runs = {name: {side: [] for side in sides} for name in commands}
    manual = []
    for i in range(args.reps):
        for name, make in commands.items():
            for side, src in sides.items():
                o = d / side
                shutil.rmtree(o, ignore_errors=True)
                o.mkdir()
                r = R.run_once(make(o), src=src)
                runs[name][side].append(r)
                log(f"  [{i + 1}/{args.reps}] {name} ({side}): {r['wall_s']:.2f} s"
                    + (f", {r['rss_mib']:.0f} MiB" if r["rss_mib"] else "") + (f"  FAILED: {r['error']}" if "error" in r else ""))
        if args.verify_only:
            continue
        o = d / "manual"
        shutil.rmtree(o, ignore_errors=True)
        o.mkdir()
        r = R.run_once([sys.executable, "-c", R.MANUAL, str(big["h5"]), str(o / "manual.keras"),
                        str(R.make_large.UNITS), str(R.make_large.INPUT), str(R.make_large.LAYERS)])
        manual.append(r)
        log(f"  [{i + 1}/{args.reps}] manual tf_keras route: {r['wall_s']:.2f} s")
    shutil.rmtree(d, ignore_errors=True)
    out = {
        "when": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "base": args.base, "base_commit": commit[:12], "head": head, "dirty": dirty,
        "machine": R.machine_facts(), "load": {"start": load_start, "end": os.getloadavg()},
        "reps": args.reps, "n_models": len(items),
        "series": {name: {side: R.series(f"{name} ({side})", rs) for side, rs in by.items()}
                   for name, by in runs.items()},
        "manual": R.series("manual", manual) if manual else {"error": "not run (--verify-only)"},
        "total_s": time.perf_counter() - t_start,
    }
    COMPARE.write_text(json.dumps(out, indent=1, default=str))
    log(f"wrote {COMPARE.relative_to(R.REPO)}")
    for line in render_section(out):
        print(line)
    if (R.OUT / "results.json").is_file():
        R.main(["--render-only"])
    return 0


def render_section(c: dict) -> list:
    """The "Before and after" section of docs/benchmarks.md from compare.json."""
    L = []
    w = L.append
    ld = c["load"]
    w("## Before and after")
    w("")
    w(f"`bench/compare.py`, {c['when']}: baseline `{c['base']}` = commit `{c['base_commit']}` against this tree "
      f"(`{c['head']}`{', with uncommitted changes' if c.get('dirty') else ''}), {c['reps']} repetitions, each "
      "command run on both sides alternately (base, head, base, head, ...), same interpreter and packages, only "
      "`PYTHONPATH` differs. Median wall time of a fresh process (start-up included); largest peak RSS of the "
      "process and those it waited for. Load average (1/5/15 min) at start "
      f"{'/'.join(f'{x:.2f}' for x in ld['start'])}, at end {'/'.join(f'{x:.2f}' for x in ld['end'])}; "
      f"{c['machine'].get('cpu', '?')}, {c['machine'].get('cores', '?')} cores.")
    w("")
    w("| Command | base: median (s) | head: median (s) | head ÷ base | base runs (s) | head runs (s) | base / head peak RSS (MiB) |")
    w("|---|---:|---:|---:|---|---|---:|")
    for name, by in c["series"].items():
        b, h = by["base"], by["head"]
        if "error" in b or "error" in h:
            w(f"| {name} | {b.get('error', '')[:60]} | {h.get('error', '')[:60]} | | | | |")
            continue
        w(f"| {name} | {b['wall_s']:.2f} | {h['wall_s']:.2f} | {h['wall_s'] / b['wall_s']:.2f}× | "
          f"{R._runs(b)} | {R._runs(h)} | {b['rss_mib']:.0f} / {h['rss_mib']:.0f} |")
    m = c["manual"]
    if "error" not in m:
        w(f"| manual tf_keras route (big.h5; same loop) | {m['wall_s']:.2f} | | | {R._runs(m)} | | {m['rss_mib']:.0f} |")
        w("")
        parts = []
        for name in ("convert big.h5", "convert big_ckpt"):
            by = c["series"].get(name, {})
            if all("error" not in by.get(s, {"error": 1}) for s in ("base", "head")):
                parts.append(f"{name}: {by['base']['wall_s'] / m['wall_s']:.2f}× → "
                             f"{by['head']['wall_s'] / m['wall_s']:.2f}× the manual route")
        if parts:
            w("Ratios from this loop: " + "; ".join(parts) + ".")
    vone = c["series"].get("convert --verify one small model", {})
    for name, by in c["series"].items():
        if name.startswith("convert --verify batch of") and all(
                "error" not in by.get(s, {"error": 1}) and "error" not in vone.get(s, {"error": 1}) for s in ("base", "head")):
            nv = int(name.split("batch of ")[1].split(",")[0])
            rates = [nv / max(1e-9, by[s]["wall_s"] - vone[s]["wall_s"]) for s in ("base", "head")]
            w("")
            w(f"`convert --verify --jobs 2` over {nv} copies of `fixtures/keras/sequential.h5`, models/s after start-up "
              f"(models ÷ (batch wall − one small `convert --verify`'s wall)): base {rates[0]:.1f}, head {rates[1]:.1f}.")
    n = c["n_models"]
    single = c["series"].get("convert one small model", {})
    for jobs in (2, 1):
        by = c["series"].get(f"batch of {n}, --jobs {jobs}", {})
        if all("error" not in by.get(s, {"error": 1}) for s in ("base", "head")) and \
                all("error" not in single.get(s, {"error": 1}) for s in ("base", "head")):
            rates = [n / max(1e-9, by[s]["wall_s"] - single[s]["wall_s"]) for s in ("base", "head")]
            w("")
            w(f"Batch `--jobs {jobs}`, models/s after start-up (models ÷ (batch wall − one small convert's wall), "
              f"each side with its own start-up): base {rates[0]:.1f}, head {rates[1]:.1f}.")
    w("")
    return L


if __name__ == "__main__":
    sys.exit(main())
