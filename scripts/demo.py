"""`make demo`: inspect, convert and verify bundled fixtures with the installed `gruconv` command."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GRUCONV = str(Path(sys.executable).with_name("gruconv"))
OUT = ROOT / "demo-out"

STEPS = [
    ["inspect", "fixtures/keras/sequential.h5"],
    ["convert", "fixtures/keras/sequential.h5", "demo-out/sequential.keras", "--force", "--verify"],
    ["inspect", "fixtures/tf1/layer_bidir"],
    ["convert", "fixtures/tf1/layer_bidir", "demo-out/layer_bidir.keras", "--force", "--verify"],
    ["convert", "fixtures/keras_lstm/mixed.h5", "demo-out/mixed_gru_lstm.keras", "--force", "--verify"],
]


def main() -> int:
    OUT.mkdir(exist_ok=True)
    for args in STEPS:
        print(f"$ gruconv {shlex.join(args)}", flush=True)
        r = subprocess.run([GRUCONV, *args], cwd=ROOT)
        print(flush=True)
        if r.returncode != 0:
            print(f"demo step failed with exit code {r.returncode}", file=sys.stderr)
            return r.returncode
    print("demo: converted models are in demo-out/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
