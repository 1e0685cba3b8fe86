"""Run under torchrun on CPUs (gloo): utils/shared_mode.gather_through_cpu against the two
gathers it stands in for in the shared mode, on FSDP2 shards (even and uneven), and prints
one `summary:` line from rank 0. tests/test_16_fsdp.py launches it.

    torchrun --standalone --nproc_per_node=2 tests/shared_mode_probe.py
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from utils.fsdp import build_model, shard_model
from utils.shared_mode import gather_through_cpu


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    model = shard_model(build_model(0, torch.device("cpu")), mesh)
    odd = nn.Sequential(nn.Linear(3, 5), nn.Linear(5, 7))  # 5 and 7 rows: uneven shards
    for layer in odd:
        fully_shard(layer, mesh=mesh)
    results = {}
    for name, module in (("block", model), ("uneven", odd)):
        state = module.state_dict()
        everyone = gather_through_cpu(state, to_all=True)
        results[f"{name}_to_all"] = same(everyone, {k: v.full_tensor() for k, v in state.items()})
        rank0 = gather_through_cpu(state, to_all=False)
        reference = get_model_state_dict(
            module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        results[f"{name}_rank0"] = same(rank0, reference) if rank == 0 else rank0 == {}
        results[f"{name}_cpu"] = all(v.device.type == "cpu" for v in everyone.values())
    gathered = [None] * world
    dist.all_gather_object(gathered, results)
    if rank == 0:
        agreed = {k: all(r[k] for r in gathered) for k in results}
        print("summary: " + " ".join(f"{k}={'yes' if v else 'no'}" for k, v in agreed.items()),
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
