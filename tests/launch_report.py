"""Where the suite's time goes, from a LAUNCH_LOG (tests/conftest.py log_launch):

    LAUNCH_LOG=/tmp/launches.tsv .venv/bin/python -m pytest ...
    .venv/bin/python tests/launch_report.py /tmp/launches.tsv

Prints the launches and their CPU seconds (user + system of the launch and of every process
it waited for: load-independent to first order, unlike the wall seconds, which are printed
beside them), per test file, the most expensive commands, and the commands launched more
than once (a test that could assert on a run another test or a capture already made).
A Slurm job's CPU is not known ("-": slurmd starts its tasks).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

# conftest's background thread (prefetch_captured_runs): the test a line names is the one that
# ran in the foreground meanwhile
BACKGROUND = "(captures run in the background)"


def read(path: str) -> list[tuple[str, str, float, float | None, str]]:
    rows = []
    for line in open(path):
        fields = line.rstrip("\n").split("\t")
        if len(fields) == 4:  # a log from before the CPU column
            fields.insert(3, "-")
        if len(fields) != 5:  # the rest of a command's line break, in a log from before it was escaped
            continue
        test, thread, wall, cpu, command = fields
        rows.append((test, thread, float(wall), None if cpu == "-" else float(cpu), command))
    return rows


def main(path: str, top: int = 15) -> None:
    rows = read(path)
    cpu_known = [r for r in rows if r[3] is not None]
    print(f"{len(rows)} launches, {sum(r[3] for r in cpu_known):.0f} CPU-s ({len(rows) - len(cpu_known)} "
          f"without a CPU count), {sum(r[2] for r in rows):.0f} wall-s summed (launches overlap)")
    by_file: dict[str, list] = defaultdict(list)
    for row in rows:  # a background capture ran beside the test it names, not for it
        by_file[BACKGROUND if row[1] == "captures" else row[0].split("::")[0] or "(no test)"].append(row)
    print("\nper test file: launches, CPU-s, wall-s")
    for name, items in sorted(by_file.items(), key=lambda kv: -sum(r[3] or 0 for r in kv[1])):
        cpu, wall = sum(r[3] or 0 for r in items), sum(r[2] for r in items)
        print(f"  {len(items):4d} {cpu:8.1f} {wall:8.1f}  {name}")
    print(f"\nthe {top} most expensive launches (CPU-s, wall-s, test, command)")
    for row in sorted(cpu_known, key=lambda r: -r[3])[:top]:
        print(f"  {row[3]:7.1f} {row[2]:7.1f}  {row[0].split('::')[-1][:50]}  {row[4][:140]}")
    runs: dict[str, list] = defaultdict(list)
    for row in rows:
        runs[row[4]].append(row)
    again = {command: items for command, items in runs.items() if len(items) > 1}
    print(f"\ncommands launched more than once: {len(again)} "
          f"({sum(sum(r[3] or 0 for r in items[1:]) for items in again.values()):.0f} CPU-s in the repeats)")
    for command, items in sorted(again.items(), key=lambda kv: -sum(r[3] or 0 for r in kv[1][1:])):
        tests = sorted({r[0].split("::")[-1][:40] for r in items})
        print(f"  {len(items)}x {sum(r[3] or 0 for r in items):7.1f} CPU-s  {command[:120]}\n      {tests}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("log", help="the file LAUNCH_LOG named")
    parser.add_argument("--top", type=int, default=15, help="how many of the costliest launches to list")
    args = parser.parse_args()
    try:
        main(args.log, args.top)
    except (OSError, ValueError) as error:
        parser.error(f"cannot read {args.log} as a LAUNCH_LOG: {error}")
