"""A training script whose pitfalls live in its own project's modules (helpers/), for
tests/test_check_ddp.py: the checker follows the imports of the project and reports at the
call, exactly the `# expect:` lines. Written for the tests; never run: it only has to parse."""

import argparse

import torch
from helpers import save_checkpoint, save_on_master
from helpers.data import forever, make_data_sampler, make_loader
from helpers.dist import setup_dist, setup_fallback, wrap
from helpers.engine import evaluate, evaluate_detections, validation
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--master-addr", default="127.0.0.1")
parser.add_argument("--master-port", type=int, default=29512)  # expect: DDP130
parser.add_argument("--steps", type=int, default=100)
args = parser.parse_args()


def main():
    setup_dist(args)
    setup_fallback(args)  # expect: DDP130 note
    train_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    val_set = TensorDataset(torch.randn(30, 8), torch.randint(0, 2, (30,)))
    train_loader = make_loader(train_set, batch_size=8)  # expect: DDP030
    val_sampler = make_data_sampler(val_set, shuffle=False, distributed=True)  # expect: DDP031
    val_loader = DataLoader(val_set, batch_size=8, sampler=val_sampler)
    detection_loader = make_loader(val_set, batch_size=8, shuffle=False)  # expect: DDP031 note
    plain_sampler = make_data_sampler(val_set, shuffle=False, distributed=False)  # no DistributedSampler
    model = wrap(nn.Linear(8, 2), args.local_rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = forever(train_loader)
    ordered = forever(make_loader(train_set, batch_size=8, shuffle=False))  # one order, on purpose
    for step in range(args.steps):
        x, y = next(batches) if step % 2 else next(ordered)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step % 10 == 0:
            accuracy = evaluate(model, val_loader)
            if args.rank == 0:
                print(f"step {step}: accuracy {accuracy:.3f}")
                evaluate(model, val_loader)  # expect: DDP020
                torch.save(model.state_dict(), "last.pt")  # expect: DDP041
            evaluate_detections(model, detection_loader, None)
            validation(model, val_loader, "best.pt")  # expect: DDP040
    save_checkpoint(model.module, "final.pt")  # expect: DDP040
    save_on_master({"model": model.module.state_dict()}, "final_master.pt")
    del plain_sampler


if __name__ == "__main__":
    main()
