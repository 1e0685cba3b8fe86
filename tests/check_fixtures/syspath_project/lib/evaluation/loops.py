"""An evaluation loop of the project under lib/, found through sys.path (never run)."""

import torch


@torch.no_grad()
def validate(loader, model):
    correct = torch.zeros(2)
    for images, labels in loader:
        correct += torch.stack([(model(images).argmax(1) == labels).sum(), torch.tensor(len(labels))])
    torch.distributed.all_reduce(correct)
    return (correct[0] / correct[1]).item()
