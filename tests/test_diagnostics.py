"""where_am_i.py's diagnostics (utils/diagnostics.py): what a rank was given, as a user
attaches it to a request for help: CUDA_VISIBLE_DEVICES, its GPU, its CPUs, the network
interface NCCL would use, and the NCCL/gloo/libfabric variables set."""

from __future__ import annotations

import os
import re

import pytest

from utils.diagnostics import cpu_list, nccl_interface_summary, nccl_socket_interfaces, network_variables

NODE = {"lo": "127.0.0.1", "docker0": "172.17.0.1", "eno1": "10.0.0.5", "ib0": "10.1.0.5",
        "hsn0": "10.2.0.5", "hsn1": "10.2.1.5"}


@pytest.mark.parametrize(
    ("cpus", "text"),
    [({0}, "0"), ({0, 1, 2, 3}, "0-3"), ({0, 1, 2, 3, 8, 10, 11}, "0-3,8,10-11"), ({5, 3}, "3,5")],
)
def test_cpu_list_is_compact(cpus, text):
    assert cpu_list(cpus) == text


@pytest.mark.parametrize(
    ("interfaces", "spec", "chosen"),
    [
        (NODE, None, ["ib0"]),  # ib* first
        ({k: v for k, v in NODE.items() if k != "ib0"}, None, ["eno1", "hsn0", "hsn1"]),  # not lo/docker
        ({"lo": "127.0.0.1", "docker0": "172.17.0.1"}, None, ["lo", "docker0"]),  # nothing else
        (NODE, "hsn", ["hsn0", "hsn1"]),  # a prefix
        (NODE, "=hsn0", ["hsn0"]),  # an exact name
        (NODE, "=hsn", []),  # exact: no interface is called hsn
        (NODE, "^docker,lo", ["eno1", "ib0", "hsn0", "hsn1"]),  # exclusions
        (NODE, "eno,ib", ["eno1", "ib0"]),
    ],
)
def test_the_interface_nccl_would_use(interfaces, spec, chosen):
    env = {"NCCL_SOCKET_IFNAME": spec} if spec else {}
    assert nccl_socket_interfaces(interfaces, env)[0] == chosen


def test_interface_summary_names_the_reason_and_says_when_none_matches():
    assert nccl_interface_summary({}, NODE) == "ib0 10.1.0.5 (NCCL's default: ib* first)"
    assert nccl_interface_summary({"NCCL_SOCKET_IFNAME": "=hsn1"}, NODE) == \
        "hsn1 10.2.1.5 (NCCL_SOCKET_IFNAME==hsn1)"
    assert nccl_interface_summary({"NCCL_SOCKET_IFNAME": "eth"}, NODE).startswith("none (")


def test_network_variables_are_the_ones_that_steer_communication():
    env = {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "cxi", "PATH": "/bin", "TORCH_NCCL_BLOCKING_WAIT": "1",
           "GLOO_SOCKET_IFNAME": "hsn0", "HOME": "/h"}
    assert network_variables(env) == ["FI_PROVIDER=cxi", "GLOO_SOCKET_IFNAME=hsn0", "NCCL_DEBUG=INFO",
                                      "TORCH_NCCL_BLOCKING_WAIT=1"]


def test_where_am_i_reports_what_each_rank_was_given(pbs_torchrun_job):
    """Two ranks under torchrun: each rank's block, in rank order, with its CPUs (as
    os.sched_getaffinity says), the interface NCCL_SOCKET_IFNAME selects, and the variables.
    The run: the first launch of chapter 13's PBS job, whose site file exports
    NCCL_SOCKET_IFNAME==lo and FI_PROVIDER=tcp (conftest.pbs_torchrun_job)."""
    _, _, result = pbs_torchrun_job
    assert result.clean_summary()["world_size"] == "2"
    blocks = re.findall(r"^rank (\d)/2 .*\n    CUDA_VISIBLE_DEVICES=(\S+)  gpu (.+)\n"
                        r"    cpus (\S+) .*  nccl_interface (.+)\n    variables (.+)$",
                        result.output, flags=re.M)
    assert [b[0] for b in blocks] == ["0", "1"], result.output
    for _, cvd, gpu, cpus, interface, variables in blocks:
        assert (cvd, gpu) == ("(unset)", "none")
        assert cpus == cpu_list(os.sched_getaffinity(0))
        assert interface == "lo 127.0.0.1 (NCCL_SOCKET_IFNAME==lo)"
        assert "FI_PROVIDER=tcp" in variables and "NCCL_SOCKET_IFNAME==lo" in variables
