"""What a rank can say about where it runs, beyond its rank: the GPU it uses, the CPUs it
may run on, the network interface NCCL would pick, and the variables that steer NCCL.
scripts/13_multinode_and_hpc/where_am_i.py prints them; they diagnose most launch problems.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterable, Mapping

import torch

# Variables that change how NCCL, torch's NCCL layer, gloo and libfabric behave.
NETWORK_VARIABLE_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "GLOO_", "FI_", "UCX_")


def cpu_list(cpus: Iterable[int]) -> str:
    """'0-3,8,10-11' for {0, 1, 2, 3, 8, 10, 11}: the form taskset and numactl print."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def cpu_affinity() -> str:
    """The CPUs this process may run on (os.sched_getaffinity), and how many."""
    cpus = os.sched_getaffinity(0)
    return f"{cpu_list(cpus)} ({len(cpus)} of {os.cpu_count()})"


def gpu_description(device: torch.device) -> str:
    """'NVIDIA H100 80GB HBM3 uuid=... pci=0000:19:00' for a CUDA device, else 'none'."""
    if device.type != "cuda":
        return "none"
    props = torch.cuda.get_device_properties(device)
    text = f"{props.name} uuid={getattr(props, 'uuid', '?')}"
    bus = getattr(props, "pci_bus_id", None)  # not in every torch release
    if bus is not None:
        domain, slot = getattr(props, "pci_domain_id", 0), getattr(props, "pci_device_id", 0)
        text += f" pci={domain:04x}:{bus:02x}:{slot:02x}"
    return text


def ipv4_interfaces() -> dict[str, str]:
    """This node's network interfaces that have an IPv4 address: name -> address."""
    import fcntl

    found = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(sock.fileno(), 0x8915,  # SIOCGIFADDR
                                     struct.pack("256s", name[:15].encode()))
            except OSError:
                continue  # no IPv4 address
            found[name] = socket.inet_ntoa(packed[20:24])
    return found


def _matches(name: str, rule: str) -> bool:
    return name == rule[1:] if rule.startswith("=") else name.startswith(rule)


def nccl_socket_interfaces(interfaces: Mapping[str, str], env: Mapping[str, str]) -> tuple[list[str], str]:
    """The interfaces NCCL's sockets (bootstrap, and TCP traffic without a faster transport)
    would use, and why. NCCL_SOCKET_IFNAME, when set, is a comma-separated prefix list
    ('^' excludes, '=' matches a name exactly); unset, NCCL prefers ib* interfaces, then any
    other but lo and docker*, and takes those two only when nothing else exists
    (NCCL user guide, "Environment Variables", NCCL_SOCKET_IFNAME)."""
    names = list(interfaces)
    spec = env.get("NCCL_SOCKET_IFNAME", "").strip()
    if spec:
        exclude = spec.startswith("^")
        rules = [r for r in spec.lstrip("^").split(",") if r]
        chosen = [n for n in names if any(_matches(n, r) for r in rules) != exclude]
        return chosen, f"NCCL_SOCKET_IFNAME={spec}"
    for label, pick in (
        ("NCCL's default: ib* first", lambda n: n.startswith("ib")),
        ("NCCL's default: not lo or docker*", lambda n: n != "lo" and not n.startswith("docker")),
        ("NCCL's default: only docker*/lo left", lambda n: True),
    ):
        chosen = [n for n in names if pick(n)]
        if chosen:
            return chosen, label
    return [], "no interface with an IPv4 address"


def nccl_interface_summary(env: Mapping[str, str] | None = None,
                           interfaces: Mapping[str, str] | None = None) -> str:
    """'eth0 10.1.0.12 (NCCL's default: not lo or docker*)': NCCL's first choice on this node."""
    env = os.environ if env is None else env
    interfaces = ipv4_interfaces() if interfaces is None else interfaces
    chosen, why = nccl_socket_interfaces(interfaces, env)
    if not chosen:
        return f"none ({why}: NCCL cannot bootstrap; check NCCL_SOCKET_IFNAME)"
    return f"{chosen[0]} {interfaces[chosen[0]]} ({why})"


def network_variables(env: Mapping[str, str] | None = None) -> list[str]:
    """'NAME=value' for every set variable that steers NCCL, gloo or libfabric, sorted."""
    env = os.environ if env is None else env
    return sorted(f"{k}={v}" for k, v in env.items() if k.startswith(NETWORK_VARIABLE_PREFIXES))
