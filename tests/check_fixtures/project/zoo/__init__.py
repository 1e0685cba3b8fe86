"""A package of model classes picked at run time, for tests/test_check_ddp.py: a registry that
classes join with a decorator, and the classes a train script imports with `*`."""

from .normed import NormedNet, WideNormedNet
from .plain import LinearNet

__all__ = ["NormedNet", "WideNormedNet", "LinearNet"]
