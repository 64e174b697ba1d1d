"""The toy's size preset, ``$TRL_RLVR_EXT_TOY_SIZE``: ``full`` (the default) or ``smoke`` (a quick check).

The preset only changes *defaults*, i.e. arguments a call does not give:

* `trl_rlvr_ext.toy.get_base_model_path` (hence ``toy:base`` in recipes and CLIs) builds a much smaller base model
  with a much shorter warm start (`SMOKE_WARMSTART`): seconds instead of minutes, cached separately;
* `trl_rlvr_ext.toy.make_task_datasets` (hence ``toy:arithmetic``) draws `SMOKE_TASK_SIZES` problems per split
  instead of `FULL_TASK_SIZES`. The rows are the first rows of the full splits (the draw is sequential).

``smoke`` is for checking that a script, a tutorial or a recipe runs end to end (the docs' tests run every tutorial
this way); the smoke base model has barely learned the task, so its numbers mean nothing. Anything a call passes
explicitly (``get_base_model_path(hidden_size=128)``, ``make_task_datasets(num_test=500)``) is used as given.
"""

import os


SIZE_ENV_VAR = "TRL_RLVR_EXT_TOY_SIZE"
SIZES = ("full", "smoke")

# Default split sizes of `make_task_datasets` per preset. Smoke: enough prompts for a 32-prompt generation batch, and
# 50 held-out problems (the tutorials evaluate on up to 50).
FULL_TASK_SIZES = {"num_train": 2000, "num_test": 200}
SMOKE_TASK_SIZES = {"num_train": 64, "num_test": 50}

# Default warm start of the smoke base model (fields of `WarmStartSettings`; the others keep their defaults). Hidden
# size 32 keeps every projection at least 16 wide, so the tutorials' rank-16 LoRA fits.
SMOKE_WARMSTART = {
    "hidden_size": 32,
    "num_hidden_layers": 1,
    "intermediate_size": 64,
    "num_steps": 50,
    "batch_size": 32,
    "warmup_steps": 5,
}


def toy_size() -> str:
    """The active preset: ``$TRL_RLVR_EXT_TOY_SIZE`` (case-insensitive), ``"full"`` when unset or empty."""
    value = os.environ.get(SIZE_ENV_VAR, "").strip().lower() or "full"
    if value not in SIZES:
        raise ValueError(
            f"{SIZE_ENV_VAR}={os.environ[SIZE_ENV_VAR]!r} is not a toy size preset: use one of {list(SIZES)} "
            f"(or unset it for 'full')."
        )
    return value


def default_task_sizes() -> dict[str, int]:
    """``{"num_train": ..., "num_test": ...}``: the split sizes `make_task_datasets` uses when not given."""
    return dict(SMOKE_TASK_SIZES if toy_size() == "smoke" else FULL_TASK_SIZES)


def default_warmstart_overrides() -> dict:
    """The `WarmStartSettings` fields `get_base_model_path` uses, when not given, instead of the dataclass defaults."""
    return dict(SMOKE_WARMSTART) if toy_size() == "smoke" else {}
