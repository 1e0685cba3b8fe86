"""Scorers built three calls deep (make_scorers -> make_scorer -> make_score_loader), each
keeping its loader in a field."""

from dataclasses import dataclass

from torch.utils.data import DataLoader, DistributedSampler


@dataclass
class Scorer:
    label: str
    score_loader: DataLoader


def make_score_loader(dataset, settings):
    sampler = DistributedSampler(dataset, shuffle=False, drop_last=settings.drop_last)
    return DataLoader(dataset, batch_size=settings.batch_size, sampler=sampler)


def make_scorer(label, dataset, settings):
    loader = make_score_loader(dataset, settings)
    return Scorer(label=label, score_loader=loader)


def make_scorers(datasets, settings):
    scorers = []
    for label, dataset in datasets.items():
        scorers.append(make_scorer(label, dataset, settings))
    return scorers
