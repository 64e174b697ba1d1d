"""The LoRA inits give the same factors on every rank (2 CPU processes, gloo): the randomized solver and the
default full SVD."""

import os
import subprocess
import sys
import textwrap

import pytest


SCRIPT = textwrap.dedent(
    """
    import hashlib, json, sys
    import torch
    import torch.distributed as dist
    from peft import LoraConfig
    from torch import nn
    from trl_rlvr_ext.lora_init import get_peft_model_with_init

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(1000 + rank)  # different global RNG per rank: the init must not depend on it

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(0)
            self.up = nn.Linear(64, 96)
            self.down = nn.Linear(96, 48)
            with torch.no_grad():
                for layer in (self.up, self.down):
                    layer.weight.copy_(torch.randn(layer.weight.shape, generator=g))

    digests = {}
    for method, options in [
        ("rlpo", {"solver": "randomized", "oversampling": 4, "niter": 1}),
        ("pissa", {"solver": "randomized", "oversampling": 4, "niter": 1}),
        ("rlpo", {}),  # the default: the authors' full SVD
        ("milora", {}),
    ]:
        model = get_peft_model_with_init(
            Net(), LoraConfig(r=4, lora_alpha=8, target_modules=["up", "down"]), method,
            seed=7, show_progress=False, **options,
        )
        h = hashlib.sha256()
        for name, param in sorted(model.named_parameters()):
            if "lora_" in name or name.endswith("weight"):
                h.update(param.detach().numpy().tobytes())
        digests[f"{method} {options.get('solver', 'default')}"] = h.hexdigest()
    gathered = [None, None]
    dist.all_gather_object(gathered, digests)
    if rank == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(gathered, f)
    dist.destroy_process_group()
    import os
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(0)  # gloo may abort at interpreter exit after the work is done (tests/distributed/clean_exit.py)
    """
)


@pytest.mark.distributed
def test_init_identical_on_every_rank(tmp_path):
    import json

    script = tmp_path / "init_ranks.py"
    script.write_text(SCRIPT)
    out = tmp_path / "digests.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script), str(out)]
    result = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    rank0, rank1 = json.loads(out.read_text())
    assert rank0 == rank1
    assert len(set(rank0.values())) == 4  # each init wrote different weights
