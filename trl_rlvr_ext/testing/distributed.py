"""What each process of a 2-process CPU launch runs and records (the ranks' side of `assert_sharded_equal`).

Launched with ``accelerate launch ... -m trl_rlvr_ext.testing.distributed <mode> <cases.json> <out_dir>``: every case
of the JSON (``{name: {"options", "config_cls", "trainer_cls", "reward_funcs", "training_args", "prompts"}}``, the
classes and functions as ``"module:name"`` import paths) trains in turn in the same two processes, and each rank
writes ``<out_dir>/kit_rank<k>.json``: per case the per-step logs, a digest of the full parameters, and how the
parameters were held (the evidence that the run really sharded).

On CPU accelerate silently runs an FSDP config as DDP, so for ``fsdp2`` the distributed type is relabelled MULTI_GPU
right after each config is built (the device stays CPU and the process group gloo); without it the trainers refuse.
This relabel is for these checks only, never package behaviour.
"""

import hashlib
import json
import os
import sys
import traceback


def distributed_config(cls, mode: str, relabel: bool = True, **kwargs):
    """A trainer config for this launch. accelerate's state singletons are reset first, so that each trainer of a
    sequence starts from a clean state; ``fsdp2``: the relabel of the module docstring."""
    from accelerate.state import AcceleratorState
    from accelerate.utils import DistributedType

    AcceleratorState._reset_state(reset_partial_state=True)
    args = cls(**kwargs)
    if mode == "fsdp2" and relabel:
        args.distributed_state.distributed_type = DistributedType.MULTI_GPU
    return args


def distributed_kwargs(output_dir, **overrides) -> dict:
    """The launches' GRPO settings: 8 completions per step in whole groups per rank, float32, 2 steps on a reused
    batch (the ratio moves in the second)."""
    kwargs = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_completion_length": 6,
        "learning_rate": 0.05,
        "max_steps": 2,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "bf16": False,
        "gradient_checkpointing": False,
        "seed": 0,
    }
    kwargs.update(overrides)
    return kwargs


def is_dtensor(param) -> bool:
    return type(param).__name__ == "DTensor"


def full_params(trainer) -> dict:
    """Every parameter in full (ZeRO-3: gathered; FSDP2: DTensor.full_tensor()), the same on every rank."""
    named = list(trainer.model.named_parameters())
    if trainer.is_deepspeed_enabled and hasattr(named[0][1], "ds_id"):
        import deepspeed

        with deepspeed.zero.GatheredParameters([p for _, p in named]):
            return {n: p.detach().clone() for n, p in named}
    return {n: (p.full_tensor() if is_dtensor(p) else p).detach().clone() for n, p in named}


def digest(tensors: dict) -> str:
    import torch

    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def sharding_of(trainer) -> dict:
    """What the run really was: the engine / wrapper and how one attention weight is held on this rank."""
    from torch.distributed.fsdp import FSDPModule

    name, param = next((n, p) for n, p in trainer.model.named_parameters() if "q_proj" in n and "weight" in n)
    out = {"param": name, "wrapped": type(trainer.model_wrapped).__name__, "model": type(trainer.model).__name__}
    out["distributed_type"] = str(trainer.accelerator.distributed_type)
    if trainer.is_deepspeed_enabled:
        out["zero_stage"] = trainer.model_wrapped.zero_optimization_stage()
    if hasattr(param, "ds_id"):
        out.update(ds_shape=list(param.ds_shape), ds_local_numel=param.ds_tensor.numel(), ds_numel=param.ds_numel)
    out["fsdp_module"] = isinstance(trainer.model, FSDPModule)
    out["not_dtensor"] = [n for n, p in trainer.model.named_parameters() if not is_dtensor(p)]
    out["all_dtensor"] = not out["not_dtensor"]
    if is_dtensor(param):
        out.update(
            placements=[str(p) for p in param.placements],
            local_shape=list(param.to_local().shape),
            full_shape=list(param.shape),
        )
    return out


def logs_of(trainer) -> list[dict]:
    """The per-step logs, without wall-clock values (``*time*``, ``*per_second*``, ``*_seconds``: each rank's own)."""
    return [
        {k: v for k, v in log.items() if "time" not in k and "per_second" not in k and not k.endswith("_seconds")}
        for log in trainer.state.log_history
        if "loss" in log
    ]


def summary(trainer, sharding=None, **extra) -> dict:
    """A trained trainer's record: world size, sharding, logs, a digest and sums of the full parameters."""
    import torch

    params = full_params(trainer)
    flat = torch.cat([p.double().flatten() for p in params.values()])
    return {
        "world_size": trainer.accelerator.num_processes,
        "sharding": sharding or sharding_of(trainer),
        "logs": logs_of(trainer),
        "param_digest": digest(params),
        "param_sum": flat.sum().item(),
        "param_abs_sum": flat.abs().sum().item(),
        **extra,
    }


def run_case(mode: str, model: str, output_dir: str, case: dict) -> dict:
    """Train one case of a launch and return its `summary`."""
    from .runs import load, prompt_dataset

    settings = distributed_kwargs(output_dir, **case.get("training_args", {}), **case.get("options", {}))
    args = distributed_config(load(case["config_cls"]), mode, **settings)
    trainer = load(case["trainer_cls"])(
        model=model,
        reward_funcs=load(case["reward_funcs"]),
        args=args,
        train_dataset=prompt_dataset(case.get("prompts", 16)),
    )
    trainer.train()
    return summary(trainer)


def run_cases(mode: str, model: str, spec_path: str, out: str) -> None:
    """Every case of the JSON at ``spec_path``; this rank's records in ``<out>/kit_rank<k>.json`` after each."""
    with open(spec_path) as f:
        cases = json.load(f)
    rank, results = int(os.environ["RANK"]), {}
    for name, case in cases.items():
        try:
            results[name] = run_case(mode, model, os.path.join(out, f"kit_{name}"), case)
        except Exception as error:  # noqa: BLE001 -- the checking side reports the case and its traceback
            results[name] = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
        with open(os.path.join(out, f"kit_rank{rank}.json"), "w") as f:
            json.dump(results, f, default=str)


if __name__ == "__main__":
    import faulthandler

    faulthandler.enable()  # a rank's native crash shows its Python stack in the launch log
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    mode, model, spec_path, out = sys.argv[1:5]
    run_cases(mode, model, spec_path, out)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # plain gloo DDP sometimes crashed at interpreter exit after finishing
