"""The quiet twin of worker.py: all but the last micro-batch under no_sync."""

from contextlib import nullcontext

import torch


class SteadyWorker:
    def __init__(self, critic, optimizer, batches, accum_rounds):
        self.critic, self.optimizer = critic, optimizer
        self.batches, self.accum_rounds = batches, accum_rounds

    def train_critic(self, step):
        for round_index in range(self.accum_rounds):
            last_round = round_index == self.accum_rounds - 1
            with nullcontext() if last_round else self.critic.no_sync():
                loss = self.critic(self.batches[step][round_index]).mean() / self.accum_rounds
                loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

    def save(self, path):
        torch.save(self.critic.module.state_dict(), path)
