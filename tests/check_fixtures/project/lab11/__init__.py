"""An eighth review's shapes (for tests/test_check_ddp.py): never run, they only parse."""
