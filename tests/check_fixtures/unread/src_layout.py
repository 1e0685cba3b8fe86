"""A project whose package sits under src/ (installed with `pip install -e .`): the checker
looks for `labkit` beside the script and above it, not in src/, so a run lists the import
(fixture of our own)."""
import torch.distributed as dist
from labkit.engine import train_one_epoch


def main():
    dist.init_process_group("gloo")
    for epoch in range(3):
        train_one_epoch(epoch)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
