"""An evaluation that writes one line per sample, its id first: a merge step reads every
rank's file and keeps one line per id."""

import torch


@torch.no_grad()
def predict_to_file(model, loader, path):
    model.eval()
    lines = []
    for inputs, sample_ids in loader:
        scores = model(inputs)
        for i in range(len(sample_ids)):
            lines.append(f"{sample_ids[i]} {scores[i].argmax().item()}\n")
    with open(path, "w") as f:
        f.writelines(lines)
