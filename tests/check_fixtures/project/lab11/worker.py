"""A worker object whose methods train: accumulation without no_sync in train_critic() and
train_actor(); a save that the launcher calls on rank 0 alone."""

import torch


class Worker:
    def __init__(self, critic, optimizer, batches, accum_rounds):
        self.critic, self.optimizer = critic, optimizer
        self.batches, self.accum_rounds = batches, accum_rounds

    def train_critic(self, step):
        for round_index in range(self.accum_rounds):
            loss = self.critic(self.batches[step][round_index]).mean() / self.accum_rounds
            loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

    def train_actor(self, step):
        for round_index in range(self.accum_rounds):
            (-self.critic(self.batches[step][round_index]).mean() / self.accum_rounds).backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

    def save(self, path):
        torch.save(self.critic.module.state_dict(), path)
