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

fixtures: setup
	$(PY) fixtures/make_keras_fixtures.py
	$(PY) fixtures/make_tf1_fixtures.py

clean:
	rm -rf $(VENV) demo-out bench-out

compat: setup
	$(PY) scripts/compat.py
