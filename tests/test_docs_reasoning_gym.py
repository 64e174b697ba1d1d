"""The reasoning-gym tutorial's code runs as printed (TRL_RLVR_EXT_TOY_SIZE=smoke), offline, with the [gym] extra."""

import pytest
from docs_helpers import docs_env, docs_toy_cache, run_docs_page  # noqa: F401 -- fixtures


pytest.importorskip("reasoning_gym", reason="needs the [gym] extra (installed by the dev extra)")


@pytest.mark.slow
@pytest.mark.usefixtures("docs_env")
def test_reasoning_gym_page_runs(tmp_path):
    namespace = run_docs_page("tutorials/reasoning_gym.md", tmp_path)  # as printed, at the smoke size
    assert sorted(set(namespace["mixture"]["train"]["task"])) == ["chain_sum", "count_bits"]
    assert namespace["reward"](
        namespace["completions"], task=[namespace["row"]["task"]] * 3, entry=[namespace["row"]["entry"]] * 3
    ) == [1.0, 0.0, 0.0]
    logged = [log for log in namespace["trainer"].state.log_history if "boundary/winner_take_all" in log]
    assert logged and "boundary/delta_q5" in logged[-1]
