"""A thin entry point that a sixth review found called "not distributed": it builds its trainer
through a config object of the project, and names torch.distributed only through `import
torch` (is_initialized, destroy_process_group). Checked as distributed, with nothing to say.
Written for the tests; never run: it only has to parse."""

import torch
from helpers.config import get_config


def main(trainer_class):
    trainer = trainer_class(get_config())  # the trainer the config names: out of sight
    try:
        trainer.fit()
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
