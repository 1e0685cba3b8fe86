"""Chapter 17: a two-dimensional DeviceMesh, data parallel along one side, tensor parallel along the other.

Arranges the ranks as a grid, (dp, tp) = (world_size / tp, tp), and prints where each
rank sits and which ranks share each of its two process groups. Then it uses both
dimensions once: a small MLP is split across the "tp" ranks with tensor parallelism
(each holds half of each weight) and gives the same output as the whole MLP; DDP over
the "dp" group averages gradients among the ranks that hold the same slices.

Run it:
    torchrun --standalone --nproc_per_node=4 scripts/17_zero_and_beyond/device_mesh_2d.py   # 2 x 2
    torchrun --standalone --nproc_per_node=2 scripts/17_zero_and_beyond/device_mesh_2d.py   # 1 x 2
    mpiexec -n 4 python scripts/17_zero_and_beyond/device_mesh_2d.py
    python scripts/17_zero_and_beyond/device_mesh_2d.py                                      # 1 x 1
"""

import copy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from utils.cli import make_parser, positive_int
from utils.distributed import DistributedSetupError, cleanup_distributed, print0, setup_distributed


def parse_args():
    parser = make_parser(__doc__)
    parser.add_argument("--tp", type=positive_int, default=None,
                        help="ranks along the tensor-parallel side (default: 2 when the world "
                        "size is even, else 1)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # 1. Join the process group (chapter 01).
    ctx = setup_distributed(args.backend, args.timeout)
    tp = args.tp or (2 if ctx.world_size % 2 == 0 else 1)
    if tp < 1 or ctx.world_size % tp:
        raise DistributedSetupError(f"--tp {tp} does not divide the world size {ctx.world_size}: "
                                    "set --tp to a divisor of it")

    # --8<-- [start:mesh]
    # 2. The grid: rank = dp_index * tp + tp_index. Every rank makes the same call; each gets
    #    its coordinates and one process group per dimension (new groups, made here).
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size // tp, tp), mesh_dim_names=("dp", "tp"))
    dp_group, tp_group = mesh.get_group("dp"), mesh.get_group("tp")
    me = (ctx.rank, tuple(mesh.get_coordinate()), dist.get_process_group_ranks(dp_group),
          dist.get_process_group_ranks(tp_group))
    # --8<-- [end:mesh]
    everyone: list = [None] * ctx.world_size
    dist.all_gather_object(everyone, me)
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} mesh: {mesh}")
    print0(f"{'rank':>4}  {'(dp, tp)':<9} {'its dp group':<13} its tp group")
    for rank, coordinate, dp_ranks, tp_ranks in everyone:
        print0(f"{rank:>4}  {str(coordinate):<9} {str(dp_ranks):<13} {tp_ranks}")

    # --8<-- [start:tp]
    # 3. Tensor parallel along "tp": the first Linear split by output features (columns),
    #    the second by input features (rows); its partial outputs are summed across the tp
    #    group. Every rank builds the whole MLP, from the same seed; parallelize_module()
    #    replaces each weight of a copy by this rank's slice of it (a DTensor).
    torch.manual_seed(args.seed)
    whole = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).to(ctx.device)
    sharded = parallelize_module(copy.deepcopy(whole), mesh["tp"],
                                 {"0": ColwiseParallel(), "2": RowwiseParallel()})
    inputs = torch.randn(4, 16, device=ctx.device)  # the same batch on the ranks of a tp group
    output_diff = (sharded(inputs) - whole(inputs)).abs().max().item()
    local_shape = tuple(sharded[0].weight.to_local().shape)
    # --8<-- [end:tp]

    # --8<-- [start:dp]
    # 4. Data parallel along "dp": DDP given the dp group averages gradients among the ranks
    #    with the same tp index. Each rank's gradient here is its own rank number.
    model = nn.Linear(1, 1, bias=False).to(ctx.device)
    ddp = nn.parallel.DistributedDataParallel(
        model, process_group=dp_group, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    # (.mean() of the one output: the same gradient as .sum(), and on a GPU its backward
    # starts with a plain kernel, not cuBLAS, which would warn "no current CUDA context")
    ddp(torch.full((1, 1), float(ctx.rank), device=ctx.device)).mean().backward()
    grad = model.weight.grad.item()  # the mean of the rank numbers in this rank's dp group
    # --8<-- [end:dp]
    facts: list = [None] * ctx.world_size
    dist.all_gather_object(facts, (local_shape, output_diff, grad))
    print0(f"tensor parallel: each rank holds a {'x'.join(map(str, facts[0][0]))} slice of the "
           f"32x16 first weight; largest |sharded MLP - whole MLP| output: "
           f"{max(f[1] for f in facts):.1e}")
    print0(f"DDP over the dp group: gradient per rank {[f[2] for f in facts]} "
           f"(the mean of the rank numbers in each rank's dp group)")
    expected = [sum(dp) / len(dp) for _, _, dp, _ in everyone]
    print0(f"summary: world_size={ctx.world_size} launcher={ctx.launcher} mesh={ctx.world_size // tp}x{tp} "
           f"coordinates={';'.join(f'{c[0]},{c[1]}' for _, c, _, _ in everyone)} "
           f"tp_output_diff={max(f[1] for f in facts):.1e} "
           f"dp_grads_ok={'yes' if [f[2] for f in facts] == expected else 'no'}")

    # 5. Release the DDP model, then leave the process group.
    del ddp
    cleanup_distributed()


if __name__ == "__main__":
    main()
