# Two commands do all set-up on a fresh machine (see README.md):
#   make demo   -> creates .venv, installs the package, runs the main job on the embedded default
#   make test   -> creates .venv, installs the package, runs the test suite
PYTHON ?= python3
VENV ?= .venv
# The CPU build of torch; on a GPU machine, override: make TORCH_SPEC=torch demo
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export TRL_EXPERIMENTAL_SILENCE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo test test-fast wheel docs bench style quality clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/trl-rlvr-ext demo

test: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --durations=15 tests

test-fast: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 -m "not slow and not distributed" tests

# The wheel (with the packaged recipes) in dist/: `pip install dist/trl_rlvr_ext-*.whl` anywhere
wheel: $(STAMP)
	$(PY) -m pip wheel . --no-deps --no-build-isolation -w dist

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	for f in bench/*.py; do $(PY) $$f || exit 1; done

style: $(STAMP)
	$(VENV)/bin/ruff check --fix . && $(VENV)/bin/ruff format .

quality: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) site .pytest_cache .ruff_cache build dist
