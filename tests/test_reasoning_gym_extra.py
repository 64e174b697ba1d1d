"""Without the optional [gym] extra, reasoning_gym: names fail at once, naming the install command (runs everywhere)."""

import sys

import pytest

from trl_rlvr_ext.data import check_dataset_name, load_named_dataset
from trl_rlvr_ext.rewards import get_reward_func


def test_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # import reasoning_gym now raises ImportError
    with pytest.raises(ImportError, match=r'pip install -e "\.\[gym\]"'):
        check_dataset_name("reasoning_gym:chain_sum")
    with pytest.raises(ImportError, match=r"pip install \"reasoning-gym>=0\.1\.25\""):
        load_named_dataset("reasoning_gym:chain_sum")
    reward = get_reward_func("reasoning_gym")  # importable without the extra; grading a well-formed answer needs it
    assert reward(["no answer block"], task=["chain_sum"], entry=["{}"]) == [0.0]
    with pytest.raises(ImportError, match=r"\[gym\]"):
        reward(["<answer>1</answer>"], task=["chain_sum"], entry=['{"answer": "1"}'])
