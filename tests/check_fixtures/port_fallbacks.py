"""Fixed ports that defer to the launcher (notes: they run only where no launcher set the
port, which torchrun always does) and one that does not (a warning), for
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
    address = os.environ.get("MASTER_ADDR", "localhost")
    port = os.environ.get("MASTER_PORT", "23456")  # expect: DDP130 note
    dist.init_process_group("gloo", init_method=f"tcp://{address}:{port}", rank=rank, world_size=world_size)


def setup_fixed(rank, world_size):
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", default="29400")
    args = parser.parse_args()
    os.environ["MASTER_PORT"] = str(args.port)  # expect: DDP130
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


if __name__ == "__main__":
    setup(0, 1)
    setup_fixed(0, 1)
