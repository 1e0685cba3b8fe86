"""Timing that is right on CPUs and on GPUs, where CUDA work runs asynchronously.

On a GPU, a kernel (a matmul, an NCCL all-reduce) is queued and the CPU moves on: a CPU
clock read right after it measures when the work was *queued*, not when it ran. Every
timing in this repository goes through this module:

- ``synchronized_clock(device)``: a CPU clock read after the device has finished all the
  work queued so far: right for whole steps and loops, at the cost of a synchronisation.
- ``Clock(device)``: points in time inside a step, without synchronising there. On a CUDA
  device ``mark()`` records a CUDA event on the current stream, which the GPU timestamps
  when it reaches that point of the queue; ``seconds(a, b)`` waits for both and reads the
  GPU's own timer. On a CPU, ``mark()`` is time.perf_counter().  # gpu-checked
"""

from __future__ import annotations

import time

import torch


def synchronized_clock(device: torch.device) -> float:
    """time.perf_counter() after the device has finished the work queued so far."""  # gpu-checked
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()  # gpu-checked: after the synchronize


# --8<-- [start:clock]
class Clock:
    """Points in time on the device's own timeline (CUDA events on a GPU, perf_counter on
    a CPU), and the seconds between two of them."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> float | torch.cuda.Event:
        """Now, as the device will see it: on a GPU, when the work queued on the current
        stream before this call has run (call it inside a future's callback to mark when
        a collective finished: the callback's stream waits for the collective)."""
        if not self.cuda:
            return time.perf_counter()  # gpu-checked: CPU only; CUDA events below
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start: float | torch.cuda.Event, end: float | torch.cuda.Event) -> float:
        """Seconds from `start` to `end` (waits for both events on a GPU)."""
        if not self.cuda:
            return float(end) - float(start)
        end.synchronize()
        start.synchronize()
        return start.elapsed_time(end) / 1000.0  # elapsed_time is in milliseconds
# --8<-- [end:clock]


def train_step_seconds(model: torch.nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor,
                       labels: torch.Tensor, steps: int, warm_up: int) -> float:
    """Seconds per training step (forward, loss, backward, optimizer step) on one batch
    already on the device: `warm_up` steps left out, then the mean of `steps`, read with a
    synchronized clock. Under DDP every rank must call it with the same steps."""
    loss_fn = torch.nn.CrossEntropyLoss()
    start = 0.0
    for step in range(warm_up + steps):
        if step == warm_up:
            start = synchronized_clock(images.device)
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()
        optimizer.step()
    return (synchronized_clock(images.device) - start) / steps
