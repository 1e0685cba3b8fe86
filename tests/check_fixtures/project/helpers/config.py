"""The run's settings, made by a function: a namespace."""

from types import SimpleNamespace


def get_config():
    return SimpleNamespace(dist_url="tcp://127.0.0.1:23459", batch_size=8)
