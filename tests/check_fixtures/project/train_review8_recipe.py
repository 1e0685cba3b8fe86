"""A thin script: the whole recipe is one function of the library (deeplib/recipe.py), whose
save runs on every rank; said at the call. Written for the tests; never run: it only has to
parse."""

import argparse

from deeplib.recipe import train

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    train(parser.parse_args().epochs)  # expect: DDP040
