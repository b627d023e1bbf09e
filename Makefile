# gruconv — quickstart: `make demo`, `make test`.
# Everything is installed into a local virtual environment from pyproject.toml.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: setup demo test test-all test-slow test-gpu bench fuzz fixtures clean compat docs

setup: $(STAMP)

$(STAMP): pyproject.toml .ci/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c .ci/constraints.txt -e '.[tensorflow,dev]'
	touch $(STAMP)

demo: setup
	$(PY) scripts/demo.py

# Two tiers, chosen by markers (docs/testing.md says which tests are where and why):
#   make test      everything that checks behaviour, minus tests marked `slow` (long corpora, fuzz
#                  seeds, memory measurements, SIGKILL crash runs); target <= 5 min on 2 cores.
#   make test-all  every non-GPU test, `slow` included (what .ci/run runs); target <= 20 min.
# Both run on all cores through pytest-xdist (JOBS=0 for a serial run, e.g. to debug; --dist loadgroup keeps
# a module marked xdist_group(...) on one worker so its batched module fixture runs once) and print the
# whole-process wall time; the exit status is pytest's own.
JOBS   ?= auto
PYTEST := $(PY) -m pytest -q -n $(JOBS) --dist loadgroup
# Every tier starts by compiling src/ and tests/ into __pycache__ (only what changed since the last run): where
# PYTHONDONTWRITEBYTECODE is set (this box and CI's), every Python process the suite starts -- each `gruconv`
# subprocess, each bounded TensorFlow child -- otherwise compiled the modules it imports again: 47 s -> 31 s for
# the quick tests of test_hostile, test_bad_inputs, test_safety_round3 and test_cli on a fresh clone
# (docs/testing.md).  Nothing else is written: a fixture's own Python (a user's layer code) is never compiled.
# Then pytest's own assertion-rewriting cache of the test modules, which it writes only where that variable is
# unset: each worker rewrote all of them at collection, 3.6 s of its 10.6 s (scripts/cache_test_rewrites.py).
COMPILE := $(PY) -m compileall -q -j 0 src tests >/dev/null && $(PY) scripts/cache_test_rewrites.py

define timed
@start=$$(date +%s); $(1); rc=$$?; \
echo "$(2): $$(( $$(date +%s) - start )) s wall, pytest exit $$rc, load average $$(cut -d' ' -f1-3 /proc/loadavg)"; \
exit $$rc
endef

test: setup
	$(call timed,$(COMPILE); $(PYTEST) -m 'not gpu and not slow' $(ARGS),make test)

test-all: setup
	$(call timed,$(COMPILE); $(PYTEST) -m 'not gpu' $(ARGS),make test-all)

# The slow tier alone: `make test` + `make test-slow` = `make test-all` (what .ci/run runs, in that order).
test-slow: setup
	$(call timed,$(COMPILE); $(PYTEST) -m 'slow and not gpu' $(ARGS),make test-slow)

# The whole GPU tier (-m gpu) in one pytest process per Keras backend, torch then JAX (GPU_BACKENDS):
# scripts/test_gpu.sh, which scripts/gpu_session.sh runs on the device machine too.
GPU_BACKENDS ?= torch jax
# On a machine whose Python already has the packages (the GPU machine: no registry, no TensorFlow), name it:
# `make test-gpu PY=python3` skips the venv (setup) and runs the same recipe.
test-gpu: $(if $(filter command line,$(origin PY)),,setup)
	PY=$(PY) bash scripts/test_gpu.sh $(GPU_BACKENDS) -- $(ARGS)

bench: setup
	$(PY) bench/run.py

fuzz: setup
	GRUCONV_FUZZ_CASES=5000 GRUCONV_GENERATIVE_LONG_CASES=600 GRUCONV_GENERATIVE_RANDOM=1 \
	GRUCONV_DIALECT_CASES=200 GRUCONV_DIALECT_RANDOM=1 GRUCONV_DIALECT_CORPUS_KINDS=1 $(PY) -m pytest -q tests/readers/test_fuzz.py \
	    tests/keras3/test_contract_generative.py tests/keras3/test_dialect_property.py

# Every fixture generator (written by the real tf_keras / TensorFlow writers); each but
# make_user_fixtures.py also takes --check (rebuild in a temp dir, compare byte for byte;
# make_tf_keras_zip_fixtures.py compares contents: its zips carry save dates).
FIXTURE_GENERATORS := make_keras_fixtures make_keras_lstm_fixtures make_tf1_fixtures make_tf1_lstm_fixtures \
                      make_user_fixtures make_custom_layer_fixtures make_tf_keras_zip_fixtures make_graph_fixtures \
                      make_tf24_fixtures

fixtures: setup
	for g in $(FIXTURE_GENERATORS); do $(PY) fixtures/$$g.py || exit 1; done

clean:
	rm -rf $(VENV) demo-out bench-out

# make compat: the whole matrix (docs/compatibility.md; docs/testing.md says how long); COMPAT_ARGS=--quick for
# a reduced run of every step (.compat/compatibility.reduced.md), --jobs 2 on an otherwise idle machine
COMPAT_ARGS ?=
compat: setup
	$(PY) scripts/compat.py $(COMPAT_ARGS)

# docs/cli.md's generated region from every command's own --help (scripts/cli_reference.py; tests/cli/test_docs.py
# fails while the page differs: `$(PY) scripts/cli_reference.py --check`).  Run it after changing an option.
docs: setup
	$(PY) scripts/cli_reference.py
