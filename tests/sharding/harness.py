"""One 2-process launch per sharding mode that runs a sequence of small trainer runs in the same processes.

Launched by tests/test_sharding.py with the package's own accelerate configs, e.g.

    accelerate launch --config_file trl_rlvr_ext/recipes/accelerate_configs/deepspeed_zero3.yaml --num_processes 2 \
        --mixed_precision no --main_process_port <free> tests/sharding/harness.py zero3 main <model> <out_dir>

(``--mixed_precision no``: the comparisons with DDP are in float32; the configs say bf16 for GPUs.)

Modes: ``ddp`` (multi_gpu.yaml), ``zero2``, ``zero3``, ``fsdp2``. Phases: ``main`` (every case, then a run that
kills both processes with SIGKILL in step 3, after the step-2 checkpoint is written) and ``resume``
(the killed run resumed from that checkpoint). Each rank writes ``<out_dir>/<phase>_rank<k>.json`` after every case,
and rank 0 writes ``lora_<trainer>_<method>.pt`` (the initialised LoRA factors and base weights, gathered). With
``TRL_RLVR_EXT_KIT_CASES`` set, the main phase then runs the method authors' kit cases of that JSON
(`trl_rlvr_ext.testing.distributed.run_cases`, records in ``kit_rank<k>.json``). The evidence each case records
(parameters in full, their digest, how they were sharded) is the kit's.

Test-harness device, not package behaviour (docs/design/CPU_STACK.md section 4): on CPU accelerate silently runs an
FSDP config as DDP, so for ``fsdp2`` the distributed type is relabelled MULTI_GPU right after each config is built;
the device stays CPU and the process group gloo. Without the relabel the trainers refuse (one case checks it).
"""

import faulthandler
import hashlib
import json
import os
import signal
import sys
import traceback


os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, TrainerCallback
from trl import DPOConfig, DPOTrainer, GRPOConfig, GRPOTrainer

from trl_rlvr_ext import ISDPOConfig, ISDPOTrainer, RLVRGRPOConfig, RLVRGRPOTrainer
from trl_rlvr_ext.evaluation import PassAtKCallback
from trl_rlvr_ext.evaluation.boundary import BoundaryProbeCallback
from trl_rlvr_ext.lora_init import api as lora_api
from trl_rlvr_ext.testing.distributed import (
    digest,
    distributed_config,
    distributed_kwargs,
    full_params,
    run_cases,
    sharding_of,
    summary,
)
from trl_rlvr_ext.testing.runs import dense_reward
from trl_rlvr_ext.toy.preference import make_toy_preference_dataset


# A native crash of a rank (SIGSEGV, SIGABRT) prints its Python stack into the launch log, which the test's failure
# message shows: one full suite saw rank 1 of the fsdp2 launch die of SIGSEGV right after a model load, with nothing to
# say where (it did not recur in seven reruns of the launch, idle or under load). SIGKILL, the kill run's, is untouched.
faulthandler.enable()


MODE, PHASE, MODEL, OUT = sys.argv[1:5]
ONLY = set(sys.argv[5].split(",")) if len(sys.argv) > 5 else None  # debugging: run these cases only
RANK = int(os.environ["RANK"])
LORA_METHODS = ("rlpo", "rlmo", "pissa", "milora")
KIT_CASES = "TRL_RLVR_EXT_KIT_CASES"  # a JSON of the method authors' kit's cases to run too (kit_rank<k>.json)
KILL_STEP = 2  # the kill run saves checkpoint-2, then dies in step 3; the resumed steps 3 and 4 are compared


# ---------------------------------------------------------------------------------------------- rewards and data
def parity_reward(completions, curation_row, **kwargs):
    """Verifiable per (prompt, completion): right on some prompts only, so curation has both outcomes."""
    return [float((row + sum(map(ord, c))) % 2 == 0) for row, c in zip(curation_row, completions)]


def third_reward(completions, curation_row, **kwargs):
    """Right about a third of the time: with 4 prompts per step SELF rarely drops a whole step (a dropped step runs
    with zero gradients under DeepSpeed but is skipped elsewhere, so the comparison with DDP needs none)."""
    return [float((row + sum(map(ord, c))) % 3 == 0) for row, c in zip(curation_row, completions)]


def half_constant_reward(prompts, completions, **kwargs):
    """Odd prompts: constant groups (dynamic sampling drops them); even prompts: a spread."""
    return [
        0.5 if int(p.split("+")[0]) % 2 else sum(map(ord, c)) % 997 / 997 + 0.001 * len(c)
        for p, c in zip(prompts, completions)
    ]


def resume_reward(prompts, completions, trainer_state=None, **kwargs):
    if PHASE == "main" and trainer_state is not None and trainer_state.global_step == KILL_STEP and KILLING:
        with open(os.path.join(OUT, f"killed_rank{RANK}"), "w") as f:
            f.write("killed in step 3, after checkpoint-2\n")
        os.kill(os.getpid(), signal.SIGKILL)  # a real kill: no Python clean-up, the other rank dies too
    return [
        float((int(p.split("+")[0]) + sum(map(ord, c))) % 3 == 0) + sum(map(ord, c)) % 7 / 10
        for p, c in zip(prompts, completions)
    ]


KILLING = False


def prompts(n=16):
    return Dataset.from_dict({"prompt": [f"{i}+{2 * i}=" for i in range(n)]})


# ---------------------------------------------------------------------------------------------- set-up
def config(cls, **kwargs):
    """A trainer config for this launch (the kit's `distributed_config`: accelerate's state reset, the FSDP2 relabel)."""
    return distributed_config(cls, MODE, **kwargs)


def grpo_kwargs(name, **overrides):
    return distributed_kwargs(os.path.join(OUT, f"{PHASE}_{name}"), **overrides)


def dpo_kwargs(name, **overrides):
    kwargs = {
        "output_dir": os.path.join(OUT, f"{PHASE}_{name}"),
        "per_device_train_batch_size": 2,
        "max_steps": 2,
        "learning_rate": 1e-2,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "bf16": False,
        "activation_checkpointing": False,
        "max_length": 32,
        "seed": 0,
    }
    kwargs.update(overrides)
    return kwargs


def lora_config():
    return LoraConfig(r=4, lora_alpha=8, target_modules="all-linear")


# ---------------------------------------------------------------------------------------------- evidence
# full_params, digest, sharding_of, logs_of, summary: the method authors' kit (trl_rlvr_ext.testing.distributed)


class ShardingProbe(TrainerCallback):
    """How the parameters are held at the end of the first optimizer step (before any evaluation callback runs)."""

    def __init__(self, trainer):
        self.trainer, self.sharding = trainer, None

    def on_step_end(self, args, state, control, **kwargs):
        if self.sharding is None:
            self.sharding = sharding_of(self.trainer)


RESULTS: dict = {}


def record(name: str, fn) -> None:
    if ONLY is not None and name not in ONLY:
        return
    try:
        RESULTS[name] = fn()
    except Exception as error:  # noqa: BLE001 -- the test reports the case and its traceback
        RESULTS[name] = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
    with open(os.path.join(OUT, f"{PHASE}_rank{RANK}.json"), "w") as f:
        json.dump(RESULTS, f, default=str)


# ---------------------------------------------------------------------------------------------- GRPO cases
def grpo_run(name, trainer_cls=RLVRGRPOTrainer, config_cls=RLVRGRPOConfig, reward=dense_reward, data=None, **opts):
    trainer = trainer_cls(
        model=MODEL, reward_funcs=reward, args=config(config_cls, **grpo_kwargs(name, **opts)), train_dataset=data
    )
    trainer.train()
    return trainer


def case_grpo_stock():
    return summary(grpo_run("grpo_stock", GRPOTrainer, GRPOConfig, data=prompts(), num_iterations=2))


def case_grpo_none():
    return summary(grpo_run("grpo_none", data=prompts(), num_iterations=2))


def case_relex():
    """RELEX's recorder: every process takes part in the gather of the sharded weights, the main process writes."""
    from safetensors.torch import load_file

    from trl_rlvr_ext.extrapolation.trajectory import delta_path, read_manifest

    trainer = grpo_run("relex", data=prompts(), num_iterations=2, relex_record_steps=1)
    trainer.accelerator.wait_for_everyone()  # the main process's last write has landed (on_train_end) before reading
    directory = trainer.args.relex_trajectory_dir
    base = load_file(os.path.join(directory, "base", "model.safetensors"))
    steps = read_manifest(directory).steps
    deltas = [load_file(delta_path(directory, step)) for step in steps]
    final = {name: base[name].double() + deltas[-1][name].double() for name in base}
    return summary(
        trainer,
        relex={
            "steps": steps,
            "shapes": {name: list(value.shape) for name, value in sorted(base.items())},
            "delta_abs_sums": [sum(d.double().abs().sum().item() for d in step.values()) for step in deltas],
            "final_abs_sum": sum(value.abs().sum().item() for value in final.values()),
        },
    )


def nsr_summary(trainer) -> dict:
    generator = trainer.method("clip_objective").recovery_generator
    return summary(trainer, generator_digest=hashlib.sha256(generator.get_state().numpy().tobytes()).hexdigest())


def case_nsr(mode="nsr"):
    return nsr_summary(grpo_run(mode, data=prompts(), num_iterations=2, learning_rate=0.1, clip_recovery=mode))


# ACPO with a narrow range of widths (base 0.2, at most 0.25), so that its bounds really clip on the tiny model
ACPO_NARROW = {"adaptive_clip": "acpo", "adaptive_clip_alpha": 0.5, "adaptive_clip_max": 0.25}


def case_acpo():
    """ACPO with the global scope (per-bin moments all-reduced at each loss computation) and the off-policy
    diagnostics (a gather of every rank's ratios)."""
    trainer = grpo_run(
        "acpo",
        data=prompts(),
        num_iterations=2,
        learning_rate=0.002,
        temperature=0.05,  # peaked probabilities on the random model: the tokens fill several bins
        off_policy_diagnostics=True,
        **ACPO_NARROW,
    )
    return summary(trainer)


def case_poise():
    """POISE: features from a hook on one decoder layer of the (sharded) model in a no-grad forward, gathered over
    ranks; the probe fitted after the first batch and used from the second (n = 2, no std scaling)."""
    trainer = grpo_run(
        "poise",
        data=prompts(),
        max_steps=3,
        num_generations=2,
        scale_rewards="none",
        value_baseline="poise",
        poise_bootstrap_steps=1,
        poise_warmup_steps=1,
        poise_prompt_pca=2,
        poise_response_pca=2,
        poise_pool_n=4,
    )
    state = trainer.method("poise").baseline.state_dict()
    return summary(trainer, poise_probe={k: v.tolist() for k, v in state["probe"].items()})


# The real pretrained model's converted checkpoint (tests/test_sharding.py resolves it once, before the launch, so the
# two ranks never race to fetch and convert it)
REAL_MODEL = os.environ.get("TRL_RLVR_EXT_REAL_MODEL")


def case_real_model_lora():
    """GRPO + LoRA on the real pretrained model (SmolLM2-135M-Instruct), 2 steps on one generation batch (reused, so
    the second step's ratio moves): the sharded paths on a real 30-layer LM, not only on the toy."""
    if not REAL_MODEL:
        raise RuntimeError(
            "TRL_RLVR_EXT_REAL_MODEL is not set: tests/test_sharding.py sets it to the real model's path."
        )
    opts = grpo_kwargs("real_model_lora", max_completion_length=4, learning_rate=1e-3, num_iterations=2)
    peft = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    trainer = RLVRGRPOTrainer(
        model=REAL_MODEL,
        reward_funcs=dense_reward,
        args=config(RLVRGRPOConfig, **opts),
        train_dataset=prompts(),
        peft_config=peft,
    )
    probe = ShardingProbe(trainer)
    trainer.add_callback(probe)
    trainer.train()
    lora_b = {n: p for n, p in full_params(trainer).items() if "lora_B" in n}
    return summary(
        trainer,
        sharding=probe.sharding,
        lora_digest=digest(lora_b),
        lora_b_abs_sum=sum(p.abs().sum().item() for p in lora_b.values()),
        num_layers=trainer.model.config.num_hidden_layers,
    )


def case_acpo_nsr_delta():
    """ACPO (each rank's own statistics) + NSR rescuing past ACPO's bounds + DelTA's weighted advantages."""
    return nsr_summary(
        grpo_run(
            "acpo_nsr_delta",
            data=prompts(),
            num_iterations=2,
            learning_rate=0.1,
            adaptive_clip_scope="micro_batch",
            clip_recovery="nsr",
            token_credit="delta",
            **ACPO_NARROW,
        )
    )


def curation_state(trainer) -> dict:
    return {
        "state": trainer.method("curation").curation_state.state_dict(),
        "sampler": trainer.method("curation").training_sampler.state_dict(),
    }


def case_self(name="self", reward=third_reward, num_generations=2):
    """SELF; ``self_skip``: 2 prompts per step, right half of the time, so that the first step keeps no prompt and is
    skipped (DDP, FSDP2) or runs with zero gradients (DeepSpeed, with the opt-in)."""
    data = Dataset.from_dict({"prompt": [f"{i}*{i + 3}=" for i in range(12)]})
    trainer = grpo_run(
        name,
        reward=reward,
        data=data,
        num_generations=num_generations,
        curation="self",
        curation_self_recheck_steps=2,
        max_steps=3,
        curation_self_allow_zero_grad_steps=MODE in ("zero2", "zero3"),
    )
    return summary(trainer, curation=curation_state(trainer))


def case_pass_rate():
    data = Dataset.from_dict({"prompt": [f"{i}*{i + 3}=" for i in range(12)]})
    trainer = grpo_run("pass_rate", reward=parity_reward, data=data, curation="pass_rate", max_steps=3)
    return summary(trainer, curation=curation_state(trainer))


def case_dynamic_sampling():
    trainer = grpo_run(
        "dynamic_sampling", reward=half_constant_reward, data=prompts(12), num_generations=2, dynamic_sampling=True
    )
    return summary(trainer, stream=trainer.method("dynamic_sampling").stream.state_dict())


def case_eval_callbacks(**opts):
    """PassAtK and Boundary callbacks on the sharded model (generation and forward passes in lockstep)."""
    args = config(RLVRGRPOConfig, **grpo_kwargs("eval_callbacks", max_steps=1, **opts))
    trainer = RLVRGRPOTrainer(model=MODEL, reward_funcs=dense_reward, args=args, train_dataset=prompts())
    evaluation = Dataset.from_dict({"prompt": [f"{i}-1=" for i in range(5)]})
    pass_at_k = PassAtKCallback(
        evaluation, dense_reward, trainer=trainer, eval_steps=1, num_samples=2, max_new_tokens=4, correct_threshold=0.1
    )
    probes = [{"prompt": f"{i}+{i}=", "completion": str(2 * i)} for i in range(5)]
    boundary = BoundaryProbeCallback(probes, trainer=trainer, eval_steps=1, batch_size=4)
    probe = ShardingProbe(trainer)
    trainer.add_callback(probe)
    trainer.add_callback(pass_at_k)
    trainer.add_callback(boundary)
    trainer.train()
    history = {"pass_at_k": [m for _, m in pass_at_k.history], "boundary": boundary.history}
    return summary(trainer, sharding=probe.sharding, **history)


# ---------------------------------------------------------------------------------------------- LoRA inits
def lora_case(method, trainer_kind="grpo"):
    """The init runs inside the trainer's constructor; the spy records how the base weights were held when it ran."""
    seen = {}
    original = lora_api.init_lora

    def spy(peft_model, name, **options):
        weights = [(n, p) for n, p in peft_model.named_parameters() if "base_layer.weight" in n]
        n, p = weights[0]
        seen.update(
            param=n,
            has_ds_id=hasattr(p, "ds_id"),
            local_numel=p.numel(),
            is_meta=p.is_meta,
            weight_abs_sum=None if p.is_meta or p.numel() == 0 else p.detach().double().abs().sum().item(),
            ds_shape=list(p.ds_shape) if hasattr(p, "ds_shape") else None,
            ds_local_numel=p.ds_tensor.numel() if hasattr(p, "ds_tensor") else None,
            all_partitioned=all(hasattr(q, "ds_id") and q.numel() == 0 for _, q in weights),
        )
        return original(peft_model, name, **options)

    lora_api.init_lora = spy
    try:
        init_kwargs = {"show_progress": False}
        if MODE == "fsdp2" and method in ("pissa", "milora"):  # required under FSDP (refuse_lora_export_fsdp)
            init_kwargs["export_converted_adapter"] = False
        options = {"lora_init": method, "lora_init_kwargs": init_kwargs, "learning_rate": 0.0}
        if trainer_kind == "grpo":
            args = config(RLVRGRPOConfig, **grpo_kwargs(f"lora_{method}", max_steps=1, **options))
            trainer = RLVRGRPOTrainer(
                model=MODEL, reward_funcs=dense_reward, args=args, train_dataset=prompts(), peft_config=lora_config()
            )
        else:
            args = config(ISDPOConfig, **dpo_kwargs(f"isdpo_lora_{method}", max_steps=1, **options))
            trainer = ISDPOTrainer(
                model=MODEL, args=args, train_dataset=make_toy_preference_dataset(8, seed=0), peft_config=lora_config()
            )
    finally:
        lora_api.init_lora = original
    trainer.train()  # learning_rate 0: the weights after the step are the initialised ones, now sharded
    params = full_params(trainer)
    wanted = {n: p for n, p in params.items() if ("lora_" in n and ".default." in n) or "base_layer.weight" in n}
    if RANK == 0:
        torch.save(wanted, os.path.join(OUT, f"lora_{trainer_kind}_{method}.pt"))
    return summary(trainer, seen_at_init=seen, lora_digest=digest(wanted), lora_keys=len(wanted))


# ---------------------------------------------------------------------------------------------- IS-DPO
def dpo_run(name, trainer_cls, config_cls, ref=True, **opts):
    data = make_toy_preference_dataset(8, seed=0)
    args = config(config_cls, **dpo_kwargs(name, **opts))
    # ZeRO-3: the models are loaded after the config exists, so from_pretrained partitions them (zero.Init)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    ref_model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32) if ref else None
    trainer = trainer_cls(model=model, ref_model=ref_model, args=args, train_dataset=data)
    trainer.train()
    return trainer


def case_dpo_stock():
    return summary(dpo_run("dpo_stock", DPOTrainer, DPOConfig))


def case_isdpo_off():
    return summary(dpo_run("isdpo_off", ISDPOTrainer, ISDPOConfig, importance_sampling=False))


def case_isdpo():
    return summary(dpo_run("isdpo", ISDPOTrainer, ISDPOConfig, importance_sampling=True, learning_rate=5e-2))


# ---------------------------------------------------------------------------------------------- refusals
def refusal(fn) -> dict:
    try:
        fn()
    except (ValueError, TypeError, RuntimeError) as error:
        return {"refused": f"{type(error).__name__}: {error}"}
    return {"refused": None}


def case_refuse_fsdp_fallback():
    """FSDP asked through accelerate, but without the relabel accelerate runs DDP: the trainers must say so."""

    def grpo():
        args = config(RLVRGRPOConfig, relabel=False, **grpo_kwargs("refuse_fsdp"))
        RLVRGRPOTrainer(model=MODEL, reward_funcs=dense_reward, args=args, train_dataset=prompts())

    def dpo():
        args = config(ISDPOConfig, relabel=False, **dpo_kwargs("refuse_fsdp_dpo"))
        ISDPOTrainer(model=MODEL, args=args, train_dataset=make_toy_preference_dataset(8, seed=0))

    return {"grpo": refusal(grpo), "dpo": refusal(dpo)}


def case_refuse_self_deepspeed():
    def build():
        data = Dataset.from_dict({"prompt": [f"{i}*{i + 3}=" for i in range(12)]})
        args = config(RLVRGRPOConfig, **grpo_kwargs("refuse_self", curation="self"))
        RLVRGRPOTrainer(model=MODEL, reward_funcs=parity_reward, args=args, train_dataset=data)

    return refusal(build)


def case_refuse_lora_export_fsdp():
    def build():
        args = config(RLVRGRPOConfig, **grpo_kwargs("refuse_export", lora_init="pissa", lora_init_kwargs={}))
        RLVRGRPOTrainer(
            model=MODEL, reward_funcs=dense_reward, args=args, train_dataset=prompts(), peft_config=lora_config()
        )

    return refusal(build)


# ---------------------------------------------------------------------------------------------- kill and resume
def resume_run(resume_from=None):
    """NSR (per-rank generator), pass-rate curation (shared state) and dynamic sampling (shared stream) all on."""
    args = config(
        RLVRGRPOConfig,
        **grpo_kwargs(
            "resume",
            num_generations=2,
            num_iterations=2,  # steps 3 and 4 share a rollout: the clip (and NSR's rescue) is active in step 4
            learning_rate=0.1,
            max_steps=4,
            save_strategy="steps",
            save_steps=2,
            clip_recovery="nsr",
            curation="pass_rate",
            dynamic_sampling=True,
        ),
    )
    if PHASE == "resume" or KILLING:  # the killed run and its resumption share a folder
        args.output_dir = os.path.join(OUT, "main_resume_killed")
    trainer = RLVRGRPOTrainer(model=MODEL, reward_funcs=resume_reward, args=args, train_dataset=prompts(12))
    trainer.train(resume_from_checkpoint=resume_from)
    return trainer


def resume_summary(trainer) -> dict:
    files = sorted(os.listdir(os.path.join(trainer.args.output_dir, f"checkpoint-{KILL_STEP}")))
    return summary(
        trainer,
        checkpoint_files=files,
        generator_digest=hashlib.sha256(
            trainer.method("clip_objective").recovery_generator.get_state().numpy().tobytes()
        ).hexdigest(),
        curation=curation_state(trainer),
        stream=trainer.method("dynamic_sampling").stream.state_dict(),
    )


CASES = {
    "grpo_stock": case_grpo_stock,
    "grpo_none": case_grpo_none,
    "nsr": case_nsr,
    "nsr_expected": lambda: case_nsr("nsr_expected"),
    "acpo": case_acpo,
    "poise": case_poise,
    "acpo_nsr_delta": case_acpo_nsr_delta,
    "self": case_self,
    "self_skip": lambda: case_self("self_skip", parity_reward, num_generations=4),
    "pass_rate": case_pass_rate,
    "dynamic_sampling": case_dynamic_sampling,
    "relex": case_relex,
    "eval_callbacks": case_eval_callbacks,
    "eval_callbacks_no_ds3_gather": lambda: case_eval_callbacks(ds3_gather_for_generation=False),
    **{f"lora_{m}": (lambda m=m: lora_case(m)) for m in LORA_METHODS},
    "isdpo_lora_rlpo": lambda: lora_case("rlpo", "isdpo"),
    "dpo_stock": case_dpo_stock,
    "isdpo_off": case_isdpo_off,
    "isdpo": case_isdpo,
    "real_model_lora": case_real_model_lora,
}
PER_MODE = {  # the cases each mode runs (ZeRO-2 shards no parameter: the real model runs where they are sharded)
    "ddp": [c for c in CASES if c != "eval_callbacks_no_ds3_gather"],
    "zero2": [
        *(c for c in CASES if c not in ("eval_callbacks_no_ds3_gather", "real_model_lora")),
        "refuse_self_deepspeed",
    ],
    "zero3": [*CASES, "refuse_self_deepspeed"],
    "fsdp2": [
        *(c for c in CASES if c != "eval_callbacks_no_ds3_gather"),
        "refuse_fsdp_fallback",
        "refuse_lora_export_fsdp",
    ],
}
CASES.update(
    refuse_fsdp_fallback=case_refuse_fsdp_fallback,
    refuse_self_deepspeed=case_refuse_self_deepspeed,
    refuse_lora_export_fsdp=case_refuse_lora_export_fsdp,
)


def main() -> None:
    global KILLING
    if PHASE == "main":
        for name in PER_MODE[MODE]:
            record(name, CASES[name])
        if os.environ.get(KIT_CASES) and ONLY is None:  # the kit's cases (test_sharding.py), in the same processes
            run_cases(MODE, MODEL, os.environ[KIT_CASES], OUT)
        record("resume_uninterrupted", lambda: resume_summary(resume_run()))
        if ONLY is None or "resume_killed" in ONLY:
            KILLING = True
            resume_run()  # dies in step 3 (resume_reward); never returns
            RESULTS["resume_killed"] = {"error": "the kill run was not killed"}
    else:
        checkpoint = os.path.join(OUT, "main_resume_killed", f"checkpoint-{KILL_STEP}")
        record("resume_resumed", lambda: resume_summary(resume_run(checkpoint)))
    with open(os.path.join(OUT, f"{PHASE}_rank{RANK}.json"), "w") as f:
        json.dump(RESULTS, f, default=str)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # CPU_STACK 5: plain gloo DDP sometimes crashed at interpreter exit after finishing


if __name__ == "__main__":
    main()
