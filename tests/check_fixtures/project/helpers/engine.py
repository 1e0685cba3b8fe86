"""Evaluation loops: one that sums per batch and all-reduces (two modules deep), one that
keeps its detections by image id, and one that saves the best model on whoever calls it."""

import torch

from . import metrics
from .io import save_checkpoint


@torch.no_grad()
def evaluate(model, loader):
    correct = torch.zeros(2)
    for images, labels in loader:
        correct += torch.stack([(model(images).argmax(1) == labels).sum(), torch.tensor(len(labels))])
    metrics.reduce_sum(correct)
    return (correct[0] / correct[1]).item()


@torch.no_grad()
def evaluate_detections(model, loader, evaluator):
    for images, targets in loader:
        outputs = model(images)
        pairs = zip(targets, outputs, strict=True)
        evaluator.update({target["image_id"].item(): output for target, output in pairs})
    return evaluator.summarize()


def validation(model, loader, best_path):
    model.eval()
    with torch.no_grad():
        loss = sum(torch.nn.functional.cross_entropy(model(x), y).item() for x, y in loader)
    save_checkpoint(model, best_path)
    return loss
