"""A thin script over the project's library (a sixth round, the `# expect:` comments): run()
spawns the workers, each makes a Config that starts the group from a URL of its settings and a
Trainer that wraps DDP (deeplib/, three and four modules down). Written for the tests; never
run: it only has to parse."""

import argparse

from deeplib.launch import run

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--port", type=str, default="5679")  # expect: DDP130
    args = parser.parse_args()
    run(args.nproc, port=args.port)  # expect: DDP040  # expect: DDP042  # expect: DDP060
