"""Shared plumbing for the chapter scripts: launchers, flags, data, timing."""
