#!/usr/bin/env bash
# One GPU check of trl_rlvr_ext on one CUDA GPU, within a fixed time budget (default 540 s, everything included).
#
#   bash bench/gpu_check.sh              # the real check: needs one CUDA GPU, refuses to start without one
#   bash bench/gpu_check.sh --dry-run    # CPU, tiny shapes, float32: every code path that needs no CUDA (< 1 minute)
#
# Before the real check, the packages the GPU machine lacks are installed from the wheels in .whl/ (fetched with
# bench/fetch_gpu_wheels.sh) into /tmp/site, which goes on PYTHONPATH; this checkout goes first on PYTHONPATH, so its
# trl_rlvr_ext is the one tested. The numbers go to $OUT/gpu_results.md when OUT is set, else bench/gpu_results.md
# (or --out FILE), as a "## GPU check" section that bench/RESULTS.md takes as is. See bench/README.md.
#
# Environment: PYTHON (default python3), GPU_CHECK_BUDGET (seconds, default 540; dry run 120).
# Other arguments go to bench/gpu_check.py (--parts grpo,dpo,lora_init,zero3, --out FILE).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
START=$(date +%s)
PY=${PYTHON:-python3}
DRY=0
for arg in "$@"; do
  if [ "$arg" = "--dry-run" ]; then DRY=1; fi
done
if [ "$DRY" = 1 ]; then BUDGET=${GPU_CHECK_BUDGET:-120}; else BUDGET=${GPU_CHECK_BUDGET:-540}; fi
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false \
  PYTHONUNBUFFERED=1 WANDB_DISABLED=true HF_HUB_DISABLE_TELEMETRY=1
say() { echo "[gpu_check.sh +$(($(date +%s) - START)) s] $*"; }

if [ "$DRY" = 0 ]; then
  # Refuse before installing anything: the real check measures a GPU, and its numbers are meaningless elsewhere.
  if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "error: bench/gpu_check.sh needs a CUDA GPU, and torch ($("$PY" -c 'import torch; print(torch.__version__)' \
2>/dev/null || echo 'not importable')) sees none. Run it on a machine with one NVIDIA GPU, or use --dry-run to \
check the script on the CPU." >&2
    exit 2
  fi
  if compgen -G ".whl/*.whl" >/dev/null; then
    say "installing $(ls .whl/*.whl | wc -l) carried wheels into /tmp/site"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      || { echo "error: installing the wheels in .whl/ failed (see above); refetch them with bench/fetch_gpu_wheels.sh" >&2; exit 3; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    say "installed"
  else
    say "no .whl/ folder: using the packages installed here (trl, datasets and transformers>=5.18 must be)"
  fi
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
if ! "$PY" -c "import trl, datasets, trl_rlvr_ext" 2>/dev/null; then
  echo "error: trl, datasets or trl_rlvr_ext does not import with $PY:" >&2
  "$PY" -c "import trl, datasets, trl_rlvr_ext" 2>&1 | tail -3 >&2
  exit 3
fi

LEFT=$((BUDGET - ($(date +%s) - START)))
say "running bench/gpu_check.py, $LEFT s left of $BUDGET s"
# SIGINT lets the Python side write what it measured; SIGKILL 20 s later if it does not stop.
timeout --signal=INT --kill-after=20 "$LEFT" "$PY" bench/gpu_check.py --budget "$LEFT" "$@"
RC=$?
say "done, exit status $RC (budget $BUDGET s)"
exit $RC
