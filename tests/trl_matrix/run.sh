#!/usr/bin/env bash
# The TRL matrix: the fast guard subset against each other supported TRL release, each in its own light venv.
#
#   tests/trl_matrix/run.sh [VERSION ...]      (default: 1.14.2 1.15.0; the main environment covers 1.16)
#
# Each venv reuses the main environment's packages (a .pth file pointing at its site-packages) and shadows TRL with
# `pip install --no-deps trl==VERSION`: TRL 1.14.2 and 1.15.0 need nothing newer than TRL 1.16's own requirements.
# PYTHON: the main environment's interpreter (default: python3 on PATH). TRL_MATRIX_DIR: where the venvs live
# (default: ${TMPDIR:-/tmp}/trl_rlvr_ext-trl-matrix; reused across runs).
# Exit status: 0 passed, 1 a test failed, 3 TRL could not be downloaded (no package index), 2 usage error.
#
# The subset, on every version: tests/test_trl_copies.py (copies == TRL source, re-apply tool, override signatures),
# the stock-equivalence tests (GRPO: clip_recovery="none", the NSR path without clipping, ACPO with a forced width and
# the off-policy diagnostics against stock TRL, DelTA's hidden-state path with its weights forced to 1 against stock
# TRL and its captured hidden states against the LM head's inputs; DPO: importance_sampling off), and IS-DPO's exact loss and the behaviour scorer. TRL 1.15.0's fused LM head is Triton-only: the runs load
# cpu_fused_head.py, which (only where that kernel is missing) gives TRL 1.15 the PyTorch kernel of TRL 1.16, for
# stock TRL and our trainers alike.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
MATRIX_DIR="${TRL_MATRIX_DIR:-${TMPDIR:-/tmp}/trl_rlvr_ext-trl-matrix}"
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(1.14.2 1.15.0)

TESTS=(
    tests/test_trl_copies.py
    tests/test_grpo_trainer.py::test_clip_recovery_none_is_stock_grpo
    tests/test_grpo_trainer.py::test_nsr_path_without_clipping_mirrors_trl_exactly
    tests/test_acpo_trainer.py::test_acpo_with_a_forced_width_is_stock_trl_with_that_epsilon
    tests/test_acpo_trainer.py::test_acpo_with_a_huge_min_bound_is_stock_trl_with_the_same_wide_epsilon
    tests/test_off_policy.py::test_diagnostics_leave_stock_trl_unchanged_and_log_what_they_measure
    tests/test_delta_trainer.py::test_delta_with_the_weights_forced_to_one_is_stock_trl
    tests/test_delta_trainer.py::test_the_captured_hidden_states_are_the_lm_head_inputs
    tests/test_dpo_trainer.py::test_importance_sampling_off_is_stock_dpo
    tests/test_dpo_trainer.py::test_loss_is_weighted_mean_of_stock_per_pair_losses
    tests/test_dpo_trainer.py::test_scorer_reproduces_trl_precomputed_reference_logps
    tests/test_dpo_trainer.py::test_behavior_columns_set_the_weights
)

SITE_PACKAGES="$("$PYTHON" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
mkdir -p "$MATRIX_DIR"
status=0
for version in "${VERSIONS[@]}"; do
    venv="$MATRIX_DIR/trl-$version"
    start=$SECONDS
    if [ "$("$venv/bin/python" -c 'import trl; print(trl.__version__)' 2>/dev/null || true)" != "$version" ]; then
        rm -rf "$venv"
        "$PYTHON" -m venv --without-pip "$venv"
        venv_site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
        echo "$SITE_PACKAGES" > "$venv_site/_trl_matrix_main_env.pth"
        if ! log="$("$PYTHON" -m pip --python "$venv/bin/python" install --quiet --no-deps "trl==$version" 2>&1)"; then
            echo "$log" >&2
            rm -rf "$venv"
            # No index (offline machine): the caller may skip. Anything else (a version that does not exist) fails.
            if grep -qE "NewConnectionError|Failed to establish|Temporary failure in name resolution|Network is \
unreachable|Max retries exceeded|ProxyError|from versions: none" <<< "$log"; then
                echo "trl_matrix: cannot download trl==$version: the package index is unreachable" >&2
                exit 3
            fi
            echo "trl_matrix: pip could not install trl==$version" >&2
            exit 1
        fi
    fi
    echo "=== TRL $version: ${TESTS[*]}"
    if (cd "$ROOT" && PYTHONPATH="$ROOT:$ROOT/tests/trl_matrix" HF_HUB_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 \
        TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 \
        "$venv/bin/python" -m pytest -q -p no:cacheprovider -p no:xdist -p cpu_fused_head "${TESTS[@]}"); then
        echo "=== TRL $version: passed in $((SECONDS - start)) s"
    else
        echo "=== TRL $version: FAILED"
        status=1
    fi
done
exit $status
