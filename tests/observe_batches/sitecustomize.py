"""Which images each rank trained on: loaded by every Python process a test starts with this
folder on PYTHONPATH and OBSERVE_BATCHES_LOG set (a directory), the ranks included.

Once the script has imported utils/vision.py, each pass over a DeviceBatches (chapter 12's
device pipeline) appends a JSON line to OBSERVE_BATCHES_LOG/<pid>.jsonl: the rank, the
sampler's epoch, the indices of each batch the pass took from its BatchSampler, and how many
of the batch's images came out different from the plain normalised image (augmented). A
test reads what the script really did, from outside it.
"""

from __future__ import annotations

import builtins
import json
import os
import sys

LOG = os.environ.get("OBSERVE_BATCHES_LOG")


def _rank() -> int:
    dist = sys.modules.get("torch.distributed")
    return dist.get_rank() if dist is not None and dist.is_available() and dist.is_initialized() else -1


def _wrap(vision) -> None:
    original = vision.DeviceBatches.__iter__

    def observed_iter(self):
        real, taken, augmented = self.batches, [], [0]

        class Tap:  # what the pass takes from its BatchSampler
            def __iter__(self):
                for indices in real:
                    taken.append([int(i) for i in indices])
                    yield indices

            def __len__(self):
                return len(real)

        self.batches = Tap()
        try:
            for images, labels in original(self):
                plain = (self.images[taken[-1]].float() - self.mean) / self.std
                augmented[0] += int((images != plain).flatten(1).any(dim=1).sum())
                yield images, labels
        finally:
            self.batches = real
            line = {"rank": _rank(), "epoch": getattr(real.sampler, "epoch", None), "batches": taken,
                    "augmented": augmented[0]}
            with open(os.path.join(LOG, f"{os.getpid()}.jsonl"), "a") as file:
                file.write(json.dumps(line) + "\n")

    vision.DeviceBatches.__iter__ = observed_iter


def _import_hook() -> None:
    real_import = builtins.__import__

    def observed_import(name, *args, **kwargs):
        module = real_import(name, *args, **kwargs)
        vision = sys.modules.get("utils.vision")
        if vision is not None and hasattr(vision, "DeviceBatches"):
            _wrap(vision)
            builtins.__import__ = real_import  # done: imports go back to normal speed
        return module

    builtins.__import__ = observed_import


if LOG:
    _import_hook()
