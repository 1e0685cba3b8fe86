"""Run under torchrun on CPUs (gloo): utils/shared_mode.gather_through_cpu against the two
gathers it stands in for in the shared mode, on FSDP2 shards (even and uneven), and prints
one `summary:` line from rank 0. tests/test_16_fsdp.py launches it.

On CPUs the shards are CPU tensors already, so values that come back on the CPU prove
nothing about the copy that the shared mode needs (a shard left on the GPU reaches gloo's
coalesced all-gather there: SIGSEGV). The probe counts the copies instead: one `.cpu()` per
shard, seen by a TorchFunctionMode.

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
from torch.distributed.tensor import DTensor
from torch.overrides import TorchFunctionMode

from utils.distributed import cleanup_distributed, setup_distributed
from utils.fsdp import build_model, shard_model
from utils.shared_mode import gather_through_cpu


class CopiesToCpu(TorchFunctionMode):
    """Counts the tensors copied to the CPU (`.cpu()`, `.to("cpu")`) while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        to_cpu = func is torch.Tensor.to and "cpu" in map(str, [*args[1:], *kwargs.values()])
        self.count += func is torch.Tensor.cpu or to_cpu
        return func(*args, **kwargs)


def gather_counting_copies(state: dict, *, to_all: bool) -> tuple[dict, bool]:
    """gather_through_cpu(state), and whether it copied each DTensor shard to the CPU once."""
    with CopiesToCpu() as copies:
        full = gather_through_cpu(state, to_all=to_all)
    return full, copies.count == sum(isinstance(v, DTensor) for v in state.values())


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def probe() -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    model = shard_model(build_model(0, torch.device("cpu")), mesh)
    odd = nn.Sequential(nn.Linear(3, 5), nn.Linear(5, 7))  # 5 and 7 rows: uneven shards
    for layer in odd:
        fully_shard(layer, mesh=mesh)
    results = {}
    for name, module in (("block", model), ("uneven", odd)):
        state = module.state_dict()
        everyone, copied_to_all = gather_counting_copies(state, to_all=True)
        results[f"{name}_to_all"] = same(everyone, {k: v.full_tensor() for k, v in state.items()})
        rank0, copied_rank0 = gather_counting_copies(state, to_all=False)
        results[f"{name}_copied"] = copied_to_all and copied_rank0
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


def main() -> None:
    # as the chapters do: setup_distributed() imports torch.distributed.nn before the group,
    # and the models and meshes are gone (probe() returned) before cleanup_distributed()
    # leaves it; else gloo's threads end at exit, after the other rank may have gone, and a
    # rank aborts now and then ("terminate called without an active exception")
    setup_distributed("gloo")
    probe()
    cleanup_distributed()


if __name__ == "__main__":
    main()
