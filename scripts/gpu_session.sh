#!/usr/bin/env bash
# One device session (NVIDIA GPU, PyTorch + cuDNN, no TensorFlow): GPU tests, cuDNN verification of every
# fixture, GPU forward benchmark. Results land in $OUT (device tool) or ./gpu-out.
# Needs the wheels in .whl (keras, namex, optree, h5py, ...; see docs/gpu-verification.md) and the
# golden files in .golden (a copy of ../shared/cudnn-golden).
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 KERAS_BACKEND=torch GRUCONV_GOLDEN_DIR=$PWD/.golden
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, keras, numpy; print('torch', torch.__version__, 'keras', keras.__version__, 'numpy', numpy.__version__)"
  python3 -m gruconv.cudnn_rnn 2>&1 | head -5
} 2>&1 | tee "$OUT/env.txt"
python3 -m pytest -q -m gpu -p no:cacheprovider -s tests/test_cudnn_gpu.py tests/test_verify.py 2>&1 | tee "$OUT/pytest-gpu.txt"
for f in fixtures/keras/sequential.h5 fixtures/keras/bidir_none.h5; do
  python3 -m gruconv verify "$f" --reference cudnn --tolerance 1e-5; echo "exit=$?"
done 2>&1 | tee "$OUT/verify-cli.txt"
python3 -m gruconv verify fixtures/tf1/layer_80x256 --reference cudnn --steps 100 --batch 4 2>&1 | tee -a "$OUT/verify-cli.txt"
python3 -m gruconv verify fixtures/tf1/layer_80x256 --reference cudnn --steps 100 --batch 4 --allow-tf32 2>&1 | tee -a "$OUT/verify-cli.txt"
python3 scripts/gpu_verify_table.py 2>&1 | tee "$OUT/verify-table.md"
python3 bench/gpu_forward.py 2>&1 | tee "$OUT/gpu-forward.txt"
