"""The harness's own promise: a run that outlives its timeout fails, and leaves nothing behind."""

from __future__ import annotations

import re
import time

import psutil
import pytest
from conftest import run


def test_a_timed_out_run_kills_descendants_in_sessions_of_their_own():
    # Like torchrun, whose workers run in sessions of their own: a kill of the launcher's
    # process group alone would leave them running, holding ports and CPUs.
    with pytest.raises(pytest.fail.Exception, match="timed out after 2 s") as failure:
        run(["bash", "-c", "setsid sleep 300 & echo worker pid $!; wait"], timeout=2)
    worker = int(re.search(r"worker pid (\d+)", str(failure.value)).group(1))
    deadline = time.monotonic() + 5
    while psutil.pid_exists(worker) and psutil.Process(worker).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"worker {worker} outlived the timed-out run"
        time.sleep(0.1)
