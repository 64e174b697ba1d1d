"""The curation and Pass@k docs run: the tutorials end to end (offline, shrunk) and the method pages' examples."""

import os

from docs_helpers import DOCS, python_blocks, run_docs_page


def test_pass_at_k_tutorial_runs(tiny_model_path, tmp_path):
    namespace = run_docs_page(
        "tutorials/pass_at_k.md",
        tmp_path,
        substitutions={
            "model_path = get_base_model_path()": f"model_path = {tiny_model_path!r}",
            "make_task_datasets(num_test=200)": "make_task_datasets(num_train=64, num_test=6)",
            "make_task_datasets()": "make_task_datasets(num_train=64, num_test=6)",
            "num_samples=64": "num_samples=4",
            "per_device_train_batch_size=64": "per_device_train_batch_size=16",
            "max_steps=20": "max_steps=2",
            "eval_steps=10": "eval_steps=1",
            "num_samples=16": "num_samples=2",
        },
    )
    assert len(python_blocks("tutorials/pass_at_k.md")) == 4
    results = namespace["results"]
    assert [r.label for r in results] == ["toy base, T=1.0", "toy base, T=0.5"]
    assert list(results[0].pass_at_k) == [1, 2, 4]
    assert os.path.getsize(tmp_path / "pass_at_k" / "pass_at_k.png") > 1000
    assert (tmp_path / "pass_at_k" / "pass_at_k.json").is_file()
    assert [step for step, _ in namespace["callback"].history] == [1, 2]
    assert namespace["metric"].compute(predictions=[[True, False]], k=[1])["pass@1"] == 0.5
    # the image the page shows is shipped next to it
    assert (DOCS / "tutorials" / "pass_at_k.png").is_file()


def test_offline_curation_tutorial_runs(tiny_model_path, tmp_path):
    namespace = run_docs_page(
        "tutorials/offline_curation.md",
        tmp_path,
        substitutions={
            "model_path = get_base_model_path()": f"model_path = {tiny_model_path!r}",
            "make_task_datasets(num_train=512)": "make_task_datasets(num_train=12, num_test=4)",
            "num_samples=16": "num_samples=4",
            "shard_size=128": "shard_size=5",
        },
    )
    scored = namespace["scored"]
    assert len(scored) == 12 and {"pass_rate", "greedy_correct", "correct_mean_logprob"} <= set(scored.column_names)
    assert sorted(p.name for p in (tmp_path / "curated_toy" / "shards").iterdir()) == [
        "shard-00000.jsonl",
        "shard-00001.jsonl",
        "shard-00002.jsonl",
    ]
    assert (tmp_path / "curated_toy" / "band" / "dataset_dict.json").is_file()


def test_self_method_page_config_example(tmp_path):
    namespace = run_docs_page(
        "methods/self_curation.md",
        tmp_path,
        substitutions={'output_dir="outputs/self",': 'output_dir="x", use_cpu=True,'},
    )
    args = namespace["args"]
    assert args.curation == "self" and args.curation_self_recheck_steps == 100 and args.curation_seed == args.seed
    assert args.epsilon == args.epsilon_high == 0.2 and args.beta == 0.0 and args.learning_rate == 1e-6
    assert args.steps_per_generation // args.gradient_accumulation_steps == 2  # 2 gradient steps per rollout


def test_pass_rate_method_page_config_example(tmp_path):
    namespace = run_docs_page(
        "methods/pass_rate_curation.md",
        tmp_path,
        substitutions={'output_dir="outputs/pass_rate",': 'output_dir="x", use_cpu=True,'},
    )
    args = namespace["args"]
    assert args.curation == "pass_rate" and args.curation_pass_rate_target == "mid"
    assert args.curation_pass_rate_floor == 0.05 and args.curation_pass_rate_decay == 0.5
