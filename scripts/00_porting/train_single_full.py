"""Train a small transformer on one device, with what a real training script has.

Plain PyTorch (and scikit-learn's digits, no download), nothing from this repository: copy
it and make it yours. AdamW, a warm-up then cosine learning rate, gradient clipping, mixed
precision (bf16, or fp16 with a GradScaler), gradient accumulation, an evaluation with
accuracy every epoch, and a checkpoint that resumes exactly.
train_ddp_full.py is this script with the lines DDP changes:
    diff -u train_single_full.py train_ddp_full.py

Run it:
    python scripts/00_porting/train_single_full.py
    python scripts/00_porting/train_single_full.py --precision bf16 --accumulation-steps 4
    python scripts/00_porting/train_single_full.py --stop-after-epoch 2   # then, to go on:
    python scripts/00_porting/train_single_full.py --resume
"""

import argparse
import math
import os
import random
import sys

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def whole_number(minimum, maximum=None):
    """An argparse type: a whole number from `minimum` (to `maximum`); if not, exit 2 with a message."""
    def parse(text):
        if not text.isdigit() or int(text) < minimum or (maximum is not None and int(text) > maximum):
            limits = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
            raise argparse.ArgumentTypeError(f"expected a whole number {limits}, got {text!r}")
        return int(text)
    return parse


def number_in(low, high, low_included=False):
    """An argparse type: a number above `low` (or equal, if `low_included`) and below `high`."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not ((low <= value) if low_included else (low < value)) or not value < high:
            raise argparse.ArgumentTypeError(f"expected a number {'from' if low_included else 'above'} "
                                             f"{low} and below {high}, got {text!r}")
        return value
    return parse


def writable_file(text):
    """An argparse type: a file path in a folder that exists and can be written."""
    if os.path.isdir(text) or not os.access(os.path.dirname(os.path.abspath(text)), os.W_OK):
        raise argparse.ArgumentTypeError(f"cannot write a file at {text!r}: give a file in a writable folder")
    return text


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=whole_number(1), default=4)
    parser.add_argument("--batch-size", type=whole_number(1), default=32, help="samples per micro-batch")
    parser.add_argument("--accumulation-steps", type=whole_number(1), default=2, metavar="K",
                        help="micro-batches per optimizer step (default: %(default)s)")
    parser.add_argument("--lr", type=number_in(0, math.inf), default=1e-2, help="the peak learning rate")
    parser.add_argument("--warmup-steps", type=whole_number(0), default=5)
    parser.add_argument("--max-grad-norm", type=number_in(0, math.inf), default=1.0)
    parser.add_argument("--dropout", type=number_in(0, 1, low_included=True), default=0.1)
    parser.add_argument("--precision", choices=DTYPES, default="fp32",
                        help="bf16 on GPUs that have it; fp16 runs with a GradScaler")
    parser.add_argument("--seed", type=whole_number(0, 2**32 - 1), default=0)
    parser.add_argument("--checkpoint", type=writable_file, default="checkpoint.pt", metavar="FILE",
                        help="saved after every epoch; --resume goes on from it")
    parser.add_argument("--resume", action="store_true", help="go on from --checkpoint if it exists")
    parser.add_argument("--stop-after-epoch", type=whole_number(1), metavar="E",
                        help="stop after E epochs, as a job that runs out of time")
    return parser.parse_args(argv)


def make_datasets():
    """scikit-learn's handwritten digits: 1797 images of 8 x 8 pixels, 1500 to train on, 297 held out."""
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32) / 16  # pixels from 0 to 1
    labels = torch.tensor(digits.target)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))  # a fixed split
    train, held_out = order[:1500], order[1500:]
    return TensorDataset(images[train], labels[train]), TensorDataset(images[held_out], labels[held_out])


class DigitTransformer(nn.Module):
    """Each row of pixels is a token: 8 tokens of 8 numbers, two encoder layers, a linear head."""

    def __init__(self, dropout, width=32):
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.position = nn.Parameter(torch.zeros(8, width))
        layer = nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=64, dropout=dropout,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(width, 10)

    def forward(self, images):
        return self.head(self.encoder(self.embed(images) + self.position).mean(dim=1))


def warmup_then_cosine(warmup_steps, total_steps):
    """The learning rate's factor at each optimizer step: up in a line, then down a half cosine."""
    def factor(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.5 * (1 + math.cos(math.pi * progress))
    return factor


def rng_state(device):
    """Every random generator this process draws from: torch's (dropout), the GPU's, Python's."""
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def set_rng_state(state, device):
    torch.set_rng_state(state["torch"].cpu())
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if state["cuda"] is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)


def save_atomically(state, path):
    """Write a temporary file beside `path`, flush it to disk, then rename it over `path`: a save
    killed halfway, or a node that crashes, leaves the last complete checkpoint."""
    with open(f"{path}.tmp", "wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())  # the bytes are on disk before the name points at them
    os.replace(f"{path}.tmp", path)  # atomic within one file system: the old file or the new
    folder = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(folder)  # and the rename itself survives a crash of the node
    finally:
        os.close(folder)


def main():
    args = parse_args()
    # 1. The device and the precision.
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # gpu-checked: one GPU
    dtype = DTYPES[args.precision]
    # 2. The data: a loader that shuffles every epoch, and the held-out set.
    train_set, held_out = make_datasets()
    generator = torch.Generator()
    loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, generator=generator)
    eval_loader = DataLoader(held_out, batch_size=args.batch_size)
    # 3. The model, its optimizer, the schedule and the gradient scaler.
    torch.manual_seed(args.seed)  # the initial weights
    model = DigitTransformer(args.dropout).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    steps_per_epoch = math.ceil(len(loader) / args.accumulation_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_then_cosine(args.warmup_steps, args.epochs * steps_per_epoch))
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")  # fp16 only
    loss_fn = nn.CrossEntropyLoss()
    # 4. Resume: everything the next step depends on.
    start_epoch, step, skipped_steps = 0, 0, 0
    if args.resume and os.path.exists(args.checkpoint):
        checkpoint = torch.load(args.checkpoint, map_location=device, weights_only=True)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
        scaler.load_state_dict(checkpoint["scaler"])
        start_epoch, step = checkpoint["epoch"], checkpoint["step"]
        set_rng_state(checkpoint["rng"][0], device)  # dropout goes on as it would have
        print(f"resumed from {args.checkpoint}: epoch {start_epoch}, step {step}", flush=True)
    if start_epoch >= args.epochs:
        sys.exit(f"{args.checkpoint} has done all {args.epochs} epochs: raise --epochs to train on")
    # 5. Train, evaluate and save, epoch by epoch.
    for epoch in range(start_epoch, args.epochs):
        generator.manual_seed(args.seed + epoch)  # the order depends on the epoch alone
        model.train()
        totals = torch.zeros(2, device=device)  # sum of the losses, number of samples
        for index, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            first = index - index % args.accumulation_steps  # this step's first micro-batch
            micro_batches = min(args.accumulation_steps, len(loader) - first)
            is_step = index + 1 == first + micro_batches  # the step's last micro-batch
            with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
                loss = loss_fn(model(x), y)  # the matmuls in bf16/fp16, the loss in fp32
            scaler.scale(loss / micro_batches).backward()  # the step's mean; fp16: times the scale
            totals += torch.stack([loss.detach().float() * len(x), torch.tensor(len(x), device=device)])
            if is_step:
                scaler.unscale_(optimizer)  # the true gradients, before clipping
                nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                scale = scaler.get_scale()
                scaler.step(optimizer)  # skipped if a gradient is inf or NaN
                scaler.update()
                skipped_steps += int(scaler.get_scale() < scale)  # the scale drops after a skip
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
        # Evaluate on the held-out set.
        model.eval()
        counts = torch.zeros(3, device=device)  # correct, samples, sum of the losses
        with torch.no_grad(), torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            for x, y in eval_loader:
                x, y = x.to(device), y.to(device)
                logits = model(x).float()
                counts += torch.stack([(logits.argmax(dim=1) == y).sum(), torch.tensor(len(y), device=device),
                                       nn.functional.cross_entropy(logits, y, reduction="sum")])
        train_loss, accuracy = (totals[0] / totals[1]).item(), (counts[0] / counts[1]).item()
        print(f"epoch {epoch}: loss {train_loss:.4f} over {int(totals[1])} samples, held-out "
              f"loss {(counts[2] / counts[1]).item():.4f} accuracy {accuracy:.4f} over {int(counts[1])} "
              f"samples, step {step}", flush=True)
        # Save everything a resume needs.
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                 "epoch": epoch + 1, "step": step, "rng": [rng_state(device)]}
        save_atomically(state, args.checkpoint)
        if epoch + 1 == args.stop_after_epoch:
            break
    # 6. Done.
    print(f"summary: world_size=1 device={device.type} precision={args.precision} epochs={epoch + 1} "
          f"steps={step} skipped_steps={skipped_steps} final_loss={train_loss:.4f} accuracy={accuracy:.4f} "
          f"eval_samples={int(counts[1])} checkpoint={args.checkpoint}", flush=True)


if __name__ == "__main__":
    main()
