"""A settings module of the project (for tests/test_check_ddp.py): a line that names two backends."""

import torch

mixed_backend = "nccl" if torch.cuda.is_available() else "gloo"
