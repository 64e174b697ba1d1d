"""``assert_resume_bit_exact``: a run killed with SIGKILL between checkpoints resumes and ends as if never stopped.

Each run is a fresh process (``python -m trl_rlvr_ext.testing.resume``): an uninterrupted run, a run that kills
itself with ``SIGKILL`` in the step after a checkpoint (inside the reward function, mid-generation, when the step
generates; else at the end of that step, before the next checkpoint), and the killed run resumed from its checkpoint.
No Python clean-up runs at the kill, as in a preempted job.
"""

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .runs import digit_reward, grpo_kwargs, import_path, load, prompt_dataset, tiny_model
from .stock import checkpoint_differences, listed


KILL_ENV = "TRL_RLVR_EXT_KIT_KILL_AT"


def _kill_at() -> int | None:
    value = os.environ.get(KILL_ENV)
    return None if value is None else int(value)


def _killing(reward):
    """``reward``, which kills the process when called in the step after the checkpoint (``trainer_state`` is the
    keyword TRL passes every reward function)."""

    @functools.wraps(reward)
    def wrapped(*args, trainer_state=None, **kwargs):
        if trainer_state is not None and trainer_state.global_step == _kill_at():
            os.kill(os.getpid(), signal.SIGKILL)
        return reward(*args, trainer_state=trainer_state, **kwargs)

    return wrapped


def run(spec: dict, output_dir: str, resume_from: str | None) -> None:
    """One run of the check (the launched process's side)."""
    from transformers import TrainerCallback

    class KillAfterStep(TrainerCallback):  # the step after the checkpoint generated nothing: kill at its end
        def on_step_end(self, args, state, control, **kwargs):
            if _kill_at() is not None and state.global_step == _kill_at() + 1:
                os.kill(os.getpid(), signal.SIGKILL)

    every = spec["save_steps"]
    settings = {**spec["training_args"], **spec["options"], "max_steps": 2 * every}
    settings.update(save_strategy="steps", save_steps=every)
    args = load(spec["config_cls"])(**grpo_kwargs(output_dir, **settings))
    rewards = [_killing(load(path)) for path in spec["reward_funcs"]]
    trainer = load(spec["trainer_cls"])(
        model=spec["model"], reward_funcs=rewards, args=args, train_dataset=prompt_dataset(spec["prompts"])
    )
    trainer.add_callback(KillAfterStep())
    trainer.train(resume_from_checkpoint=resume_from)


def _launch(spec_path: Path, output_dir: Path, kill_at=None, resume_from=None) -> subprocess.CompletedProcess:
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }
    env.pop(KILL_ENV, None)
    if kill_at is not None:
        env[KILL_ENV] = str(kill_at)
    cmd = [
        sys.executable,
        "-m",
        __name__,
        str(spec_path),
        str(output_dir),
        *([str(resume_from)] if resume_from else []),
    ]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200, check=False)


def _step_logs(checkpoint: Path) -> dict:
    with open(checkpoint / "trainer_state.json") as f:
        history = json.load(f)["log_history"]
    return {log["step"]: {k: v for k, v in log.items() if k != "step_time"} for log in history if "loss" in log}


def resume_problems(full: Path, resumed: Path, steps) -> list[str]:
    """How the resumed run's checkpoint differs from the uninterrupted run's (`checkpoint_differences`) and what its
    steps ``steps`` logged."""
    problems = checkpoint_differences(full, resumed, reference="the uninterrupted run")
    want, got = _step_logs(full), _step_logs(resumed)
    for step in steps:
        if got.get(step) != want.get(step):
            problems.append(f"step {step} logged {got.get(step)} instead of {want.get(step)}")
    return problems


def assert_resume_bit_exact(
    options: dict,
    *,
    output_dir=None,
    model: str | None = None,
    config_cls="trl_rlvr_ext:RLVRGRPOConfig",
    trainer_cls="trl_rlvr_ext:RLVRGRPOTrainer",
    reward_funcs=digit_reward,
    training_args: dict | None = None,
    prompts: int = 16,
    save_steps: int = 2,
) -> Path:
    """Train ``2 * save_steps`` steps with ``options`` uninterrupted; train again, killed with SIGKILL in step
    ``save_steps + 1`` (after checkpoint ``save_steps``); resume it; and assert that the resumed run's last checkpoint
    equals the uninterrupted one's: the weights and every state file (the method's own included) byte for byte, the
    optimizer, scheduler and RNG states, and the logged values of the resumed steps.

    Args:
        options: the method's config fields.
        config_cls, trainer_cls, reward_funcs: classes and functions the runs import (objects defined at the top
            level of an importable module, or ``"module:name"``); ``reward_funcs`` one or a list.
        training_args: settings over `trl_rlvr_ext.testing.runs.grpo_kwargs` (which reuses each batch twice).

    Returns:
        the folder holding the runs (``full/``, ``killed/``).
    """
    root = Path(output_dir or tempfile.mkdtemp(prefix="trl_rlvr_ext_resume_"))
    root.mkdir(parents=True, exist_ok=True)
    rewards = reward_funcs if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    spec = {
        "options": dict(options),
        "config_cls": import_path(config_cls),
        "trainer_cls": import_path(trainer_cls),
        "reward_funcs": [import_path(r) for r in rewards],
        "training_args": dict(training_args or {}),
        "prompts": prompts,
        "save_steps": save_steps,
        "model": model or tiny_model(),
    }
    spec_path = root / "resume_spec.json"
    spec_path.write_text(json.dumps(spec, sort_keys=True))
    full, killed = root / "full", root / "killed"
    for what, proc in (
        ("uninterrupted run", _launch(spec_path, full)),
        ("killed run", _launch(spec_path, killed, kill_at=save_steps)),
    ):
        expected = -signal.SIGKILL if what == "killed run" else 0
        assert proc.returncode == expected, f"The {what} exited with {proc.returncode}:\n{proc.stderr[-4000:]}"
    checkpoints = sorted(p.name for p in killed.glob("checkpoint-*"))
    assert checkpoints == [f"checkpoint-{save_steps}"], f"the killed run left {checkpoints}"
    proc = _launch(spec_path, killed, resume_from=killed / f"checkpoint-{save_steps}")
    assert proc.returncode == 0, f"The resumed run failed:\n{proc.stderr[-4000:]}"
    last = f"checkpoint-{2 * save_steps}"
    problems = resume_problems(full / last, killed / last, range(save_steps + 1, 2 * save_steps + 1))
    assert not problems, f"With {options}, the resumed run is not the uninterrupted one: " + listed(problems)
    return root


if __name__ == "__main__":
    spec_file, output, *resume = sys.argv[1:]
    run(json.loads(Path(spec_file).read_text()), output, resume[0] if resume else None)
    sys.exit(0)
