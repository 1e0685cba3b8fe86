"""A Python that has imported torch once, and forks a process for each `python SCRIPT ARGS`
the tests launch (conftest.python): the script runs in that process as __main__, as `python
SCRIPT` runs it, without an interpreter start and an `import torch` of its own (about 1.8
CPU-s a launch).

    python tests/preloaded_python.py   (conftest starts it; it reads requests on stdin)

Each request is a JSON line: {"script", "args", "env", "cwd", "output"}. The server forks; the
child becomes a session of its own, sends its stdout and stderr (file descriptors 1 and 2:
what C++ prints too) to the file "output", takes the request's environment, folder and
argv, and runs the script; an uncaught exception prints its traceback (from the script's
frames on) and exits 1, as Python does. The server answers {"pid"} at once, then {"pid",
"returncode", "cpu_seconds"} when the child has ended (os.wait4: its CPU and its own
children's, as conftest's launches count them; a negative code is the signal that ended it).

Only the environment the server started with is served (conftest.clean_env()'s), but for
the launchers' variables (RANK, WORLD_SIZE, MASTER_ADDR, ...), which torch reads when a
process group starts, not when it is imported: a run with any other difference (PYTHONPATH,
TORCH_*, CUDA_VISIBLE_DEVICES, ...) is launched for real by conftest.
"""

from __future__ import annotations

import json
import os
import sys


def serve() -> dict:
    """Answer requests until stdin closes (then exit); return the request in a forked child."""
    # The imports every child is spared: torch, and what its children import next (torchrun's
    # agent; DistributedDataParallel, which imports torch._dynamo as it wraps a model)
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.distributed.run  # noqa: F401
    import torch.nn.parallel  # noqa: F401

    answers = os.dup(1)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os.close(answers)
            return request
        os.write(answers, (json.dumps({"pid": pid}) + "\n").encode())
        _, status, usage = os.wait4(pid, 0)
        done = {"pid": pid, "returncode": os.waitstatus_to_exitcode(status),
                "cpu_seconds": usage.ru_utime + usage.ru_stime}
        os.write(answers, (json.dumps(done) + "\n").encode())
    sys.exit(0)


def become(request: dict) -> None:
    """This child as `python SCRIPT ARGS` started in the request's folder and environment."""
    os.setsid()  # a session of its own, as conftest's launches start: a timeout kills its group
    output = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(output)
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    sys.stdin = open(0, closefd=False)  # (the server's reader may hold read-ahead of the requests)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["script"], *request["args"]]
    sys.path[0] = os.path.dirname(os.path.abspath(request["script"]))  # as `python SCRIPT` sets it


if __name__ == "__main__":
    _request = serve()
    become(_request)
    import runpy
    import traceback

    try:
        runpy.run_path(_request["script"], run_name="__main__")
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as error:  # Python's report of it, from the script's frames on (not runpy's)
        frames = traceback.extract_tb(error.__traceback__)
        first = next((i for i, frame in enumerate(frames) if frame.filename == _request["script"]), 0)
        report = traceback.TracebackException.from_exception(error)
        report.stack = traceback.StackSummary.from_list(frames[first:])
        sys.stderr.write("".join(report.format()))
        sys.exit(1)
