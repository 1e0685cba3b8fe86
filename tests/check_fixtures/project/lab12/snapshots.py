"""Snapshot helpers of a ninth review's shapes (for tests/test_check_ddp.py): a save that
keeps the state_dict() of the network it is given, one that unwraps it first where it is a
wrapper, and a load back into it. Written for the
tests; never run: it only has to parse."""

import torch


def save_snapshot(folder, net, optimizer, step):
    snapshot = {"net": net.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
    torch.save(snapshot, f"{folder}/snapshot-{step}.pt")


def save_unwrapped(folder, net, step):
    state = net.module.state_dict() if hasattr(net, "module") else net.state_dict()
    torch.save({"net": state, "step": step}, f"{folder}/unwrapped-{step}.pt")


def load_snapshot(path, net, optimizer):
    snapshot = torch.load(path, map_location="cpu")
    net.load_state_dict(snapshot["net"])
    optimizer.load_state_dict(snapshot["optimizer"])
    return snapshot["step"]
