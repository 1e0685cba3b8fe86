"""Checkpoints: one helper that saves on whoever calls it, one that tests the rank, one that
writes to memory."""

import io

import torch

from .dist import is_main_process


def save_checkpoint(model, path):
    torch.save({"model": model.state_dict()}, path)


def save_on_master(state, path):
    if is_main_process():
        torch.save(state, path)


def to_bytes(model):
    buffer = io.BytesIO()  # memory, not a file: every rank has its own
    torch.save(model.state_dict(), buffer)
    return buffer.getvalue()
