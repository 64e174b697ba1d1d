"""Two CPU processes (torchrun, gloo) with value_baseline="poise": the probe is fitted on the features of both ranks,
in rank order, so its state (buffer, probe, counters) is the same on both, bit for bit, and so are the checkpoint files;
each rank trains on its own slice of the advantages."""

import pytest
import torch
from test_distributed import run_torchrun


@pytest.mark.distributed
def test_poise_state_is_identical_on_two_processes(tiny_model_path, tmp_path):
    run_torchrun("poise_ddp.py", tiny_model_path, str(tmp_path), timeout=600)
    ranks = [torch.load(tmp_path / f"rank{k}.pt", weights_only=False) for k in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert ranks[0]["param_sum"] == ranks[1]["param_sum"]
    state0, state1 = ranks[0]["state"], ranks[1]["state"]
    assert state0["steps"] == state1["steps"] == 4 and state0["retrain_count"] == state1["retrain_count"] == 3
    for part in ("buffer", "probe"):
        for key, value in state0[part].items():
            assert torch.equal(value, state1[part][key]), f"{part}/{key} differs between the ranks"
    # the buffer holds both ranks' rows of every batch, rank 0's first (the order of TRL's gathered rewards)
    rows = torch.cat([torch.cat([r["features"][k] for r in ranks]) for k in range(4)])
    dim = (rows.shape[1] - 3) // 2
    assert torch.equal(state0["buffer"]["prompt"], rows[:, :dim])
    assert torch.equal(state0["buffer"]["scalars"], rows[:, 2 * dim :])
    assert not torch.equal(ranks[0]["features"][0], ranks[1]["features"][0])  # the ranks hold different rollouts
    for k in range(4):  # each rank trains on its own slice (its 4 rollouts) of one global computation
        assert ranks[0]["advantages"][k].shape == ranks[1]["advantages"][k].shape == (4,)
    checkpoint = tmp_path / "run" / "checkpoint-3"
    saved = [torch.load(checkpoint / f"poise_state_{k}.pth", weights_only=True) for k in (0, 1)]
    for key, value in saved[0]["probe"].items():
        assert torch.equal(value, saved[1]["probe"][key])
    for log0, log1 in zip(ranks[0]["logs"], ranks[1]["logs"], strict=True):
        ours0 = {k: v for k, v in log0.items() if k.startswith("poise/")}
        assert ours0 and ours0 == {k: v for k, v in log1.items() if k.startswith("poise/")}
