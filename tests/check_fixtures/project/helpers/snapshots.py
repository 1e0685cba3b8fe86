"""Helpers of the project for project/clean_review9.py and train_review9.py: a snapshot helper
that saves when it is given a model and loads when it is not; an epoch whose save waits on a
flag of the options object. Written for the tests; never run: it only has to parse."""

import torch


def snapshot(folder, tag, net=None, step=0):
    path = f"{folder}/{tag}.pt"
    if net is not None:
        torch.save({"net": net.state_dict(), "step": step}, path)
        return None
    return torch.load(path, map_location="cpu")


def run_epoch(net, loader, optimizer, opts):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if opts.keep_snapshots:
        torch.save(net.module.state_dict(), f"{opts.folder}/last.pt")
