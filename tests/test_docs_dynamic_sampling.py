"""The dynamic sampling docs run: the tutorial verbatim (no substitutions) and the method page's configuration."""

import pytest
from docs_helpers import docs_env, docs_toy_cache, run_docs_page  # noqa: F401 -- fixtures


@pytest.mark.usefixtures("docs_env")
def test_dynamic_sampling_tutorial_runs_as_printed(tmp_path):
    namespace = run_docs_page("tutorials/dynamic_sampling.md", tmp_path)
    steps = [log for log in namespace["trainer"].state.log_history if "loss" in log]
    assert len(steps) == 3 and all(log["dynamic_sampling/bound_hit"] == 1 for log in steps)
    assert namespace["trainer"].args.dynamic_sampling_reward_func == "toy_accuracy_reward"


@pytest.mark.usefixtures("docs_env")
def test_dynamic_sampling_method_page_config_example(tmp_path):
    namespace = run_docs_page("methods/dynamic_sampling.md", tmp_path)
    args = namespace["args"]
    assert args.dynamic_sampling and args.dynamic_sampling_max_rounds == 10
    assert args.dynamic_sampling_seed == args.seed + 1
