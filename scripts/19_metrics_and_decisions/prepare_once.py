"""Chapter 19: prepare a data file once per node, while the other ranks wait.

Every rank of a job needs the same prepared data: a data set downloaded and unpacked, a
corpus tokenized, features computed. Here it is a cache file of --num-tokens token ids
(int32) with a header (length, checksum), written slowly, as a large file on a busy file
system is. Started from an empty --cache-dir, as the first job on a new cluster is.

The pitfall (--variant bad): every rank prepares the file it needs unless it is already
there. The first rank finds nothing and starts writing; a rank that comes a moment later
finds the file, reads it, and gets half of it: its checksum does not match (a torn read).
The fix (--variant good, the default): one rank writes the file, to a temporary name that
is renamed when the file is complete; every rank waits at a barrier, then reads it. Which
rank writes depends on where --cache-dir is:
    --cache-on node-local  a disk of each node (/tmp, $TMPDIR): local rank 0 of every node;
    --cache-on shared      one file system every node sees: rank 0 alone.

To show the race every run, the ranks come in a fixed order: local rank 0 first, the others
once it has begun to write. In the bad variant the first writers then finish their file only
once the others have read it (in a real job the order is chance, and the race shows in some
runs only; here it shows in every run, however loaded the machine).

Run it:
    torchrun --standalone --nproc_per_node=2 scripts/19_metrics_and_decisions/prepare_once.py --variant bad
    torchrun --standalone --nproc_per_node=2 scripts/19_metrics_and_decisions/prepare_once.py
    mpiexec -n 3 python scripts/19_metrics_and_decisions/prepare_once.py --cache-dir /tmp/ch19_mpi
    python scripts/19_metrics_and_decisions/prepare_once.py          # 1 process: nobody to race
Two nodes, each with its own /tmp (run on each node, NODE = 0 or 1):
    torchrun --nnodes=2 --node-rank=NODE --nproc-per-node=2 --master-addr=node0 --master-port=29519 \\
        scripts/19_metrics_and_decisions/prepare_once.py --cache-on node-local
"""

import datetime
import sys
import tempfile
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root, for utils/

import torch
import torch.distributed as dist

from utils.cache_file import CacheError, encode, read_cache, write_atomically, write_in_place
from utils.cli import add_variant_arg, make_parser, output_dir, positive_float, positive_int
from utils.distributed import cleanup_distributed, print0, setup_distributed

CACHE_NAME = "tokens.cache"
STARTED = "ch19/cache_write_started"  # the job's store key the first writer sets
READ, ALL_READ = "ch19/cache_reads", "ch19/cache_all_read"  # the bad variant's readers count


def parse_args():
    parser = make_parser(__doc__)
    parser.add_argument("--cache-dir", type=output_dir,
                        default=str(Path(tempfile.gettempdir()) / "ddp_ch19_cache"),
                        help="where the cache file goes; emptied first (default: %(default)s)")
    parser.add_argument("--cache-on", choices=["node-local", "shared"], default="node-local",
                        help="node-local: every node has its own --cache-dir (local rank 0 of each "
                        "node writes); shared: all nodes see one (rank 0 writes) (default: %(default)s)")
    parser.add_argument("--num-tokens", type=positive_int, default=1 << 20,
                        help="token ids in the cache file, 4 bytes each (default: %(default)s)")
    parser.add_argument("--write-seconds", type=positive_float, default=1.0,
                        help="how long writing the file takes (default: %(default)s)")
    add_variant_arg(parser, bad="every rank prepares the file unless it is there: torn reads",
                    good="one writer per node (or per job), atomic rename, a barrier")
    return parser.parse_args()


def tokenize(num_tokens: int, seed: int) -> bytes:
    """The preparation itself: here, token ids drawn at random (int32), the same on every
    rank and every machine for a seed. In a real job: tokenizing a corpus, unpacking a
    download, computing features."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 50257, (num_tokens,), generator=generator, dtype=torch.int32).numpy().tobytes()


def main() -> None:
    args = parse_args()
    # 1. Join the process group, and start from an empty cache: each node's local rank 0
    #    removes the file from its --cache-dir (a shared one may see two removals: harmless).
    ctx = setup_distributed(args.backend, args.timeout)
    cache = args.cache_dir / CACHE_NAME
    if ctx.local_rank == 0:
        cache.unlink(missing_ok=True)
    dist.barrier()
    print0(f"launcher={ctx.launcher} world_size={ctx.world_size} local_world_size={ctx.local_world_size} "
           f"variant={args.variant} cache_on={args.cache_on} cache={cache}")
    store = dist.distributed_c10d._get_default_store()  # the job's key-value store

    # The fixed order (see the docstring). In the bad variant each local rank 0 holds its
    # write after the first piece until every other rank has read: their reads fall
    # mid-write however loaded the machine is. Bounded by --timeout.
    readers = ctx.world_size - ctx.world_size // (ctx.local_world_size or ctx.world_size)
    hold = args.variant == "bad" and ctx.local_rank == 0 and readers > 0

    def announce() -> None:  # the first writer's first bytes are out
        store.set(STARTED, "1")
        if hold:
            try:
                store.wait([ALL_READ], datetime.timedelta(seconds=args.timeout))
            except dist.DistStoreError:
                pass  # not every reader came (nodes with different numbers of ranks): write on

    # 2. The ranks come: local rank 0 first, the others once a writer has begun (see above).
    if ctx.local_rank != 0:
        store.wait([STARTED], datetime.timedelta(seconds=args.timeout))
    writes = 0

    if args.variant == "bad":
        # --8<-- [start:bad]
        # bad: every rank prepares the file it needs, unless it is already there.
        if not cache.exists():
            write_in_place(cache, encode(tokenize(args.num_tokens, args.seed)),
                           args.write_seconds, announce)
            writes += 1
        # --8<-- [end:bad]
    else:
        # --8<-- [start:good]
        # good: one rank per node (node-local disks) or per job (a shared file system)
        # writes, under a temporary name renamed when complete; everyone waits for it.
        writer = ctx.local_rank == 0 if args.cache_on == "node-local" else ctx.rank == 0
        if writer and not cache.exists():
            write_atomically(cache, encode(tokenize(args.num_tokens, args.seed)),
                             args.write_seconds, announce)
            writes += 1
        dist.barrier()  # nobody reads before every writer is done
        # --8<-- [end:good]

    # 3. Every rank reads the file and checks it against its header.
    # --8<-- [start:read]
    try:
        tokens = torch.frombuffer(bytearray(read_cache(cache)), dtype=torch.int32)
        outcome = f"ok, {tokens.numel()} tokens, crc {zlib.crc32(tokens.numpy().tobytes()):08x}"
    except CacheError as error:
        outcome = str(error)
    # --8<-- [end:read]
    if args.variant == "bad" and ctx.local_rank != 0 and store.add(READ, 1) == readers:
        store.set(ALL_READ, "1")  # the last reader: the held writers may finish (the fixed order)

    # 4. What every rank did, gathered to rank 0.
    reports: list = [None] * ctx.world_size
    dist.all_gather_object(reports, (ctx.local_rank, writes, outcome))
    for rank, (local_rank, wrote, what) in enumerate(reports):
        print0(f"rank {rank} (local rank {local_rank}): {'wrote the file, ' if wrote else ''}"
               f"{'read it' if what.startswith('ok') else 'could not read it'}: {what}")
    failed = [what for _, _, what in reports if not what.startswith("ok")]
    if any(what.startswith("torn") for what in failed):
        print0("WARNING: a rank read the file while another was still writing it. A training job "
               "would crash on such a file, or worse, train on part of the data.")
    if any(what.startswith("no file") for what in failed):
        print0("WARNING: a rank found no file: its node does not see the --cache-dir the writer "
               "wrote to. With a disk per node, give --cache-on node-local.")
    print0(f"summary: variant={args.variant} cache_on={args.cache_on} world_size={ctx.world_size} "
           f"backend={ctx.backend} launcher={ctx.launcher} "
           f"writes_per_rank={','.join(str(w) for _, w, _ in reports)} failed_reads={len(failed)} "
           f"reads_ok={ctx.world_size - len(failed)}/{ctx.world_size}")
    cleanup_distributed()
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
