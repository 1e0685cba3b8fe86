"""A second package of helpers for tests/test_check_ddp.py's project fixture: a config whose
properties pick the autocast dtype, a loader helper, a progress wrapper, two solvers."""
