"""The reasoning-gym tutorial's code runs as printed (sizes shrunk), offline, with the [gym] extra."""

import pytest
from docs_helpers import run_docs_page


pytest.importorskip("reasoning_gym", reason="needs the [gym] extra (installed by the dev extra)")


def test_reasoning_gym_page_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_RLVR_EXT_CACHE", str(tmp_path / "cache"))
    namespace = run_docs_page(
        "tutorials/reasoning_gym.md",
        tmp_path,
        {
            "num_steps=400": "num_steps=2",
            "num_problems=20, num_samples=8": "num_problems=2, num_samples=2",
            "max_steps=20": "max_steps=2",
            "eval_steps=10": "eval_steps=1",
        },
    )
    assert sorted(set(namespace["mixture"]["train"]["task"])) == ["chain_sum", "count_bits"]
    assert namespace["reward"](
        namespace["completions"], task=[namespace["row"]["task"]] * 3, entry=[namespace["row"]["entry"]] * 3
    ) == [1.0, 0.0, 0.0]
    logged = [log for log in namespace["trainer"].state.log_history if "boundary/winner_take_all" in log]
    assert logged and "boundary/delta_q5" in logged[-1]
