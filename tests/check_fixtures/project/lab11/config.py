"""A config read from a JSON file named on the command line, its keys as attributes."""

import json
from types import SimpleNamespace


def load_config(path):
    with open(path) as f:
        return json.load(f, object_hook=lambda d: SimpleNamespace(**d))
