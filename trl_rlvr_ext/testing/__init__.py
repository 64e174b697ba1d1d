"""Checks for a method's author: the ones the package's own methods pass, as plain functions usable from pytest.

Each check takes the method's options as a dict of config fields, so it works the same for a built-in method and
for a method of your own (pass your config and trainer classes)::

    from trl_rlvr_ext.testing import assert_matches_reference, assert_stock_when_off

    def test_my_method_off_is_stock_trl(tmp_path):
        assert_stock_when_off({"my_method": "none"}, output_dir=tmp_path)

    def test_my_weight_matches_the_authors(tmp_path):
        assert_matches_reference(my_weight, authors_weight, [{"x": torch.randn(4, 8)} for _ in range(3)])

- `assert_stock_when_off`: with the options off, a few steps train exactly as stock ``trl.GRPOTrainer`` (every
  logged value, every parameter, the checkpoint's files), with each batch reused so the importance ratio moves.
- `assert_matches_reference`: a pure function against a reference implementation, exactly by default.
- `assert_sharded_equal`: a short run under DeepSpeed ZeRO-3 and FSDP2 in two CPU processes equals DDP's, and the
  parameters were really sharded.
- `assert_resume_bit_exact`: a run killed with SIGKILL after a checkpoint resumes to the bit.

Everything runs on CPU, offline, on the toy's tiny model (`trl_rlvr_ext.testing.runs`).
"""

from .reference import assert_matches_reference
from .resume import assert_resume_bit_exact
from .runs import dense_reward, digit_reward, grpo_kwargs, prompt_dataset, small_grpo_kwargs, tiny_model
from .sharded import assert_sharded_equal
from .stock import Run, StockComparison, assert_same_run, assert_stock_when_off, step_logs, train


__all__ = [
    "Run",
    "StockComparison",
    "assert_matches_reference",
    "assert_resume_bit_exact",
    "assert_same_run",
    "assert_sharded_equal",
    "assert_stock_when_off",
    "dense_reward",
    "digit_reward",
    "grpo_kwargs",
    "prompt_dataset",
    "small_grpo_kwargs",
    "step_logs",
    "tiny_model",
    "train",
]
