# gruconv — quickstart: `make demo`, `make test`.
# Everything is installed into a local virtual environment from pyproject.toml.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp

.PHONY: setup demo test test-gpu bench fuzz fixtures clean compat

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[tensorflow,dev]'
	touch $(STAMP)

demo: setup
	$(PY) scripts/demo.py

test: setup
	$(PY) -m pytest -q

test-gpu: setup
	$(PY) -m pytest -q -m gpu

bench: setup
	$(PY) bench/run.py

fuzz: setup
	GRUCONV_FUZZ_CASES=5000 $(PY) -m pytest -q tests/test_fuzz.py

# Every fixture generator (written by the real tf_keras / TensorFlow writers); each but
# make_user_fixtures.py also takes --check (rebuild in a temp dir, compare byte for byte).
FIXTURE_GENERATORS := make_keras_fixtures make_keras_lstm_fixtures make_tf1_fixtures make_tf1_lstm_fixtures \
                      make_user_fixtures

fixtures: setup
	for g in $(FIXTURE_GENERATORS); do $(PY) fixtures/$$g.py || exit 1; done

clean:
	rm -rf $(VENV) demo-out bench-out

compat: setup
	$(PY) scripts/compat.py
