"""``assert_sharded_equal``: one short run under DeepSpeed ZeRO-3 and FSDP2 with two real CPU processes equals DDP's.

Each mode is one ``accelerate launch`` of two processes (gloo) with the package's own accelerate configs
(``trl_rlvr_ext/recipes/accelerate_configs``), ``--mixed_precision no`` on the command line (the configs say bf16 for
GPUs; the comparison is in float32). The ranks run `trl_rlvr_ext.testing.distributed`. The first DeepSpeed launch
JIT-builds ``deepspeed_shm_comm`` into ``TORCH_EXTENSIONS_DIR`` (default ``~/.cache/trl_rlvr_ext/torch_extensions``),
30-150 s once.
"""

import importlib.util
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from .runs import dense_reward, import_path, tiny_model


PACKAGE = Path(__file__).resolve().parents[1]
CONFIGS = PACKAGE / "recipes" / "accelerate_configs"
CONFIG_OF = {
    "ddp": "multi_gpu.yaml",
    "zero2": "deepspeed_zero2.yaml",
    "zero3": "deepspeed_zero3.yaml",
    "fsdp2": "fsdp2.yaml",
}
TORCH_EXTENSIONS_DEFAULT = str(Path.home() / ".cache" / "trl_rlvr_ext" / "torch_extensions")
TIMEOUT = 1200


def accelerate_command(config: str, script: str, *script_args: str, module: bool = False) -> tuple[list[str], dict]:
    """The 2-process launch of ``script`` (a module name with ``module``) with one of the package's accelerate
    configs, on a free port, and its environment: the launched processes import what this one imports."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    accelerate = Path(sys.executable).with_name("accelerate")
    options = ["--num_processes", "2", "--mixed_precision", "no", "--main_process_port", str(port)]
    target = ["-m", script] if module else [script]
    cmd = [str(accelerate), "launch", "--config_file", str(CONFIGS / config), *options, *target, *script_args]
    paths = [str(PACKAGE.parent), *(p for p in sys.path if p and os.path.isdir(p))]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "HF_HUB_OFFLINE": "1",
        "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR") or TORCH_EXTENSIONS_DEFAULT,
        "PYTHONPATH": os.pathsep.join(dict.fromkeys([*paths, *filter(None, [os.environ.get("PYTHONPATH")])])),
    }
    env.pop("ACCELERATE_USE_CPU", None)
    return cmd, env


def needs_deepspeed(mode: str) -> None:
    if mode in ("zero2", "zero3") and importlib.util.find_spec("deepspeed") is None:
        raise RuntimeError(
            f"{mode} needs deepspeed: pip install deepspeed (gcc and ninja build its CPU communication op once)."
        )


def launch_cases(mode: str, model: str, cases: dict, out: Path) -> list[dict]:
    """Run ``cases`` (see `trl_rlvr_ext.testing.distributed`) in one 2-process launch of ``mode``; the two ranks'
    records."""
    needs_deepspeed(mode)
    out.mkdir(parents=True, exist_ok=True)
    spec = out / "kit_cases.json"
    spec.write_text(json.dumps(cases, sort_keys=True))
    module = "trl_rlvr_ext.testing.distributed"
    cmd, env = accelerate_command(CONFIG_OF[mode], module, mode, model, str(spec), str(out), module=True)
    with open(out / "kit.log", "w") as log:
        proc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=TIMEOUT, check=False)
    ranks = [out / f"kit_rank{r}.json" for r in (0, 1)]
    if proc.returncode != 0 or not all(r.exists() for r in ranks):
        tail = (out / "kit.log").read_text(errors="replace")[-6000:]
        raise AssertionError(f"The {mode} launch failed (exit code {proc.returncode}):\n{tail}")
    return [json.loads(r.read_text()) for r in ranks]


def sharding_problems(mode: str, sharding: dict) -> list[str]:
    """How a run's recorded `sharding_of` contradicts ``mode`` (empty when the run really ran under it)."""
    problems = []
    if mode == "ddp" and sharding["wrapped"] != "DistributedDataParallel":
        problems.append(f"DDP wrapped the model in {sharding['wrapped']}")
    stage = {"zero2": 2, "zero3": 3}.get(mode)
    if stage and (sharding["wrapped"] != "DeepSpeedEngine" or sharding.get("zero_stage") != stage):
        problems.append(f"not a DeepSpeed ZeRO-{mode[-1]} engine: {sharding}")
    if mode == "zero3":  # partitioned: half of every attention weight on each rank
        if (
            not sharding.get("ds_local_numel", 0) * 2
            == sharding.get("ds_numel")
            == math.prod(sharding.get("ds_shape", [-1]))
        ):
            problems.append(f"ZeRO-3 did not partition the weights in two: {sharding}")
    elif "ds_local_numel" in sharding:
        problems.append(f"{mode} partitioned the weights as ZeRO-3 does: {sharding}")
    if mode == "fsdp2":
        if not (sharding["fsdp_module"] and sharding["all_dtensor"] and sharding.get("placements") == ["S(0)"]):
            problems.append(f"FSDP2 did not shard every parameter (DTensor, Shard(0)): {sharding}")
        elif sharding["local_shape"][0] * 2 != sharding["full_shape"][0]:
            problems.append(f"FSDP2 did not halve the weights: {sharding}")
    return problems


def log_problems(got: list[dict], want: list[dict], atol: float, what: str) -> list[str]:
    """How two runs' step logs differ beyond ``atol`` (None must match None, NaN must match NaN)."""
    if len(got) != len(want) or not got:
        return [f"{what}: {len(got)} logged steps, expected {len(want)}"]
    problems = []
    for step, (g, w) in enumerate(zip(got, want), 1):
        if set(g) != set(w):
            problems.append(f"{what} step {step}: keys differ: {sorted(set(g) ^ set(w))}")
            continue
        for key, b in w.items():
            a = g[key]
            if b is None or (isinstance(b, float) and math.isnan(b)):
                ok = a is None if b is None else isinstance(a, float) and math.isnan(a)
            else:
                ok = isinstance(a, (int, float)) and abs(a - b) <= atol
            if not ok:
                problems.append(f"{what} step {step} {key}: {a} vs {b}")
    return problems


def assert_logs_close(got: list[dict], want: list[dict], atol: float, what: str) -> None:
    problems = log_problems(got, want, atol, what)
    assert not problems, "\n".join(problems)


def case_problems(mode: str, ranks: list[dict], ddp: list[dict], atol: float, rtol: float) -> list[str]:
    """Everything wrong with one case under ``mode`` against DDP: errors, ranks that disagree, no real sharding, logs
    beyond ``atol``, a parameter sum beyond ``rtol``."""
    for name, runs in ((mode, ranks), ("ddp", ddp)):
        errors = [run["traceback"] for run in runs if "error" in run]
        if errors:
            return [f"the {name} run failed:\n{errors[0]}"]
    problems = []
    for name, runs in ((mode, ranks), ("ddp", ddp)):
        if runs[0]["param_digest"] != runs[1]["param_digest"] or runs[0]["logs"] != runs[1]["logs"]:
            problems.append(f"{name}: the two ranks ended with different parameters or logs")
        problems += [f"{name}: {p}" for p in sharding_problems(name, runs[0]["sharding"])]
        problems += [f"{name}: world size {run['world_size']}" for run in runs if run["world_size"] != 2]
    problems += log_problems(ranks[0]["logs"], ddp[0]["logs"], atol, f"{mode} vs ddp")
    got, want = ranks[0]["param_abs_sum"], ddp[0]["param_abs_sum"]
    if abs(got - want) > rtol * abs(want):
        problems.append(f"{mode} vs ddp: sum of |parameters| {got} vs {want} (rtol {rtol})")
    return problems


def sharded_case(
    options: dict,
    config_cls="trl_rlvr_ext:RLVRGRPOConfig",
    trainer_cls="trl_rlvr_ext:RLVRGRPOTrainer",
    reward_funcs=dense_reward,
    training_args: dict | None = None,
    prompts: int = 16,
) -> dict:
    """One case of a launch (`trl_rlvr_ext.testing.distributed`), as `assert_sharded_equal` hands it to its launcher."""
    return {
        "options": dict(options),
        "config_cls": import_path(config_cls),
        "trainer_cls": import_path(trainer_cls),
        "reward_funcs": import_path(reward_funcs),
        "training_args": dict(training_args or {}),
        "prompts": prompts,
    }


def assert_sharded_equal(
    options: dict,
    backends=("zero3", "fsdp2"),
    *,
    model: str | None = None,
    output_dir=None,
    config_cls="trl_rlvr_ext:RLVRGRPOConfig",
    trainer_cls="trl_rlvr_ext:RLVRGRPOTrainer",
    reward_funcs=dense_reward,
    training_args: dict | None = None,
    prompts: int = 16,
    atol: float = 1e-5,
    rtol: float = 1e-6,
    launcher=None,
) -> dict:
    """Train with ``options`` in two CPU processes under DDP and under each of ``backends`` (``zero2``, ``zero3``,
    ``fsdp2``), and assert that each sharded run equals DDP's: every logged value of every step within ``atol``,
    the sum of |parameters| within ``rtol``, the two ranks identical, and the parameters really sharded (ZeRO-3: each
    rank holds half of every attention weight; FSDP2: every parameter a DTensor sharded on dim 0).

    Args:
        options: the method's config fields.
        config_cls, trainer_cls, reward_funcs: classes and functions the launched processes import, as objects
            defined at the top level of an importable module or as ``"module:name"`` (a user's own method: its
            module must be importable from this process's ``sys.path``, which the launches inherit).
        training_args: settings over `trl_rlvr_ext.testing.distributed.distributed_kwargs` (2 steps on a reused
            batch, 8 completions per step).
        launcher: ``launcher(mode, cases) -> [rank 0 records, rank 1 records]`` to run the cases some other way
            (a test suite that runs them inside launches it makes anyway); default: one launch per mode.

    Returns:
        ``{mode: [rank 0 record, rank 1 record]}`` (DDP included), for further checks of the method's metrics.
    """
    case = sharded_case(options, config_cls, trainer_cls, reward_funcs, training_args, prompts)
    unknown = sorted(set(backends) - set(CONFIG_OF) - {"ddp"})
    if unknown or not backends:
        raise ValueError(f"backends {list(backends)}: choose among {sorted(set(CONFIG_OF) - {'ddp'})}")
    if launcher is None:
        root = Path(output_dir or tempfile.mkdtemp(prefix="trl_rlvr_ext_sharded_"))
        model = model or tiny_model()

        def launcher(mode, cases):
            return launch_cases(mode, model, cases, root / mode)

    records = {mode: [ranks["case"] for ranks in launcher(mode, {"case": case})] for mode in ("ddp", *backends)}
    problems = [p for mode in backends for p in case_problems(mode, records[mode], records["ddp"], atol, rtol)]
    assert not problems, f"With {options}, the sharded runs differ from DDP's:\n" + "\n".join(problems)
    return records
