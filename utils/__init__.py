"""Shared plumbing for the chapter scripts: launchers (distributed), flags (cli), data,
timing, rank-aware logging (logging_utils) and checkpoints (checkpoint)."""
