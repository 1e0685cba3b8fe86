"""SyncBatchNorm's arithmetic on any device: BatchNorm with the statistics of the global batch.

``torch.nn.SyncBatchNorm`` normalizes each channel with the mean and variance of the
*global batch* (every rank's batch together), so every rank normalizes alike and updates its
running statistics with the same numbers. It runs on GPUs only: its forward raises
"SyncBatchNorm expected input tensor to be on GPU ..." for CPU tensors, and DDP refuses a
CPU model that contains one. ``AllReduceBatchNorm`` computes the same thing wherever the
process group runs, gloo on CPUs included:

1. per channel, each rank adds up its values and their squares, and counts them;
2. one all_reduce sums the three over the ranks: the global batch's sums;
3. mean = sum / count and variance = sum of squares / count - mean^2 normalize the batch
   and update the running statistics, exactly as BatchNorm uses its own batch's (the
   running variance unbiased: times count / (count - 1)).

The all_reduce is differentiable (``SumOverRanks``): every rank's loss depends on the
global statistics, so the gradient that reaches a rank's inputs must include the other
ranks' losses; the backward pass all-reduces the gradient of the sums to collect it. After
DDP averages the parameters' gradients, forward and backward equal one process running
plain BatchNorm on the concatenated global batch (chapter 07's script checks it).

In eval mode, or in a world of one process, it is plain BatchNorm: running statistics, or
the one batch there is. Convert a model with ``convert_all_reduce_batchnorm()``, the twin
of ``nn.SyncBatchNorm.convert_sync_batchnorm()``.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm


# --8<-- [start:sum_over_ranks]
class SumOverRanks(torch.autograd.Function):
    """all_reduce (sum) that autograd can differentiate: the output is the sum of every
    rank's input, so each input's gradient is the sum of every rank's output gradient,
    one more all_reduce in the backward pass.

    (torch.distributed.nn.functional.all_reduce does the same but is deprecated, with a
    warning at each call, and its replacement lives in a private module.)
    """

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
        ctx.group = group
        total = tensor.clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=group)
        return total

    @staticmethod
    def backward(ctx: Any, grad_total: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad_total.clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM, group=ctx.group)
        return grad, None
# --8<-- [end:sum_over_ranks]


# --8<-- [start:module]
class AllReduceBatchNorm(_BatchNorm):
    """BatchNorm over the global batch, like nn.SyncBatchNorm, on CPUs too.

    Takes BatchNorm's arguments and an optional ``process_group`` (default: all ranks);
    inputs are (N, C) or (N, C, ...) as for BatchNorm1d/2d/3d.
    """

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 process_group: dist.ProcessGroup | None = None) -> None:
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected an input of at least 2 dimensions (N, C, ...), got {input.dim()}")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        distributed = dist.is_available() and dist.is_initialized()
        if not (self.training and distributed and dist.get_world_size(self.process_group) > 1):
            return super().forward(input)  # eval: running statistics; one rank: its batch is global
        # 1. This rank's per-channel sums. float64, because the variance below subtracts two
        #    large numbers, and float32 would lose digits when the mean is large.
        values = input.transpose(0, 1).reshape(input.shape[1], -1).to(torch.float64)  # (C, rest)
        count = values.new_full((values.shape[0],), values.shape[1])
        local = torch.stack([values.sum(dim=1), values.square().sum(dim=1), count])
        # 2. The global batch's sums: one all_reduce, differentiable.
        total, total_squares, total_count = SumOverRanks.apply(local, self.process_group)
        # 3. Its mean and (biased) variance normalize the batch, as BatchNorm's own do.
        mean = total / total_count
        variance = total_squares / total_count - mean.square()
        if self.track_running_stats:
            self._update_running_stats(mean.detach(), variance.detach(), total_count[0].item())
        shape = (1, -1) + (1,) * (input.dim() - 2)  # broadcast over N and any spatial dims
        output = ((input - mean.to(input.dtype).view(shape))
                  * torch.rsqrt(variance + self.eps).to(input.dtype).view(shape))
        if self.affine:
            output = output * self.weight.view(shape) + self.bias.view(shape)
        return output

    @torch.no_grad()
    def _update_running_stats(self, mean: torch.Tensor, variance: torch.Tensor, count: float) -> None:
        """BatchNorm's update: an exponential average (momentum), or a cumulative one
        (momentum=None), of the mean and of the unbiased variance."""
        self.num_batches_tracked.add_(1)
        factor = 1.0 / self.num_batches_tracked.item() if self.momentum is None else self.momentum
        unbiased = variance * (count / max(count - 1.0, 1.0))
        self.running_mean.mul_(1.0 - factor).add_(factor * mean.to(self.running_mean.dtype))
        self.running_var.mul_(1.0 - factor).add_(factor * unbiased.to(self.running_var.dtype))
# --8<-- [end:module]


def convert_all_reduce_batchnorm(
    module: nn.Module, process_group: dist.ProcessGroup | None = None
) -> nn.Module:
    """Replace every BatchNorm layer in ``module`` (BatchNorm1d/2d/3d) by an AllReduceBatchNorm
    that takes over its parameters and buffers, as nn.SyncBatchNorm.convert_sync_batchnorm()
    does; returns the module (the same object, unless it is itself a BatchNorm layer)."""
    if isinstance(module, _BatchNorm) and not isinstance(module, (AllReduceBatchNorm, nn.SyncBatchNorm)):
        converted = AllReduceBatchNorm(module.num_features, module.eps, module.momentum, module.affine,
                                       module.track_running_stats, process_group)
        if module.affine:
            converted.weight, converted.bias = module.weight, module.bias
        converted.running_mean, converted.running_var = module.running_mean, module.running_var
        converted.num_batches_tracked = module.num_batches_tracked
        converted.train(module.training)
        return converted
    for name, child in module.named_children():
        module.add_module(name, convert_all_reduce_batchnorm(child, process_group))
    return module
