"""Fixed ports that defer to the launcher (notes: they run only where no launcher set the
port, which torchrun always does), one that does not (a warning), and fallbacks in code that
runs under srun, which sets no port (warnings: there they always apply), for
tests/test_check_ddp.py: exactly the `# expect:` lines. Never run: it only has to parse."""

import argparse
import os

import torch.distributed as dist


def setup(rank, world_size):
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = "12355"  # expect: DDP130 note
    os.environ.setdefault("MASTER_PORT", "29501")  # expect: DDP130 note
    if not os.environ.get("MASTER_PORT"):
        os.environ["MASTER_PORT"] = str(29502)  # expect: DDP130 note
    if int(os.environ.get("MASTER_PORT", "0")) == 0:
        os.environ["MASTER_PORT"] = "29507"  # expect: DDP130 note
    address = os.environ.get("MASTER_ADDR", "localhost")
    port = os.environ.get("MASTER_PORT", "23456")  # expect: DDP130 note
    dist.init_process_group("gloo", init_method=f"tcp://{address}:{port}", rank=rank, world_size=world_size)


def setup_fixed(rank, world_size):
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", default="29400")
    args = parser.parse_args()
    os.environ["MASTER_PORT"] = str(args.port)  # expect: DDP130
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def setup_slurm():
    """Under srun, which sets no MASTER_PORT, a fallback always applies: a fixed port."""
    if "SLURM_PROCID" in os.environ:
        os.environ.setdefault("MASTER_PORT", "29503")  # expect: DDP130
    else:
        os.environ.setdefault("MASTER_PORT", "29504")  # expect: DDP130 note


def setup_srun():
    rank = int(os.environ["SLURM_PROCID"])  # runs under srun alone
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = "29505"  # expect: DDP130
    dist.init_process_group("gloo", rank=rank, world_size=int(os.environ["SLURM_NTASKS"]))


def setup_any(args):
    """A port fixed for a one-process launch only: the launchers' branches come first."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        args.rank = int(os.environ["RANK"])
    elif "SLURM_PROCID" in os.environ:
        args.rank = int(os.environ["SLURM_PROCID"])
    else:
        args.rank = 0
        os.environ["MASTER_PORT"] = "29506"  # expect: DDP130 note


if __name__ == "__main__":
    setup(0, 1)
    setup_fixed(0, 1)
    setup_slurm()
    setup_srun()
    setup_any(argparse.Namespace())
