#!/usr/bin/env bash
# The GPU tier (`pytest -m gpu`, every test marked gpu) once per Keras backend, each in ONE pytest
# process: what `make test-gpu` runs, and `scripts/gpu_session.sh tier` on the device machine (where
# there is no make venv and no TensorFlow).  KERAS_BACKEND is fixed when Keras is imported, hence one
# process per backend.  Exit 0 only when every backend's run exited 0.
# Usage: PY=python3 scripts/test_gpu.sh [BACKEND...] [-- PYTEST_ARGS...]   (default backends: torch jax)
set -u
PY=${PY:-python3}
backends=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do backends+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#backends[@]} -gt 0 ] || backends=(torch jax)
rc=0
for b in "${backends[@]}"; do
  start=$(date +%s)
  # JAX would take most of the GPU's memory at start-up; torch and cuDNN (ctypes) share the card with it.
  KERAS_BACKEND=$b XLA_PYTHON_CLIENT_PREALLOCATE=false "$PY" -m pytest -q -p no:cacheprovider -rs -m gpu "$@"
  r=$?
  echo "make test-gpu [KERAS_BACKEND=$b]: $(( $(date +%s) - start )) s wall, pytest exit $r"
  [ $r -eq 0 ] || rc=1
done
exit $rc
