"""Chapter 16: checkpoints of an FSDP2 model: sharded (DCP), resumed at another world size,
and exported as one plain file for inference.

Trains the FSDP2 model of utils/fsdp.py and saves a checkpoint after every epoch into
--checkpoint-dir/epoch_<k>. --resume-from DIR continues from one, at any world size.
At the end it exports the model as one plain state_dict file (model.pt) and loads that into
a plain model, as an inference script in one process would.

Run it (save at 4 ranks, resume from epoch 1 at 2 ranks):
    torchrun --standalone --nproc_per_node=4 scripts/16_fsdp/sharded_checkpoint.py \\
        --checkpoint-dir /tmp/ch16/at4
    torchrun --standalone --nproc_per_node=2 scripts/16_fsdp/sharded_checkpoint.py \\
        --checkpoint-dir /tmp/ch16/at2 --resume-from /tmp/ch16/at4/epoch_1
    mpiexec -n 2 python scripts/16_fsdp/sharded_checkpoint.py --checkpoint-dir /tmp/ch16/mpi \\
        --resume-from /tmp/ch16/at4/epoch_1

The pitfall (--variant bad): every rank torch.save()s its own model.state_dict(): N files
of shards (DTensors), none of them a model; and the export gathers the whole model with
full_tensor() on every rank at once.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.nn import functional as F

from utils.checkpoint import atomic_torch_save
from utils.checks import check_divisible, check_global_batch
from utils.cli import add_variant_arg, existing_dir, make_parser, output_dir, usage_error
from utils.data import synthetic_classification
from utils.distributed import cleanup_distributed, print0, setup_distributed
from utils.fsdp import BlockModel, add_fsdp_args, build_model, global_batch_slice, local_bytes, shard_model
from utils.shared_mode import gather_through_cpu, shares_gpu


def parse_args():
    parser = add_fsdp_args(make_parser(__doc__), epochs=3)
    parser.add_argument("--checkpoint-dir", type=output_dir, default=Path("checkpoints/ch16"),
                        help="where checkpoints go; on a cluster, a file system every node "
                        "sees (default: %(default)s)")
    parser.add_argument("--resume-from", type=existing_dir, metavar="DIR", default=None,
                        help="continue from this DCP checkpoint directory, e.g. "
                        "/tmp/ch16/epoch_1, saved at any world size (good variant)")
    add_variant_arg(parser, bad="every rank saves its own state_dict; the export gathers the "
                    "whole model on every rank", good="DCP sharded save and load; the export "
                    "gathers onto rank 0's CPU, one tensor at a time")
    args = parser.parse_args()
    if args.resume_from is not None and not (args.resume_from / ".metadata").exists():
        usage_error(f"--resume-from {args.resume_from}: not a DCP checkpoint (no .metadata file in it); give "
                    "a directory the good variant saved, e.g. checkpoints/ch16/epoch_1", parser, status=1)
    return args


def checksum(model, optimizer) -> float:
    """Sum of every parameter and Adam moment in float64 over all ranks' shards: equal
    before a save and after a load when the load restored every value."""
    tensors = [*model.parameters(), *(s[k] for s in optimizer.state.values()
                                     for k in ("exp_avg", "exp_avg_sq") if k in s)]
    local = [t.to_local() if isinstance(t, DTensor) else t for t in tensors]
    total = torch.stack([t.double().sum() for t in local]).sum() if local else torch.zeros(())
    total = total.to(torch.float64)
    dist.all_reduce(total)
    return total.item()


def main() -> None:
    args = parse_args()
    # 1. Join the process group; the FSDP2 model and its optimizer (utils/fsdp.py).
    ctx = setup_distributed(args.backend, args.timeout)
    check_divisible(ctx, "--global-batch-size", args.global_batch_size)
    check_global_batch(ctx, args.num_samples, args.global_batch_size, batch_flag="--global-batch-size",
                       per_rank=False)
    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} backend={ctx.backend} "
           f"device={ctx.device.type} variant={args.variant}")
    model = shard_model(build_model(args.seed, ctx.device), mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    dataset = synthetic_classification(args.num_samples, seed=args.seed)
    inputs, labels = dataset.tensors

    # 2. Resume: DCP reads the shards this rank needs, whatever world size saved them.
    start_epoch = 0
    if args.resume_from is not None:
        if args.variant == "bad":
            raise SystemExit("--resume-from: the bad variant's per-rank files cannot be resumed "
                             "from; use --variant good")
        path = args.resume_from
        if not (path / ".metadata").exists():
            raise SystemExit(f"--resume-from {path}: not a DCP checkpoint (no .metadata file in it)")
        # --8<-- [start:good_load]
        model_state, optim_state = get_state_dict(model, optimizer)  # sharded, this rank's shards
        state = {"model": model_state, "optim": optim_state, "epoch": 0}
        dcp.load(state, checkpoint_id=path)  # every rank reads the pieces of its own shards
        set_state_dict(model, optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optim"])
        start_epoch = state["epoch"]
        # --8<-- [end:good_load]
        saved_by = len(list(path.glob("*.distcp")))
        print0(f"resumed from {path.name}: {start_epoch} epoch(s) done, saved by "
               f"{saved_by} ranks, loaded by {ctx.world_size}; checksum {checksum(model, optimizer):.10f}")

    # 3. Train; save a checkpoint after every epoch.
    steps_per_epoch = args.num_samples // args.global_batch_size
    losses, checksums = [], []
    for epoch in range(start_epoch, args.epochs):
        loss_sum = torch.zeros((), device=ctx.device)
        for step in range(steps_per_epoch):
            index = global_batch_slice(step, args.global_batch_size, args.num_samples, ctx.rank,
                                       ctx.world_size, args.seed, epoch)
            loss = F.cross_entropy(model(inputs[index].to(ctx.device)), labels[index].to(ctx.device))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            loss_sum += loss.detach()
        dist.all_reduce(loss_sum)
        losses.append(loss_sum.item() / (steps_per_epoch * ctx.world_size))

        if args.variant == "bad":
            # --8<-- [start:bad_save]
            # bad: the one-GPU habit, on every rank: N files, each holding this rank's shards.
            args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "optim": optimizer.state_dict()},
                       args.checkpoint_dir / f"rank{ctx.rank}.pt")
            # --8<-- [end:bad_save]
            name = f"rank0.pt .. rank{ctx.world_size - 1}.pt"
        else:
            # --8<-- [start:good_save]
            # good: every rank calls dcp.save; each writes its own shards, in parallel, and
            # rank 0 writes the metadata that says which piece of which tensor is where.
            model_state, optim_state = get_state_dict(model, optimizer)
            name = f"epoch_{epoch + 1}"
            dcp.save({"model": model_state, "optim": optim_state, "epoch": epoch + 1},
                     checkpoint_id=args.checkpoint_dir / name)
            # --8<-- [end:good_save]
        checksums.append(checksum(model, optimizer))
        print0(f"epoch {epoch + 1}/{args.epochs}  loss {losses[-1]:.6f}  saved {name}  "
               f"checksum {checksums[-1]:.10f}")
    if args.variant == "good":
        files = sorted(p.name for p in (args.checkpoint_dir / f"epoch_{args.epochs}").iterdir())
        print0(f"epoch_{args.epochs} holds: {' '.join(files)}")

    # 4. Export one plain state_dict file for inference. In the shared mode (--backend
    #    gloo-cuda) gloo cannot all-gather CUDA tensors the way both exports below do (the
    #    process dies of SIGSEGV): the same gathers run on CPU copies of the shards there.
    if shares_gpu(ctx.backend, ctx.device):
        full = gather_through_cpu(model.state_dict(), to_all=args.variant == "bad")
    elif args.variant == "bad":
        # --8<-- [start:bad_export]
        # bad: full_tensor() all-gathers each tensor onto every rank: N whole copies at once.
        # (On rank 0 alone it would hang: the other ranks never join the all-gather.)
        full = {key: value.full_tensor() for key, value in model.state_dict().items()}
        # --8<-- [end:bad_export]
    else:
        # --8<-- [start:good_export]
        # good: gathers one tensor at a time; with cpu_offload, rank 0 keeps each on its CPU
        # and the other ranks drop theirs: they return an empty dict.
        full = get_model_state_dict(
            model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        # --8<-- [end:good_export]
    held = [None] * ctx.world_size
    dist.all_gather_object(held, local_bytes(full.values()))
    print0(f"export: whole-model bytes held per rank {','.join(map(str, held))}")
    if ctx.is_main:
        atomic_torch_save({k: v.cpu() for k, v in full.items()}, args.checkpoint_dir / "model.pt")
    del full

    # 5. Inference in one process: a plain model (no FSDP) loads a file.
    with torch.no_grad():
        reference = model(inputs.to(ctx.device)).cpu()  # FSDP2's forward: every rank takes part
    plain_load, rank_file_load = "skipped", "n/a"
    if ctx.is_main:
        plain = BlockModel().eval()
        if args.variant == "bad":
            # --8<-- [start:bad_inference]
            # What an inference script finds in rank 0's file: shards of every tensor.
            saved = torch.load(args.checkpoint_dir / "rank0.pt", weights_only=False)["model"]
            weight = saved["blocks.0.up.weight"]
            print0(f"rank0.pt: blocks.0.up.weight is a {type(weight).__name__}, local shard "
                   f"{list(weight.to_local().shape)} of {list(weight.shape)}; the file holds "
                   f"{local_bytes(saved.values())} of {local_bytes(plain.state_dict().values())} "
                   "parameter bytes")
            try:
                plain.load_state_dict({k: v.to_local() for k, v in saved.items()})
            except RuntimeError as error:
                rank_file_load = "failed"
                lines = str(error).splitlines()
                print0(f"inference from rank0.pt failed: {lines[0]}")
                for line in lines[1:3]:
                    print0(f"  {line.strip()}")
            # --8<-- [end:bad_inference]
        # The exported file, in both variants: a plain state_dict, clean keys, whole tensors.
        plain.load_state_dict(torch.load(args.checkpoint_dir / "model.pt", weights_only=True))
        with torch.no_grad():  # on the same device (a GPU's kernels round unlike a CPU's)
            outputs = plain.to(ctx.device)(inputs.to(ctx.device)).cpu()
        same = torch.allclose(outputs, reference, rtol=1e-5, atol=1e-6)
        plain_load = "ok" if same else "mismatch"
        print0(f"inference from model.pt: a plain model loaded it; its outputs "
               f"{'equal' if same else 'DIFFER FROM'} the FSDP2 model's")

    # 6. Summary (rank 0).
    print0(f"summary: variant={args.variant} launcher={ctx.launcher} world_size={ctx.world_size} "
           f"start_epoch={start_epoch} losses={','.join(f'{x:.6f}' for x in losses)} "
           f"checksums={','.join(f'{x:.10f}' for x in checksums)} "
           f"export_bytes_per_rank={','.join(map(str, held))} rank_file_load={rank_file_load} "
           f"plain_load={plain_load}")
    del model, optimizer
    cleanup_distributed()


if __name__ == "__main__":
    main()
