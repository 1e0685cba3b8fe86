"""Wall-clock timing that is honest on GPUs (CUDA work runs asynchronously)."""

from __future__ import annotations

import time

import torch


def synchronized_clock(device: torch.device) -> float:
    """time.perf_counter() after the device has finished the work queued so far."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
