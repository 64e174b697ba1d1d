"""What the 2-process trainer checks save per rank for the test to compare across ranks: the world size, the training
logs, the sum of the final parameters, and the check's own measurements."""

import os

import torch


def save_rank_result(trainer, out_dir: str, name: str = "rank", **measurements) -> dict:
    """Save ``{world_size, **measurements, logs, param_sum}`` to ``<out_dir>/<name><process index>.pt``."""
    params = torch.cat([p.detach().flatten() for p in trainer.model.parameters()])
    result = {
        "world_size": trainer.accelerator.num_processes,
        **measurements,
        "logs": [log for log in trainer.state.log_history if "loss" in log],
        "param_sum": params.double().sum().item(),
    }
    torch.save(result, os.path.join(out_dir, f"{name}{trainer.accelerator.process_index}.pt"))
    return result
