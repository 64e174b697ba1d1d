"""An extrapolated arm's model (`design.Extrapolation`): RELEX fits the trajectory that another arm's same-seed run
recorded and writes the checkpoint at the target step, which the run then evaluates like any trained model.

The source run records its trajectory with ``relex_record_steps`` (`RLVRGRPOConfig`) into the folder its arm's
``relex_trajectory_dir`` names, else into its trainer's output folder (``<run>/train/relex_trajectory``, the config's
default). A record restored from a study's records file carries no trajectory: the source run must then be run again
here, and the error says so.
"""

from pathlib import Path

from .design import Arm, StudyTask
from .run_files import result_path, run_dir


TRAJECTORY = Path("train") / "relex_trajectory"


def trajectory_dir(out_dir: Path, task: str, source: str, seed: int, source_config: dict | None = None) -> Path:
    """Where a source run's trajectory is: the folder its config names (``relex_trajectory_dir`` in
    ``source_config``, the source arm's config as it ran), else its trainer's output folder's ``relex_trajectory``
    (the config's default)."""
    configured = (source_config or {}).get("relex_trajectory_dir")
    return Path(configured) if configured else run_dir(out_dir, task, source, seed) / TRAJECTORY


def extrapolated_model(
    out_dir: Path,
    task: StudyTask,
    arm: Arm,
    seed: int,
    base_path: str,
    folder: Path,
    source_config: dict | None = None,
):
    """``(model, tokenizer, record)``: the checkpoint RELEX extrapolates from the source's same-seed trajectory
    (`trajectory_dir`, with the source arm's ``source_config``; written under ``folder / "relex"``), loaded on the
    base model as the trainer loads it, and what the record keeps of the fit (the settings and RELEX's variance
    report: explained variance and R² over the tensors)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_rlvr_ext.extrapolation import relex_trajectory
    from trl_rlvr_ext.extrapolation.trajectory import read_manifest

    spec = arm.extrapolate
    source = trajectory_dir(out_dir, task.name, spec.source, seed, source_config)
    if not (source / "manifest.json").is_file():
        finished = result_path(out_dir, task.name, spec.source, seed)
        how = (
            f"its result {finished} exists without one (a record restored from a records file keeps no weights): "
            "delete that result.json and run the source arm again, then this one"
            if finished.is_file()
            else f"run {spec.source!r} seed {seed} first (list it before {arm.name!r})"
        )
        raise ValueError(
            f"Arm {arm.name!r} extrapolates {spec.source!r}'s trajectory, but {source} holds none: {how}."
        )
    manifest = read_manifest(str(source))
    if manifest.steps[-1] < spec.history_steps:
        raise ValueError(
            f"Arm {arm.name!r} fits {spec.history_steps} history steps, but {spec.source!r} seed {seed} recorded "
            f"steps up to {manifest.steps[-1]}: train the source for at least {spec.history_steps} steps."
        )
    output = folder / "relex"
    report = relex_trajectory(
        str(source), str(output), spec.history_steps, [spec.target_step], rank=spec.rank, mode="extrapolate"
    )
    checkpoint = output / f"step{spec.target_step}"
    tokenizer = AutoTokenizer.from_pretrained(base_path)
    if manifest.kind == "adapter":  # the adapter on the base, in the dtype the trainer loads ("auto")
        from peft import PeftModel

        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), str(checkpoint))
    else:
        model = AutoModelForCausalLM.from_pretrained(str(checkpoint))
    model.eval()
    record = {
        "source": spec.source,
        "history_steps": spec.history_steps,
        "target_step": spec.target_step,
        "rank": spec.rank,
        "kind": manifest.kind,
        "recorded_steps": list(manifest.steps),
        # the variance report without its per-tensor rows (they stay in the run's folder)
        "report": {key: report[key] for key in ("history", "fit_positions", "record_dtype", "summary")},
    }
    return model, tokenizer, record
