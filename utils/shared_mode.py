"""The shared mode (``--backend gloo-cuda``): which collectives go through CPU tensors, and why.

In the shared mode N ranks use fewer GPUs than ranks, and the process group is gloo with
CUDA tensors. gloo computes in host memory. For the collectives that have a CUDA path,
ProcessGroupGloo copies each CUDA tensor into a pinned host buffer, runs the collective
there and copies the result back: all_reduce (DDP's gradients; torch 2.14's gloo has a
device and a host variant of it), broadcast, all_gather, all_gather_into_tensor and
reduce_scatter_tensor (FSDP2's training), gather, and also scatter, reduce and all_to_all
(``AsyncScatterCUDAWork``, ``AsyncReduceCUDAWork``, ``AsyncAlltoallCUDAWork`` in
libtorch_cpu.so; the scripts here do not use those three). A barrier carries no tensor.
The H200 recording (torch 2.11) ran the GPU lane's shared-mode cases (chapters 01-17)
through these.

The others must be given CPU tensors, so this module routes them through the CPU
(``CPU_ROUTED``, ``collective_device()``):

- point-to-point (send, recv, isend, irecv, batch_isend_irecv): gloo's pairs read and
  write host memory only; a CUDA tensor ends the process ("transport/tcp/pair.cc ...
  Bad address");
- the coalesced all-gather (``all_gather_into_tensor_coalesced``; in torch 2.14
  ProcessGroupGloo::all_gather_single_coalesced): no CUDA path, gloo copies from the GPU's
  addresses as if they were host memory and the process dies of SIGSEGV in a memmove
  (pytorch/pytorch#152645, open). The functional collectives' all-gather
  (``torch.ops._c10d_functional.all_gather_into_tensor``) is built on it, and so are
  ``DTensor.full_tensor()``, ``redistribute()`` to ``Replicate()`` and
  ``get_model_state_dict(..., full_state_dict=True)``: chapter 16's export died so on the
  H200 (both variants, 2 and 4 ranks);
- ``all_reduce_coalesced``: CPU tensors only (a RuntimeError, "unsupported device type").

``gather_through_cpu()`` gathers a state_dict of DTensor shards (FSDP2's) the CPU way: each
shard is copied to the CPU, wrapped again as a DTensor of the same mesh and process groups
declared for CPU tensors, and gathered there with the same DTensor call, over gloo on host
memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

if TYPE_CHECKING:  # imported where used: torch.distributed.tensor takes 0.4 s to import, and
    # every rank of every chapter imports this module (through utils/distributed.py)
    from torch.distributed.device_mesh import DeviceMesh

# op -> why the shared mode gives it CPU tensors
CPU_ROUTED: dict[str, str] = {
    "send": "point-to-point: gloo's pairs take host memory only (a CUDA tensor: 'Bad address')",
    "recv": "point-to-point: gloo's pairs take host memory only (a CUDA tensor: 'Bad address')",
    "isend": "point-to-point: gloo's pairs take host memory only (a CUDA tensor: 'Bad address')",
    "irecv": "point-to-point: gloo's pairs take host memory only (a CUDA tensor: 'Bad address')",
    "batch_isend_irecv": "point-to-point: gloo's pairs take host memory only",
    "all_gather_into_tensor_coalesced": "no CUDA path in gloo: SIGSEGV (pytorch/pytorch#152645)",
    "full_tensor": "DTensor.full_tensor() all-gathers with all_gather_into_tensor_coalesced",
    "redistribute_to_replicate": "an all-gather of the shards: all_gather_into_tensor_coalesced",
    "full_state_dict": "get_model_state_dict(full_state_dict=True) gathers DTensors (full_tensor's way)",
    "all_reduce_coalesced": "CPU tensors only in gloo (RuntimeError: unsupported device type)",
}
# ops gloo runs on CUDA tensors (through pinned host buffers; a barrier holds no tensor): they stay on
# the job's device
ON_DEVICE: frozenset[str] = frozenset({
    "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "gather", "barrier",
})


def shares_gpu(backend: str, device: torch.device) -> bool:
    """The shared mode: a gloo process group whose ranks compute on a GPU."""
    return backend == "gloo" and device.type == "cuda"


def collective_device(backend: str, device: torch.device, op: str) -> torch.device:
    """Where the tensors of collective ``op`` must live: ``device`` (the job's), except in
    the shared mode for the ops of ``CPU_ROUTED``, which get CPU tensors."""
    if op not in CPU_ROUTED and op not in ON_DEVICE:
        raise ValueError(f"collective_device: unknown collective {op!r}; known: "
                         f"{', '.join(sorted([*CPU_ROUTED, *ON_DEVICE]))}")
    if shares_gpu(backend, device) and op in CPU_ROUTED:
        return torch.device("cpu")  # gpu-checked: the shared mode's CPU route
    return device


def _cpu_mesh(mesh: DeviceMesh) -> DeviceMesh:
    """The same mesh (same ranks, same gloo groups, so the same --timeout) for CPU tensors:
    no new process group is made."""
    from torch.distributed.device_mesh import DeviceMesh

    if mesh.ndim == 1:
        # the CPU route is the point: the shared mode's gathers run on host memory
        names = mesh.mesh_dim_names
        return DeviceMesh.from_group(mesh.get_group(), "cpu", mesh_dim_names=names)  # gpu-checked
    names = mesh.mesh_dim_names or tuple(f"dim{i}" for i in range(mesh.ndim))
    return DeviceMesh.from_group([mesh.get_group(i) for i in range(mesh.ndim)], "cpu",  # gpu-checked
                                 mesh=mesh.mesh, mesh_dim_names=names)


def gather_through_cpu(state: Mapping[str, Any], *, to_all: bool) -> dict[str, Any]:
    """Whole tensors from a state_dict of DTensor shards, gathered over gloo on CPU tensors,
    one tensor at a time (collective: every rank calls it).

    ``to_all=True``: every rank keeps every whole tensor, as ``full_tensor()`` on every rank
    does; ``to_all=False``: rank 0 keeps them and the others return an empty dict, as
    ``get_model_state_dict(full_state_dict=True, cpu_offload=True)`` does. Values come back
    on the CPU; plain tensors are copied to it as they are.
    """
    from torch.distributed.tensor import DTensor

    meshes: dict[int, DeviceMesh] = {}
    keep = to_all or dist.get_rank() == 0
    full: dict[str, Any] = {}
    for key, value in state.items():
        if isinstance(value, DTensor):
            if id(value.device_mesh) not in meshes:
                meshes[id(value.device_mesh)] = _cpu_mesh(value.device_mesh)
            mesh = meshes[id(value.device_mesh)]
            shard = DTensor.from_local(value.to_local().detach().cpu(), mesh, value.placements,
                                       shape=value.shape, stride=value.stride())
            value = shard.full_tensor()
        elif isinstance(value, torch.Tensor):
            value = value.detach().cpu()
        if keep:
            full[key] = value
    return full
