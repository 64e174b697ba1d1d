"""The dynamic sampling docs run: the tutorial verbatim (no substitutions) and the method page's configuration."""

from docs_helpers import run_docs_page


def test_dynamic_sampling_tutorial_runs_as_printed(tmp_path):
    namespace = run_docs_page("tutorials/dynamic_sampling.md", tmp_path)
    steps = [log for log in namespace["trainer"].state.log_history if "loss" in log]
    assert len(steps) == 3 and all(log["dynamic_sampling/bound_hit"] == 1 for log in steps)
    assert namespace["trainer"].args.dynamic_sampling_reward_func == "toy_accuracy_reward"


def test_dynamic_sampling_method_page_config_example(tmp_path):
    namespace = run_docs_page(
        "methods/dynamic_sampling.md", tmp_path, substitutions={'output_dir="out",': 'output_dir="out", use_cpu=True,'}
    )
    args = namespace["args"]
    assert args.dynamic_sampling and args.dynamic_sampling_max_rounds == 10
    assert args.dynamic_sampling_seed == args.seed + 1
