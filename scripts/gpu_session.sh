#!/usr/bin/env bash
# One device session (NVIDIA GPU; PyTorch, JAX and cuDNN there, no TensorFlow): the GPU tests on the
# torch and the JAX backend, the CLI's own GPU report, the GPU forward benchmark.  Results land in $OUT
# (device tool) or ./gpu-out; copy them into docs/gpu-verification.md with the date and versions.
# Needs the wheels in .whl (keras, namex, optree, google-crc32c: the device README says how to fetch them).
# Usage: scripts/gpu_session.sh [all|tier|torch|more|jax|trained]
#   all (default): `make test-gpu` whole -- every test marked gpu, in ONE pytest process on the torch
#          backend, then one on JAX (scripts/test_gpu.sh, the Makefile's recipe; KERAS_BACKEND is set
#          for each, so no TensorFlow is needed) -- then the CLI's own GPU report;
#   tier:  the same tier on one backend (BACKEND=torch by default, BACKEND=jax), for a device call
#          limited to 10 minutes; the stages below are smaller parts of it:
#   torch: the cuDNN runner, verify and the Keras GPU path on the torch backend;
#   more:  the eligibility probe (static verdicts vs kernels taken), the PyTorch/ONNX targets on CUDA, the
#          trained fixtures (issue 19) against cuDNN on the strict GPU path;
#   jax:   the Keras GPU path on the JAX backend and the CLI's own GPU report;
#   trained: issue 19 on the GPU: the trained fixtures pass on the strict GPU rows (reference run by each
#          cuDNN algorithm, closest per row) and every planted error fails there (BACKEND=jax for JAX).
set -uo pipefail
STAGE=${1:-all}
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/tests PYTHONUNBUFFERED=1 KERAS_BACKEND=torch
export GRUCONV_GOLDEN_DIR=$PWD/fixtures/cudnn-golden
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, jax, keras, numpy; print('torch', torch.__version__, 'jax', jax.__version__, 'keras', keras.__version__, 'numpy', numpy.__version__)"
  python3 -m gruconv.verify.reference.cudnn_rnn fixtures/cudnn-golden fixtures/cudnn-golden-lstm 2>&1 | tail -25
} 2>&1 | tee "$OUT/env.txt"
if [ "$STAGE" = all ] || [ "$STAGE" = tier ]; then
  [ "$STAGE" = all ] && backends="torch jax" || backends=${BACKEND:-torch}
  PY=python3 bash scripts/test_gpu.sh $backends 2>&1 | tee "$OUT/pytest-gpu-tier.txt" | \
    grep -E "passed|failed|FAILED|ERROR|Error|make test-gpu" | tail -60
  rc=${PIPESTATUS[0]}
  if [ "$STAGE" = all ]; then
    for f in fixtures/keras/bidir_concat.h5 fixtures/keras_lstm/mixed.h5 fixtures/tf1/layer_80x256; do
      python3 -m gruconv verify "$f" --reference cudnn --device both --steps 50 --batch 4; echo "exit=$?"
    done 2>&1 | tee "$OUT/verify-cli.txt" | tail -30
  fi
  exit $rc
fi
if [ "$STAGE" = trained ]; then
  B=${BACKEND:-torch}
  KERAS_BACKEND=$B XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 560 python3 -m pytest -q -m gpu -p no:cacheprovider -rs -s \
    tests/verify/test_verify.py::test_gpu_trained_fixtures_pass_on_cpu_and_strict_gpu_against_cudnn \
    tests/verify/test_verdicts.py::test_gpu_every_planted_error_fails_on_the_strict_gpu_rows_too \
    2>&1 | tee "$OUT/pytest-gpu-trained-$B.txt" | grep -E "passed|failed|FAILED|Error" | tail -40
  exit 0
fi
if [ "$STAGE" = more ]; then
  timeout 540 python3 -m pytest -q -m gpu -p no:cacheprovider -rs -v tests/eligibility/test_eligibility_gpu.py \
    tests/writers/test_torch_target.py tests/writers/test_targets_cli.py tests/verify/test_verify.py::test_gpu_trained_fixtures_pass_on_cpu_and_strict_gpu_against_cudnn \
    2>&1 | tee "$OUT/pytest-gpu-more.txt" | tail -60
  exit 0
fi
[ "$STAGE" = jax ] || timeout 500 python3 -m pytest -q -m gpu -p no:cacheprovider -rs -s tests/verify/test_cudnn_gpu.py tests/verify/test_verify.py \
  tests/verify/test_gpu_path.py 2>&1 | tee "$OUT/pytest-gpu-torch.txt" | tail -40
[ "$STAGE" = torch ] && exit 0
KERAS_BACKEND=jax XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 400 python3 -m pytest -q -m gpu -p no:cacheprovider \
  -rs -s tests/verify/test_gpu_path.py 2>&1 | tee "$OUT/pytest-gpu-jax.txt" | tail -25
for f in fixtures/keras/bidir_concat.h5 fixtures/keras_lstm/mixed.h5 fixtures/tf1/layer_80x256; do
  python3 -m gruconv verify "$f" --reference cudnn --device both --steps 50 --batch 4; echo "exit=$?"
done 2>&1 | tee "$OUT/verify-cli.txt" | tail -30
