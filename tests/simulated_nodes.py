"""Two nodes on one machine, for the tests of chapters 13 and 14: two Linux network
namespaces joined by a veth pair, each with its own address (10.213.0.1 and 10.213.0.2,
visible inside the namespaces only) and an interface called ddp0 in both, as a cluster's
nodes share interface names. They share the host name (one UTS namespace), so the nodes
are told apart by address, not by name.

Also `Background`: a command left running (a node's launcher) whose output is read line by
line, killed with its whole tree if it outlives its timeout or the test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, TEARDOWN_FAILURES, Result, clean_env, kill_tree, log_launch

NODE_ADDRESSES = ("10.213.0.1", "10.213.0.2")
INTERFACE = "ddp0"
JOB_TIMEOUT_S = 150  # generous: the machine is shared; a hang still ends


class Background:
    """A command started now and left running, its output collected line by line;
    the whole process group is killed if it outlives its timeout or the test."""

    running: list[Background] = []

    def __init__(self, cmd: list, env: dict[str, str], timeout: float = JOB_TIMEOUT_S) -> None:
        from captured_outputs import CpuPopen  # its CPU seconds, for LAUNCH_LOG

        self.cmd, self.timeout, self.lines = cmd, timeout, []
        self.proc = CpuPopen(
            [str(c) for c in cmd], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        self.started = time.monotonic()
        Background.running.append(self)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float = 90) -> None:
        """Block until a line contains ``text``; fail if the command ends or time runs out."""
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"never printed {text!r}: {' '.join(map(str, self.cmd))}\n{''.join(self.lines)}")
            time.sleep(0.1)

    def finish(self) -> Result:
        try:
            self.proc.wait(timeout=max(1.0, self.timeout - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"timed out (a hang?): {' '.join(map(str, self.cmd))}\n{''.join(self.lines)}")
        self._reader.join(timeout=10)
        log_launch(" ".join(map(str, self.cmd)), time.monotonic() - self.started, self.proc.cpu_seconds)
        output = "".join(self.lines)
        for sign in TEARDOWN_FAILURES:
            assert sign not in output, f"teardown problem ({sign!r}):\n{output}"
        return Result(self.proc.returncode, output, time.monotonic() - self.started)

    def kill(self) -> None:
        kill_tree(self.proc.pid)
        self.proc.wait()


@pytest.fixture(autouse=True)
def kill_leftovers():
    """Whatever a test left running (it failed half-way) is killed when it ends. A test
    module that starts Background commands imports this fixture."""
    before = set(Background.running)
    yield
    for job in set(Background.running) - before:
        job.kill()


def ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


@contextlib.contextmanager
def two_network_namespaces() -> Iterator[list[str]]:
    """Two network namespaces joined by a veth pair: the namespaces' names, node 0's first.

    Removed at the end whatever happened (removing a namespace removes its veth end).
    Skips the test where namespaces cannot be made (outside CI; in CI it fails)."""
    if shutil.which("ip") is None:
        reason = "the `ip` command (iproute2) is missing: cannot simulate two nodes"
    else:
        probe = ip("netns", "add", f"ddp13-probe-{uuid.uuid4().hex[:8]}")
        reason = None if probe.returncode == 0 else (
            f"`ip netns add` is not permitted here ({probe.stderr.strip()}): two simulated nodes "
            "need root (or CAP_SYS_ADMIN and CAP_NET_ADMIN)")
        if probe.returncode == 0:
            ip("netns", "delete", probe.args[-1])
    if reason:
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)

    tag = uuid.uuid4().hex[:8]  # unique per run: helpers and CI jobs may run side by side
    names = [f"ddp13-{tag}-node{i}" for i in range(2)]
    try:
        for name in names:
            assert ip("netns", "add", name).returncode == 0, name
        # Each end is created inside its namespace: the same name on both, no clash outside.
        made = ip("link", "add", INTERFACE, "netns", names[0], "type", "veth",
                  "peer", "name", INTERFACE, "netns", names[1])
        assert made.returncode == 0, made.stderr
        for name, address in zip(names, NODE_ADDRESSES, strict=True):
            for args in (("addr", "add", f"{address}/24", "dev", INTERFACE),
                         ("link", "set", INTERFACE, "up"), ("link", "set", "lo", "up")):
                done = ip("-n", name, *args)
                assert done.returncode == 0, (name, args, done.stderr)
        yield names
    finally:
        for name in names:
            ip("netns", "delete", name)


def node_env(address: str, **extra: str) -> dict[str, str]:
    """A node's environment: .venv's tools first, gloo on the simulated network's interface,
    the node's address as torchrun_node.sh reads it (LOCAL_ADDR)."""
    return clean_env(PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                     GLOO_SOCKET_IFNAME=INTERFACE, LOCAL_ADDR=address, **extra)
