"""A hard kill survives: runs killed with SIGKILL between checkpoints resume and continue to the bit (CPU).

Each run is a subprocess (this file run as a script). The killed run kills itself with ``os.kill(os.getpid(),
SIGKILL)`` in the middle of the step after a checkpoint: GRPO inside the reward function (mid-generation), IS-DPO at
the start of the step, offline curation inside the reward function while a shard is being scored. (The GRPO runs go
through the method authors' kit, `trl_rlvr_ext.testing.assert_resume_bit_exact`, which works the same way.) No Python cleanup
runs. A fresh subprocess then resumes, and its result is compared with an uninterrupted run's.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from trl_rlvr_ext.testing import assert_resume_bit_exact


ROOT = Path(__file__).resolve().parents[1]
KILL_ENV = "TRL_RLVR_EXT_TEST_KILL_AT"  # the step (or dataset row) at which the child kills itself


# ---------------------------------------------------------------------------------------------- the child side
def _kill_here():
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_at() -> int | None:
    value = os.environ.get(KILL_ENV)
    return None if value is None else int(value)


def grpo_reward(completions, curation_row, **kwargs):
    """Dense, prompt-dependent, and sometimes 1.0 (so curation's correctness test has both outcomes)."""
    return [
        float((row + sum(map(ord, c))) % 3 == 0) + sum(map(ord, c)) % 7 / 10
        for row, c in zip(curation_row, completions)
    ]


def run_isdpo(model_path: str, output_dir: str, max_steps: int, resume: str | None):
    from transformers import TrainerCallback

    from trl_rlvr_ext import ISDPOConfig, ISDPOTrainer
    from trl_rlvr_ext.toy.preference import make_toy_preference_dataset

    class KillAtStep(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            if state.global_step == _kill_at():
                _kill_here()  # between checkpoints: the step after the checkpoint at `global_step` has begun

    args = ISDPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=4,
        max_steps=max_steps,
        learning_rate=1e-2,
        save_strategy="steps",
        save_steps=2,
        logging_steps=1,
        report_to="none",
        use_cpu=True,
        bf16=False,
        activation_checkpointing=False,
        max_length=32,
        seed=3,
    )
    trainer = ISDPOTrainer(
        model_path, args=args, train_dataset=make_toy_preference_dataset(32, seed=0), callbacks=[KillAtStep()]
    )
    trainer.train(resume_from_checkpoint=resume)


def curate_reward(completions, idx, **kwargs):
    log = os.environ.get("TRL_RLVR_EXT_TEST_SCORED_LOG")
    if log:  # which rows this process scored, to prove that a resumed run recomputes nothing finished
        with open(log, "a") as f:
            f.write(json.dumps(sorted(set(idx))) + "\n")
    if _kill_at() in idx:
        _kill_here()  # mid-shard: its samples are generated, its scores not yet written
    return [float((i + sum(map(ord, c))) % 2 == 0) for i, c in zip(idx, completions)]


def run_curate(model_path: str, output_dir: str):
    from datasets import Dataset

    from trl_rlvr_ext.curation.offline import score_dataset

    data = Dataset.from_dict({"prompt": [f"{i}*3=" for i in range(10)], "idx": list(range(10))})
    score_dataset(
        model_path, data, curate_reward, output_dir, num_samples=4, max_new_tokens=5, shard_size=3, progress=False
    )


if __name__ == "__main__":
    kind, model_path, output_dir, *rest = sys.argv[1:]
    if kind == "curate":
        run_curate(model_path, output_dir)
    else:  # isdpo
        run_isdpo(model_path, output_dir, int(rest[0]), rest[1] if len(rest) > 1 else None)
    sys.exit(0)


# ---------------------------------------------------------------------------------------------- the test side
def _run(args: list[str], kill_at: int | None = None, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRL_EXPERIMENTAL_SILENCE": "1",
        **(extra_env or {}),
    }
    env.pop(KILL_ENV, None)
    if kill_at is not None:
        env[KILL_ENV] = str(kill_at)
    return subprocess.run(
        [sys.executable, __file__, *map(str, args)], capture_output=True, text=True, env=env, timeout=600, check=False
    )


def _ok(result: subprocess.CompletedProcess):
    assert result.returncode == 0, result.stderr[-4000:]


def _killed(result: subprocess.CompletedProcess):
    assert result.returncode == -signal.SIGKILL, (
        f"expected a SIGKILL, got {result.returncode}:\n{result.stderr[-4000:]}"
    )


def _same_weights(a: Path, b: Path):
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes(), f"{a} != {b}"


def _step_logs(checkpoint: Path) -> dict:
    with open(checkpoint / "trainer_state.json") as f:
        return {log["step"]: log for log in json.load(f)["log_history"] if "loss" in log}


def _drop_timing(log: dict) -> dict:
    return {k: v for k, v in log.items() if k != "step_time"}


# The GRPO runs of the kill-and-resume check: the ratio moves off 1 (num_iterations=2), so NSR's rescue draws matter
GRPO_RESUME = {
    "per_device_train_batch_size": 4,
    "num_generations": 2,
    "max_completion_length": 6,
    "learning_rate": 0.05,
    "seed": 7,
    "loss_type": "dapo",
}


@pytest.mark.slow
@pytest.mark.parametrize("curation", ["pass_rate", "self"])
def test_grpo_with_nsr_and_curation_survives_sigkill(tiny_model_path, tmp_path, curation):
    """Through the method authors' kit (`assert_resume_bit_exact`): killed in step 3 (mid-generation, after
    checkpoint-2), resumed, checkpoint-4 equals the uninterrupted run's (weights, optimizer, NSR's generator states,
    curation's state) and steps 3-4 log the same values (NSR's draws, curation, rewards)."""
    options = {
        "clip_recovery": "nsr",
        "curation": curation,
        "curation_correct_threshold": 1.0,
        "curation_self_recheck_steps": 2,
    }
    root = assert_resume_bit_exact(
        options,
        model=tiny_model_path,
        output_dir=tmp_path,
        reward_funcs=grpo_reward,
        training_args=GRPO_RESUME,
        prompts=8,
    )
    full = root / "full" / "checkpoint-4"
    assert (full / "curation_state.json").is_file() and (full / "clip_recovery_rng_state_0.pth").is_file()
    assert any(log["clip_recovery/high_frac"] + log["clip_recovery/low_frac"] > 0 for log in _step_logs(full).values())


@pytest.mark.slow
def test_isdpo_survives_sigkill(tiny_model_path, tmp_path):
    full, killed = tmp_path / "full", tmp_path / "killed"
    _ok(_run(["isdpo", tiny_model_path, full, 4]))
    _killed(_run(["isdpo", tiny_model_path, killed, 4], kill_at=2))
    assert sorted(p.name for p in killed.glob("checkpoint-*")) == ["checkpoint-2"]
    _ok(_run(["isdpo", tiny_model_path, killed, 4, killed / "checkpoint-2"]))

    _same_weights(full / "checkpoint-2", killed / "checkpoint-2")
    _same_weights(full / "checkpoint-4", killed / "checkpoint-4")  # the same parameters after 2 more steps
    full_logs, resumed_logs = _step_logs(full / "checkpoint-4"), _step_logs(killed / "checkpoint-4")
    for step in (3, 4):
        # TRL's DPOTrainer counts `num_tokens` on the trainer object (`_total_train_tokens`), which no checkpoint
        # holds: after any resume, stock TRL's count restarts at 0. Every other logged value must match.
        resumed, uninterrupted = _drop_timing(resumed_logs[step]), _drop_timing(full_logs[step])
        assert resumed.pop("num_tokens") < uninterrupted.pop("num_tokens")
        assert resumed == uninterrupted


@pytest.mark.slow
def test_offline_curate_survives_sigkill_mid_shard(tiny_model_path, tmp_path):
    clean, killed, scored_log = tmp_path / "clean", tmp_path / "killed", tmp_path / "scored.jsonl"
    _ok(_run(["curate", tiny_model_path, clean]))
    # 10 rows in shards of 3: rows 6..8 are shard 2; the kill comes while shard 2's samples are graded
    _killed(
        _run(["curate", tiny_model_path, killed], kill_at=7, extra_env={"TRL_RLVR_EXT_TEST_SCORED_LOG": scored_log})
    )
    shards = killed / "shards"
    assert sorted(p.name for p in shards.iterdir() if p.suffix == ".jsonl") == [
        "shard-00000.jsonl",
        "shard-00001.jsonl",
    ]
    finished = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in shards.glob("*.jsonl")}
    scored_log.write_text("")
    _ok(_run(["curate", tiny_model_path, killed], extra_env={"TRL_RLVR_EXT_TEST_SCORED_LOG": scored_log}))

    rescored = {row for line in scored_log.read_text().splitlines() for row in json.loads(line)}
    assert rescored == {6, 7, 8, 9}  # only the unfinished shards 2 and 3: nothing finished was recomputed
    for name, (mtime, content) in finished.items():
        assert (shards / name).stat().st_mtime_ns == mtime and (shards / name).read_bytes() == content
    for i in range(4):  # nothing lost: every shard equals the uninterrupted run's
        name = f"shard-{i:05d}.jsonl"
        assert (shards / name).read_text() == (clean / "shards" / name).read_text()
    assert not [p for p in shards.iterdir() if p.suffix != ".jsonl"], "a partial shard file was left behind"
