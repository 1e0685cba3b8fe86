"""Let any process of this user attach a debugger (py-spy) to this one: loaded by the
Python processes of tests/test_13_debugging.py's py-spy test (this folder on PYTHONPATH).

Under Yama's ptrace_scope=1 (Ubuntu's default, and CI runners') a process may trace only its
own descendants; py-spy is not an ancestor of the ranks it dumps. PR_SET_PTRACER_ANY opts
this process out of that restriction, as `gdb -p` users do. Where Yama is absent prctl()
fails with EINVAL and nothing changes: ptrace is then governed by CAP_SYS_PTRACE alone.
"""

import ctypes
import ctypes.util

PR_SET_PTRACER = 0x59616D61
PR_SET_PTRACER_ANY = ctypes.c_ulong(-1)

try:
    ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True).prctl(
        PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0)
except (OSError, AttributeError):  # not Linux: py-spy's own rules apply
    pass
