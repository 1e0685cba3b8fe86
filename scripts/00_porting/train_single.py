"""Train a small model on one device: where the porting page starts.

Plain PyTorch, nothing from this repository: copy it and make it yours.
train_ddp.py is this script with the lines DDP changes: diff -u train_single.py train_ddp.py

Run it:
    python scripts/00_porting/train_single.py
    python scripts/00_porting/train_single.py --epochs 10 --batch-size 64 --checkpoint model.pt
"""

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def whole_number(minimum, maximum=None):
    """An argparse type: a whole number from `minimum` (to `maximum`); if not, exit 2 with a message."""
    def parse(text):
        if not text.isdigit() or int(text) < minimum or (maximum is not None and int(text) > maximum):
            limits = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
            raise argparse.ArgumentTypeError(f"expected a whole number {limits}, got {text!r}")
        return int(text)
    return parse


def positive_number(text):
    """An argparse type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text!r}")
    return value


def writable_file(text):
    """An argparse type: a file path in a folder that exists and can be written."""
    if os.path.isdir(text) or not os.access(os.path.dirname(os.path.abspath(text)), os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write a file at {text!r}: give a file in a writable folder")
    return text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=whole_number(1), default=5)
    parser.add_argument("--batch-size", type=whole_number(1), default=32)
    parser.add_argument("--lr", type=positive_number, default=0.02)
    parser.add_argument("--seed", type=whole_number(0, 2**32 - 1), default=0)
    parser.add_argument("--checkpoint", type=writable_file, default="model.pt", metavar="FILE",
                        help="where to save the trained weights")
    return parser.parse_args(argv)


def make_dataset(seed, size=2048):
    """A regression task made from the seed: y = sin((x1 + x2 + x3 + x4) / 2) + noise, 16 features."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, 16, generator=generator)
    y = torch.sin(0.5 * x[:, :4].sum(dim=1, keepdim=True)) + 0.1 * torch.randn(size, 1, generator=generator)
    return TensorDataset(x, y)


def make_model():
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))


def main():
    args = parse_args()
    # 1. The device.
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # gpu-checked: one GPU
    # 2. The data: a loader that shuffles every epoch.
    torch.manual_seed(args.seed)
    dataset = make_dataset(args.seed)
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(args.seed))
    # 3. The model and its optimizer.
    model = make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.MSELoss()
    # 4. Train.
    for epoch in range(args.epochs):
        totals = torch.zeros(2, device=device)  # sum of the losses, number of samples
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            totals[0] += loss.detach() * len(x)
            totals[1] += len(x)
        epoch_loss = (totals[0] / totals[1]).item()
        print(f"epoch {epoch}: loss {epoch_loss:.4f} over {int(totals[1])} samples", flush=True)
    # 5. Save the weights.
    torch.save(model.state_dict(), args.checkpoint)
    print(f"summary: world_size=1 device={device.type} epochs={args.epochs} "
          f"final_loss={epoch_loss:.4f} checkpoint={args.checkpoint}", flush=True)


if __name__ == "__main__":
    main()
