"""Chapter 12's step ceiling on a GPU, without DDP or a data loader: ResNet-18 with the CIFAR
stem (utils/vision.py), steps on one batch already on the device, timed with CUDA events
(utils/vision.ceiling_step), for each batch size with and without bf16 autocast and
channels_last. It prints the table of docs/outputs/gpu/12_gpu_ceiling.txt:

    python tests/gpu_ceiling.py                      # (make outputs-gpu runs it)
    python tests/gpu_ceiling.py --batch-sizes 8 --steps 2   # a quick look, CPUs too
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from utils.vision import ceiling_step, resnet18_cifar  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 1024])
    parser.add_argument("--steps", type=int, default=20, help="timed steps per row, after one warm-up")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    print(f"{'batch':>6} {'amp':>5} {'cl':>3} {'step_s':>9} {'samples/s':>10}")
    for batch_size in args.batch_sizes:
        for bf16 in (False, True):
            for channels_last in (False, True):
                layout = torch.channels_last if channels_last else torch.contiguous_format
                model = resnet18_cifar().to(device, memory_format=layout)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
                inputs = torch.randn(batch_size, 3, 32, 32).to(device, memory_format=layout)
                labels = torch.randint(0, 10, (batch_size,))
                step = ceiling_step(model, optimizer, (inputs, labels), device, args.steps, bf16)
                print(f"{batch_size:>6} {bf16!s:>5} {int(channels_last):>3} {step:>9.5f} "
                      f"{batch_size / step:>10.0f}", flush=True)


if __name__ == "__main__":
    main()
