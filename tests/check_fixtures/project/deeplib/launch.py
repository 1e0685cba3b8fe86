"""The entry point a thin script calls: one process per GPU, each runs a Trainer."""

import torch.multiprocessing as mp

from deeplib.config import Config
from deeplib.engine.trainer import Trainer


def worker(rank, settings):
    config = Config(settings, rank)
    trainer = Trainer(config)
    trainer.fit()


def run(nproc=2, ip="localhost", port="5679"):
    settings = {"nproc": nproc, "ip": ip, "port": port}
    mp.spawn(worker, args=(settings,), nprocs=nproc)
