#!/usr/bin/env bash
# Real-cuDNN smoke run for a GPU machine: environment facts, the ctypes self-report
# (max errors per golden file, GRU and, where present, LSTM), the `gpu` tests, and a check whether cuDNN 9 finds its
# sub-libraries without gruconv's preloading.  Usage: scripts/gpu_smoke.sh [GOLDEN_DIR]
# Exit status: that of the gpu tests.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
GOLDEN=${1:-${GRUCONV_GOLDEN_DIR:-.golden}}
[ -d "$GOLDEN" ] || GOLDEN=../shared/cudnn-golden
export GRUCONV_GOLDEN_DIR="$GOLDEN"
# LSTM golden files (scripts/make_lstm_golden.py), checked too where this checkout has them.
LSTM_GOLDEN=""
for d in fixtures/cudnn-golden-lstm ../shared/cudnn-golden-lstm; do
  if ls "$d"/*.npz >/dev/null 2>&1; then LSTM_GOLDEN=$d; break; fi
done

echo "== environment"
date -u
uname -srm
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 || nvidia-smi 2>&1 | head -15
"$PY" -c 'import sys, numpy, pytest; print(sys.executable, sys.version.split()[0], "numpy", numpy.__version__, "pytest", pytest.__version__)'
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
echo "-- nvidia wheel libraries on sys.path (torch is not imported)"
"$PY" - <<'PYEOF'
import glob, os, sys
seen = set()
for d in sys.path:
    for p in sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib", "lib*.so*"))):
        b = os.path.basename(p)
        if p not in seen and any(b.startswith(s) for s in ("libcudnn", "libcudart", "libcublas", "libnvrtc.")):
            seen.add(p)
            print(" ", p)
PYEOF
echo "-- system loader cache"
ldconfig -p 2>/dev/null | grep -E "libcudnn|libcudart|libcublasLt" | head -20
CUDNN_MAIN=$("$PY" -c 'import glob,sys,os; print(next(iter(sorted(p for d in sys.path for p in glob.glob(os.path.join(d,"nvidia","cudnn","lib","libcudnn.so.*")))), ""))')
if [ -n "$CUDNN_MAIN" ] && command -v readelf >/dev/null; then
  echo "-- readelf -d $CUDNN_MAIN and its adv sub-library"
  readelf -d "$CUDNN_MAIN" | grep -E "NEEDED|RPATH|RUNPATH|SONAME"
  readelf -d "$(dirname "$CUDNN_MAIN")"/libcudnn_adv.so.* 2>/dev/null | grep -E "NEEDED|RPATH|RUNPATH"
fi

echo "== self-report: python -m gruconv.cudnn_rnn $GOLDEN $LSTM_GOLDEN --maps"
"$PY" -m gruconv.cudnn_rnn "$GOLDEN" $LSTM_GOLDEN --maps

echo "== pytest tests/verify/test_cudnn_lib.py (no GPU needed) and -m gpu tests/verify/test_cudnn_gpu.py"
"$PY" -m pytest -q tests/verify/test_cudnn_lib.py
CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr "$PY" -m pytest -q -m gpu -s -rA tests/verify/test_cudnn_gpu.py
rc=$?

echo "== without preloading (GRUCONV_CUDNN_PRELOAD=0): does cuDNN find its sub-libraries itself?"
GRUCONV_CUDNN_PRELOAD=0 "$PY" -m gruconv.cudnn_rnn "$GOLDEN" $LSTM_GOLDEN --maps 2>&1 | grep -v "^  \"\|^[{}]"
echo "== done: pytest exit status $rc"
exit $rc
