"""Two CPU processes (torchrun, gloo) with objective="popo": the weights of a group that straddles the processes are
computed on the whole group (each process keeps its slice), and the EMA copy, the predictor, the policy and the
popo/* metrics are identical on both processes after training."""

import pytest
import torch
from test_distributed import run_torchrun

from trl_rlvr_ext.losses import popo_weights_from_means


@pytest.mark.distributed
def test_popo_two_processes_weigh_whole_groups_and_stay_identical(tiny_model_path, tmp_path):
    run_torchrun("popo_ddp.py", tiny_model_path, str(tmp_path), timeout=600)
    ranks = [torch.load(tmp_path / f"rank{k}.pt", weights_only=False) for k in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert len(ranks[0]["calls"]) == len(ranks[1]["calls"]) == 3  # one generation batch per step
    straddling_positive = 0
    for call0, call1 in zip(ranks[0]["calls"], ranks[1]["calls"], strict=True):
        for key in ("means", "lengths", "positive"):  # both processes weigh the same gathered batch of 12
            assert torch.equal(call0[key], call1[key]) and call0[key].shape == (12,)
        whole = popo_weights_from_means(call0["means"], call0["lengths"], call0["positive"], 4)
        assert torch.equal(torch.cat([call0["local_weights"], call1["local_weights"]]), whole)
        assert torch.equal(torch.cat([call0["local_positive"], call1["local_positive"]]), call0["positive"])
        if call0["positive"][4:8].any():  # the group of rows 4..7: two on each process, weighed as one group
            straddling_positive += 1
            total = call0["local_weights"][4:].sum() + call1["local_weights"][:2].sum()
            assert total.item() == pytest.approx(1.0, abs=1e-6)
    assert straddling_positive > 0, "the straddling group never had a positive: the test is void"
    assert ranks[0]["param_sum"] == ranks[1]["param_sum"]  # DDP kept the replicas identical
    for a, b in zip(ranks[0]["ema"], ranks[1]["ema"], strict=True):
        assert torch.equal(a, b)
    for name, value in ranks[0]["predictor"].items():
        assert torch.equal(value, ranks[1]["predictor"][name]), name
    for log0, log1 in zip(ranks[0]["logs"], ranks[1]["logs"], strict=True):
        ours0 = {k: v for k, v in log0.items() if k.startswith("popo/")}
        assert ours0 and ours0 == {k: v for k, v in log1.items() if k.startswith("popo/")}
