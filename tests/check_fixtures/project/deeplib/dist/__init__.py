"""Backends picked by name from a dict of classes, and launch helpers picked with getattr."""

from . import backends

BACKENDS = {"nccl": backends.DDPBackend, None: backends.SingleBackend}


def make_backend(args):
    return BACKENDS[args.backend](args)
