#!/usr/bin/env bash
# Download, on a machine with package-index access, what the GPU machine lacks, into .whl/ at the repository root:
# Python 3.12 manylinux x86-64 wheels (no dependencies resolved: each needed one is named below) and the deepspeed
# sdist, which bench/gpu_check.sh installs there with `pip install --no-index --no-deps`. .whl/ is git-ignored; pass it
# with the run so it travels with the checkout. Checks that .whl/ plus the checkout stay under 64 MiB.
#
#   bash bench/fetch_gpu_wheels.sh            # PYTHON=... picks the interpreter for pip (default: python3)
#
# The GPU machine (Python 3.12, torch 2.11 + CUDA 13, transformers 5.17, accelerate, peft, pandas, pyarrow, no
# network) lacks trl, datasets and deepspeed, and its transformers is older than this package's transformers>=5.18.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEST=.whl
LIMIT_MIB=64

# Pinned to the versions this package is tested with (the project's own environment).
WHEELS=(
  trl==1.16.0
  transformers==5.24.0   # the project requires transformers>=5.18; the GPU machine has 5.17
  peft==0.21.2           # the project requires peft>=0.21; the GPU machine's version is not known here
  regex==2026.11.19      # transformers>=5.24 needs regex>=2025.10.22
  datasets==5.2.0
  dill==0.4.1            # datasets
  multiprocess==0.70.19  # datasets
  # deepspeed's pure-Python dependencies missing there (ninja, psutil, py-cpuinfo, msgpack, einops, nvidia-ml-py are
  # installed)
  hjson==3.1.0
  pydantic==2.14.4
  pydantic-core==2.50.5
  annotated-types==0.8.0
  typing-inspection==0.4.5
  typing-extensions==4.16.0  # pydantic 2.14 needs >= 4.16
)
DEEPSPEED=deepspeed==0.19.8  # an sdist only: built there with DS_BUILD_OPS=0 (ops compile just in time if used)

PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
mkdir -p "$DEST"
rm -f "$DEST"/*.whl "$DEST"/*.tar.gz  # one version of each: two stop the whole install there
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" \
  -d "$DEST" "${WHEELS[@]}"
# pip prepares an sdist's metadata by running its setup.py, and deepspeed's imports torch: use an interpreter that has
# torch (DEEPSPEED_PYTHON, default: this checkout's .venv, else PYTHON) and no build isolation.
DS_PY=${DEEPSPEED_PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo "$PY")}
DS_BUILD_OPS=0 "$DS_PY" -m pip download --no-deps --no-binary=:all: --no-build-isolation -d "$DEST" "$DEEPSPEED"

ls -l "$DEST"
# What travels: tracked and untracked-not-ignored files, plus .whl/ (an approximation: the files git lists).
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
whl_bytes=$(du -cb "$DEST" | tail -1 | cut -f1)
total=$((tree_bytes + whl_bytes))
echo "checkout $((tree_bytes / 1024)) KiB + $DEST $((whl_bytes / 1024)) KiB = $((total / 1048576)) MiB (limit $LIMIT_MIB MiB)"
if [ "$total" -ge $((LIMIT_MIB * 1048576)) ]; then
  echo "error: over $LIMIT_MIB MiB: drop what the GPU check does not need" >&2
  exit 1
fi
