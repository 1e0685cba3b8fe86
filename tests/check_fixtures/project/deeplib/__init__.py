"""A library of our own, for the checker's tests: its DDP set-up, training loop and saves live
three and more modules below the scripts that use it. Never run: it only has to parse."""
