"""Binary classification metrics, and the gather that puts every rank's samples together.

Chapter 19 computes them three ways: on each rank's shard (what the bad variant averages),
on the whole set in one process (the reference), and on the counts or samples of every rank
put together (the good variant). They are plain functions of tensors, the same on a CPU and
on a GPU:

- ``confusion_counts()``: [true positives, false positives, false negatives, true
  negatives], sums that add up across ranks;
- ``f1_from_counts()``, ``precision_recall()``: ratios of those counts, which do not add up;
- ``auroc()``: the area under the ROC curve, from every score and label (no counts make it);
- ``gather_ragged()``: every rank's 1-D tensor, whatever its length, in rank order on every
  rank (``dist.all_gather`` wants tensors of one shape: pad to the longest, then trim).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def confusion_counts(predictions: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[tp, fp, fn, tn] (int64) of boolean predictions against 0/1 labels."""
    positive, predicted = labels.bool(), predictions.bool()
    return torch.stack([(predicted & positive).sum(), (predicted & ~positive).sum(),
                        (~predicted & positive).sum(), (~predicted & ~positive).sum()])


def precision_recall(counts: torch.Tensor) -> tuple[float, float]:
    """Precision tp / (tp + fp) and recall tp / (tp + fn); 0.0 where nothing is counted."""
    tp, fp, fn, _ = (int(c) for c in counts.tolist())
    return (tp / (tp + fp) if tp + fp else 0.0), (tp / (tp + fn) if tp + fn else 0.0)


def f1_from_counts(counts: torch.Tensor) -> float:
    """F1 = 2 tp / (2 tp + fp + fn), the harmonic mean of precision and recall; 0.0 for a
    shard with no positive sample and no positive prediction (scikit-learn's zero_division=0)."""
    tp, fp, fn, _ = (int(c) for c in counts.tolist())
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0


def auroc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """The area under the ROC curve: the chance that a random positive sample scores above a
    random negative one (ties count half), from the ranks of the scores (Mann-Whitney U).
    NaN when the labels hold one class only."""
    scores, labels = scores.detach().double().flatten(), labels.flatten().bool()
    positives = int(labels.sum())
    negatives = labels.numel() - positives
    if positives == 0 or negatives == 0:
        return float("nan")
    # 1-based rank of every score in ascending order; tied scores share their mean rank
    _, group, counts = torch.unique(scores, sorted=True, return_inverse=True, return_counts=True)
    last_rank = counts.cumsum(0).double()
    mean_rank = last_rank - (counts.double() - 1) / 2
    rank_sum = mean_rank[group][labels].sum().item()
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


# --8<-- [start:gather]
def gather_ragged(tensor: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Every rank's 1-D ``tensor`` concatenated in rank order, on every rank (a collective:
    every rank calls it). The lengths may differ: each rank pads its tensor to the longest
    one, all_gathers, and the padding is cut off again by the gathered lengths."""
    world_size = dist.get_world_size(group)
    length = torch.tensor([tensor.numel()], device=tensor.device)
    lengths = [torch.zeros_like(length) for _ in range(world_size)]
    dist.all_gather(lengths, length, group=group)
    sizes = [int(n) for n in torch.cat(lengths).tolist()]
    padded = torch.zeros(max(sizes), dtype=tensor.dtype, device=tensor.device)
    padded[:tensor.numel()] = tensor.flatten()
    pieces = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(pieces, padded, group=group)
    return torch.cat([piece[:size] for piece, size in zip(pieces, sizes, strict=True)])
# --8<-- [end:gather]
