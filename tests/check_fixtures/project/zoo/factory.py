"""A factory of the project that builds the model a config names through a registry (for
tests/test_check_ddp.py)."""

from .registry import HEADS, MODELS


def build_model(cfg):
    model = MODELS.build(cfg)
    return model


def build_head(cfg):
    return HEADS.get(cfg["head"])()
