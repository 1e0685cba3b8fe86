"""Chapter 13: two nodes that train together (simulated with network namespaces; torchrun's
c10d rendezvous, and mpiexec alone), and two jobs on one node that collide on a fixed port
29500 but not on ports derived from their job ids.

Two nodes on one machine: two Linux network namespaces joined by a veth pair, each with its
own address (10.213.0.1 and 10.213.0.2, visible inside the namespaces only) and an interface
called ddp0 in both, as a cluster's nodes share interface names. They share the host name
(one UTS namespace), so the nodes are told apart by address, not by name; except in the
HPE/Cray test, where each node gets its own host name (a UTS namespace per command) and a
hosts file, and the PBS node file lists other, longer names of the nodes.

Also: two launches side by side in one job, each with its own port, and two forced onto one
port, which fail at once and say why.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from conftest import REPO, clean_env, mpi_env, parse_summary, run
from simulated_nodes import (
    INTERFACE,
    JOB_TIMEOUT_S,
    NODE_ADDRESSES,
    Background,
    ip,
    kill_leftovers,  # noqa: F401 - an autouse fixture: it acts by being imported here
    node_env,
    two_network_namespaces,
)

from utils.distributed import job_port, launch_port

FIXED_PORT_JOB = REPO / "scripts" / "13_multinode_and_hpc" / "fixed_port.py"
TORCHRUN_NODE = REPO / "scripts" / "13_multinode_and_hpc" / "torchrun_node.sh"


# --------------------------------------------------------------------------- two nodes
@pytest.fixture
def two_nodes():
    with two_network_namespaces() as names:
        yield names


def test_two_nodes_train_together_with_torchrun_c10d(two_nodes):
    """torchrun_node.sh once in each namespace: the rendezvous on node 0's address, on the
    job id's port; 2 x 2 ranks train as one job and end with identical parameters."""
    job_id = f"{os.getpid()}.pbs"
    rendezvous = NODE_ADDRESSES[0]  # no port: derived from the job id
    nodes = [Background(["ip", "netns", "exec", ns, "bash", TORCHRUN_NODE, "2", rendezvous, FIXED_PORT_JOB],
                        env=node_env(address, PBS_JOBID=job_id, NPROC_PER_NODE="2"))
             for ns, address in zip(reversed(two_nodes), reversed(NODE_ADDRESSES), strict=True)]
    node1, node0 = (node.finish() for node in nodes)
    assert node0.returncode == 0, node0.output
    assert node1.returncode == 0, node1.output

    # Both torchruns met at node 0's address, on the port derived from the job id.
    endpoint = f"--rdzv-endpoint={rendezvous}:{job_port(job_id)} --rdzv-id={job_id}"
    assert endpoint in node0.output and endpoint in node1.output, (node0.output, node1.output)
    # One job of 4 ranks, 2 on each node (told apart by address), identical replicas.
    summary = parse_summary(node0.output)
    assert summary["launcher"] == "torchrun" and summary["world_size"] == "4", summary
    assert summary["port_from"] == "torchrun", summary
    assert summary["nodes"] == "2" and summary["ranks_per_node"] == "2,2", summary
    assert summary["params_identical"] == "yes", node0.output
    assert re.search(rf"^node {re.escape(NODE_ADDRESSES[0])}: ranks \[0, 1\]$", node0.output, re.M)
    assert re.search(rf"^node {re.escape(NODE_ADDRESSES[1])}: ranks \[2, 3\]$", node0.output, re.M)
    assert "replicas identical: 4 rank(s) agree" in node0.output
    assert "summary:" not in node1.output, "only rank 0 (on node 0) prints"


# Hydra (MPICH's mpiexec) starts its proxy on each host with "LAUNCHER -x HOST COMMAND";
# this stand-in for ssh runs COMMAND in the namespace that plays HOST.
NAMESPACE_SSH = """#!/bin/bash
while [[ $1 == -* ]]; do shift; done
host=$1; shift
case $host in
    {0}) namespace={2} ;;
    {1}) namespace={3} ;;
    *) echo "no simulated node $host" >&2; exit 1 ;;
esac
exec ip netns exec "$namespace" bash -c "$*"
"""


def test_two_nodes_with_mpiexec_alone(two_nodes, tmp_path):
    """MPICH's mpiexec alone, 2 ranks per node (--ppn), its proxies reached through the
    ssh stand-in. MASTER_ADDR is given because the simulated nodes share a host name, which
    resolves to no address of the veth network."""
    ssh = tmp_path / "namespace_ssh"
    ssh.write_text(NAMESPACE_SSH.format(*NODE_ADDRESSES, *two_nodes))
    ssh.chmod(0o755)
    env = mpi_env("mpich")
    env.update(GLOO_SOCKET_IFNAME=INTERFACE, PBS_JOBID="4321.pbs")
    cmd = ["ip", "netns", "exec", two_nodes[0], "mpiexec", "-launcher", "ssh", "-launcher-exec", ssh,
           "-iface", INTERFACE, "-genv", "MASTER_ADDR", NODE_ADDRESSES[0], "-hosts", ",".join(NODE_ADDRESSES),
           "-n", "4", "-ppn", "2", "python", FIXED_PORT_JOB]
    result = run(cmd, env=env, timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.output
    summary = result.summary()
    assert summary["launcher"] == "mpich" and summary["world_size"] == "4", summary
    assert summary["nodes"] == "2" and summary["ranks_per_node"] == "2,2", summary
    # MPICH names no launch: rank 0 picked a free port and broadcast it (not the job id's).
    assert summary["port_from"] == "mpi_broadcast" and summary["params_identical"] == "yes", summary
    assert f"node {NODE_ADDRESSES[1]}: ranks [2, 3]" in result.output


# --------------------------------------------------------------------------- fixed port
def mpi_job(mpi: str, job_id: str | None, *args: str, placement: tuple[str, ...] = (),
            master_port: int | None = None) -> Background:
    """`mpiexec -n 2 [placement] python fixed_port.py ARGS` as a scheduler's job would run it.
    A first job runs with --hold-until FILE: it holds its port, without work, until the test
    has run the second beside it and made FILE (a long job without the CPU time of one)."""
    env = mpi_env(mpi)
    if job_id:
        env["PBS_JOBID"] = job_id
    if master_port:
        env["MASTER_PORT"] = str(master_port)
    extra = ["--oversubscribe"] if mpi == "openmpi" else []
    cmd = ["mpiexec", "-n", "2", *extra, *placement, "python", FIXED_PORT_JOB, *args]
    return Background(cmd, env=env)


def test_fixed_port_second_job_on_the_node_fails(tmp_path):
    """bad: both jobs pin 29500. The first holds it; the second's rank 0 cannot listen, its
    rank 1 reaches the first job's master, and the job ends with setup_distributed()'s one-line
    explanation, not a traceback. (mpiexec ends the job at the first rank that fails, so which
    of the two explanations shows is a race.)"""
    release = tmp_path / "release"
    first = mpi_job("openmpi", "1001.pbs", "--variant", "bad", "--hold-until", str(release))
    first.wait_for("holding the port until")
    second = mpi_job("openmpi", "1002.pbs", "--variant", "bad").finish()
    first_still_running = first.proc.poll() is None
    release.touch()
    first_result = first.finish()

    assert second.returncode != 0, second.output
    explanations = (("setup_distributed: port 29500 on 127.0.0.1 is already in use (another job or launch, "
                     "or a leftover process, holds it). It is MASTER_PORT=29500",),
                    ("setup_distributed: rank 1 of job 1002.pbs (launch PMIX_NAMESPACE=",
                     "reached the master at 127.0.0.1:29500, but it belongs to job 1001.pbs (launch "))
    assert any(all(part in second.output for part in parts) for parts in explanations), second.output
    assert "Traceback" not in second.output and "summary:" not in second.output, second.output
    # The first job held the port all through the second's run, and is unharmed.
    assert first_still_running, "the jobs did not overlap: the test proves nothing"
    assert first_result.returncode == 0, first_result.output
    summary = parse_summary(first_result.output)
    assert summary["port"] == "29500" and summary["port_from"] == "MASTER_PORT", summary
    assert summary["params_identical"] == "yes"


def both_finish_side_by_side(start_first, start_second, release: Path):
    """Start a launch that holds its port until `release` exists, then a second one beside
    it; both must finish (exit 0) and must have held their ports at the same time, or the
    test would prove nothing."""
    first = start_first()
    first.wait_for("holding the port until")
    second = start_second().finish()
    first_still_running = first.proc.poll() is None  # the two held their ports at once
    release.touch()
    first_result = first.finish()
    assert second.returncode == 0, second.output
    assert first_result.returncode == 0, first_result.output
    assert first_still_running, "the launches did not overlap: the test proves nothing"
    return first_result, second


def test_ports_from_the_job_both_jobs_finish(tmp_path):
    """good: the first job's port comes from its job id and its launch (Open MPI names the
    launch: its PMIx namespace), the second (MPICH, no scheduler, no job id) gets a free port
    from its rank 0 over MPI; side by side, both finish. (Open MPI with --map-by ppr:N:node
    and MPICH with --ppn: the forms docs/launchers.md shows.)"""
    release = tmp_path / "release"
    first_result, second = both_finish_side_by_side(
        lambda: mpi_job("openmpi", "1001.pbs", "--hold-until", str(release),
                        placement=("--map-by", "ppr:2:node")),
        lambda: mpi_job("mpich", None, placement=("--ppn", "2")), release)
    summaries = parse_summary(first_result.output), parse_summary(second.output)
    namespace = summaries[0]["port_from"].removeprefix("PBS_JOBID=1001.pbs,PMIX_NAMESPACE=")
    assert namespace != summaries[0]["port_from"], summaries[0]
    assert summaries[0]["port"] == str(launch_port("1001.pbs", f"PMIX_NAMESPACE={namespace}")), summaries[0]
    assert summaries[1]["port_from"] == "mpi_broadcast"
    assert summaries[0]["port"] != summaries[1]["port"] != "29500"
    for summary, launcher in zip(summaries, ("openmpi", "mpich"), strict=True):
        assert summary["launcher"] == launcher and summary["world_size"] == "2", summary
        assert summary["params_identical"] == "yes"


def test_torchrun_node_says_what_it_needs():
    env = clean_env(NPROC_PER_NODE="1")
    usage = run(["bash", TORCHRUN_NODE], env=env, timeout=30)
    assert usage.returncode == 2 and "usage: bash" in usage.output, usage.output
    no_port = run(["bash", TORCHRUN_NODE, "2", "node0"], env=env, timeout=30)
    assert no_port.returncode == 2, no_port.output
    assert "give RDZV_HOST:PORT, a free port, the same on every node" in no_port.output


# --------------------------------------------------------------------------- two launches, one job
def test_two_launches_in_one_job_both_finish_and_one_forced_onto_a_port_fails_fast(tmp_path):
    """Two `mpiexec -n 2` (MPICH: its Hydra names no launch) side by side in one PBS job, as
    a sweep runs them: the same PBS_JOBID, so a port derived from the job id alone would be
    the same for both. Rank 0 of each picks a free port and broadcasts it; both finish.

    Beside the same first launch, a third one with MASTER_PORT exported as the port the first
    holds: it fails at once (its rank 0 cannot listen; its rank 1 reached the first launch's
    rank 0, and stops), with a line that names MASTER_PORT, well within its --timeout; the
    first launch is unharmed. (One holder for both: a launch of 2 ranks fewer.)"""
    release = tmp_path / "release"
    first = mpi_job("mpich", "2001.pbs", "--hold-until", str(release), "--timeout", "20")
    first.wait_for("holding the port until")
    port = int(re.search(r"^rank 0 listens on 127\.0\.0\.1:(\d+) ", "".join(first.lines), flags=re.M)[1])
    second = mpi_job("mpich", "2001.pbs", "--timeout", "20").finish()
    forced = mpi_job("mpich", "2001.pbs", "--timeout", "60", master_port=port).finish()
    first_still_running = first.proc.poll() is None  # all three held their ports at once
    release.touch()
    first_result = first.finish()

    assert first_still_running, "the launches did not overlap: the test proves nothing"
    assert first_result.returncode == 0, first_result.output
    assert second.returncode == 0, second.output
    summaries = parse_summary(first_result.output), parse_summary(second.output)
    assert summaries[0]["port"] == str(port) and summaries[0]["port"] != summaries[1]["port"], summaries
    for summary in summaries:
        assert summary["port_from"] == "mpi_broadcast" and summary["params_identical"] == "yes", summary

    assert forced.returncode != 0 and "Traceback" not in forced.output, forced.output
    assert forced.seconds < 40, f"{forced.seconds:.0f} s of its 60 s --timeout: not fast"
    advice = f"It is MASTER_PORT={port}, set for this launch: give each launch (and job) its own MASTER_PORT"
    explanations = (f"setup_distributed: port {port} on 127.0.0.1 is already in use (another job or "
                    f"launch, or a leftover process, holds it). {advice}",
                    f"reached the master at 127.0.0.1:{port}, but it belongs to another launch of the same "
                    "job: job 2001.pbs (launch mpi_token=")
    assert any(line in forced.output for line in explanations), forced.output


# --------------------------------------------------------------------------- HPE/Cray node names
# PBS on HPE/Cray lists the nodes by their high-speed-network names, while `hostname` on a node
# says the short name, which resolves to the node's address on another (management) network.
CRAY_NAMES = ("nid001000", "nid001001")
HSN_NAMES = tuple(f"{name}.hsn.cm.example" for name in CRAY_NAMES)
MANAGEMENT_ADDRESSES = ("10.214.0.1", "10.214.0.2")

# Hydra's ssh stand-in, as above, but each simulated node also has its own host name.
CRAY_SSH = """#!/bin/bash
while [[ $1 == -* ]]; do shift; done
host=$1; shift
case $host in
    {0}) namespace={2}; name={4} ;;
    {1}) namespace={3}; name={5} ;;
    *) echo "no simulated node $host" >&2; exit 1 ;;
esac
exec ip netns exec "$namespace" unshare --uts bash -c "hostname $name && $*"
"""


@pytest.fixture
def cray_nodes(two_nodes):
    """The two nodes, each with its own host name (a UTS namespace, set per command) and the
    same hosts file (`ip netns exec` mounts /etc/netns/NAME/hosts over /etc/hosts): the node
    file's names on the veth network, the short names on a second, "management" network."""
    made = ip("link", "add", "mgmt0", "netns", two_nodes[0], "type", "veth",
               "peer", "name", "mgmt0", "netns", two_nodes[1])
    assert made.returncode == 0, made.stderr
    for name, address in zip(two_nodes, MANAGEMENT_ADDRESSES, strict=True):
        for args in (("addr", "add", f"{address}/24", "dev", "mgmt0"), ("link", "set", "mgmt0", "up")):
            done = ip("-n", name, *args)
            assert done.returncode == 0, (name, args, done.stderr)
    hosts = "127.0.0.1 localhost\n" + "".join(
        f"{hsn_address} {hsn}\n{management} {short}\n"
        for hsn_address, hsn, management, short in zip(NODE_ADDRESSES, HSN_NAMES, MANAGEMENT_ADDRESSES,
                                                       CRAY_NAMES, strict=True))
    folders = [Path("/etc/netns") / name for name in two_nodes]
    try:
        for folder in folders:
            folder.mkdir(parents=True)
            (folder / "hosts").write_text(hosts)
        yield two_nodes
    finally:
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def test_pbs_torchrun_on_cray_node_names(cray_nodes, tmp_path):
    """pbs_common.sh's launch_torchrun in a two-node PBS job whose node file lists the nodes'
    high-speed-network names (nid001000.hsn.cm.example) while `hostname` says nid001000: the
    first node's torchrun hosts the rendezvous, and a rank on each node trains (the names
    are the point here; 2 ranks per node: test_two_nodes_train_together_with_torchrun_c10d)."""
    ssh = tmp_path / "cray_ssh"
    ssh.write_text(CRAY_SSH.format(*HSN_NAMES, *cray_nodes, *CRAY_NAMES))
    ssh.chmod(0o755)
    nodefile = tmp_path / "nodefile"
    nodefile.write_text("".join(f"{name}\n{name}\n" for name in HSN_NAMES))  # once per CPU, as PBS does
    mpiexec = mpi_env("mpich")["PATH"].split(os.pathsep)[0] + "/mpiexec"
    job_id = f"{os.getpid()}.pbs"
    env = clean_env(PBS_NODEFILE=str(nodefile), PBS_JOBID=job_id, PBS_O_WORKDIR=str(REPO),
                    HOME=str(tmp_path), VENV=str(Path(sys.executable).parents[1]), NPROC_PER_NODE="1",
                    GLOO_SOCKET_IFNAME=INTERFACE,
                    NODE_LAUNCHER=f"{mpiexec} -launcher ssh -launcher-exec {ssh} -iface {INTERFACE} "
                                  f"-hosts {','.join(HSN_NAMES)} -n 2 -ppn 1")
    job = "source scripts/pbs_common.sh && launch_torchrun scripts/13_multinode_and_hpc/fixed_port.py"
    result = run(["ip", "netns", "exec", cray_nodes[0], "unshare", "--uts", "bash", "-c",
                  f"hostname {CRAY_NAMES[0]} && {job}"], env=env, timeout=JOB_TIMEOUT_S)
    assert result.returncode == 0, result.output
    assert f"job {job_id}: 2 node(s) [{' '.join(HSN_NAMES)}] x 1 process(es)" in result.output
    # The first node's torchrun was told to host the rendezvous at its node-file name.
    hosts = re.findall(rf"--rdzv-endpoint={re.escape(HSN_NAMES[0])}:\d+ --rdzv-id={job_id} "
                       r"--rdzv-conf=is_host=true", result.output)
    assert len(hosts) == 1, result.output
    summary = result.clean_summary()
    assert summary["launcher"] == "torchrun" and summary["world_size"] == "2", summary
    assert summary["nodes"] == "2" and summary["ranks_per_node"] == "1,1", summary
    assert summary["params_identical"] == "yes", result.output
