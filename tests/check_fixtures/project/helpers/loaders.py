"""A class that makes the loaders of a run: a method returns them as a tuple, and private
methods build each one on its own DistributedSampler (tests/check_fixtures/project/
train_review6.py). Written for the tests; never run."""

from torch.utils.data import DataLoader, DistributedSampler


class LoaderMaker:
    def __init__(self, train_set, held_out, batch_size):
        self.train_set, self.held_out, self.batch_size = train_set, held_out, batch_size

    def loaders(self, rank, world):
        training = self._training(rank, world)
        evaluation = self._evaluation(rank, world)
        return training, evaluation

    def _training(self, rank, world):
        sampler = DistributedSampler(self.train_set, num_replicas=world, rank=rank, shuffle=True)
        return DataLoader(self.train_set, batch_size=self.batch_size, sampler=sampler)

    def _evaluation(self, rank, world):
        sampler = DistributedSampler(self.held_out, num_replicas=world, rank=rank, shuffle=False)
        loader = DataLoader(self.held_out, batch_size=self.batch_size, sampler=sampler)
        return loader
