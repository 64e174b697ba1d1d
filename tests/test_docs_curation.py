"""The curation and Pass@k docs run as printed: the tutorials end to end (smoke-sized toy), and the method pages'
configuration examples."""

import json
import os

import pytest
from docs_helpers import DOCS, docs_env, docs_toy_cache, python_blocks, run_docs_page  # noqa: F401 -- fixtures


@pytest.mark.slow
@pytest.mark.usefixtures("docs_env")
def test_pass_at_k_tutorial_runs(tmp_path):
    namespace = run_docs_page("tutorials/pass_at_k.md", tmp_path)
    assert len(python_blocks("tutorials/pass_at_k.md")) == 4
    results = namespace["results"]
    assert [r.label for r in results] == ["toy base, T=1.0", "toy base, T=0.5"]
    assert list(results[0].pass_at_k) == [1, 2, 4, 8, 16, 32, 64]  # num_samples=64, as printed
    assert os.path.getsize(tmp_path / "pass_at_k" / "pass_at_k.png") > 1000
    assert (tmp_path / "pass_at_k" / "pass_at_k.json").is_file()
    assert [step for step, _ in namespace["callback"].history] == [10, 20]  # eval_steps=10, max_steps=20
    assert namespace["metric"].compute(predictions=[[True, False]], k=[1])["pass@1"] == 0.5
    # section 4: SELF trained by its recipe, then three models evaluated on one set of problems
    assert (tmp_path / "outputs" / "toy_self" / "model.safetensors").is_file()
    curves = json.loads((tmp_path / "eval_toy" / "pass_at_k.json").read_text())
    assert "base" in json.dumps(curves) and "SELF" in json.dumps(curves) and "GRPO" in json.dumps(curves)
    assert (tmp_path / "eval_toy" / "pass_at_k.png").is_file()
    # the image the page shows is shipped next to it
    assert (DOCS / "tutorials" / "pass_at_k.png").is_file()


@pytest.mark.slow
@pytest.mark.usefixtures("docs_env")
def test_offline_curation_tutorial_runs(tmp_path):
    namespace = run_docs_page("tutorials/offline_curation.md", tmp_path)
    scored = namespace["scored"]
    assert len(scored) == 512 and {"pass_rate", "greedy_correct", "correct_mean_logprob"} <= set(scored.column_names)
    assert sorted(p.name for p in (tmp_path / "curated_toy" / "shards").iterdir()) == [
        f"shard-0000{i}.jsonl" for i in range(4)
    ]
    assert (tmp_path / "curated_toy" / "band" / "dataset_dict.json").is_file()
    # section 4: the command line writes its own folder, next to the Python one
    assert (tmp_path / "curated_toy_cli" / "scored").is_dir() and (tmp_path / "curated_toy_cli" / "filtered").is_dir()


@pytest.mark.usefixtures("docs_env")
def test_self_method_page_config_example(tmp_path):
    namespace = run_docs_page("methods/self_curation.md", tmp_path)
    args = namespace["args"]
    assert args.curation == "self" and args.curation_self_recheck_steps == 100 and args.curation_seed == args.seed
    assert args.epsilon == args.epsilon_high == 0.2 and args.beta == 0.0 and args.learning_rate == 1e-6
    assert args.steps_per_generation // args.gradient_accumulation_steps == 2  # 2 gradient steps per rollout


@pytest.mark.usefixtures("docs_env")
def test_pass_rate_method_page_config_example(tmp_path):
    namespace = run_docs_page("methods/pass_rate_curation.md", tmp_path)
    args = namespace["args"]
    assert args.curation == "pass_rate" and args.curation_pass_rate_target == "mid"
    assert args.curation_pass_rate_floor == 0.05 and args.curation_pass_rate_decay == 0.5
