"""A seventh round's misses (for tests/test_check_ddp.py): the port's default in an options
class of the project, set as MASTER_PORT under srun, which sets none (a fixed port); a runner
whose training method is picked by name at run time (getattr), and that accumulates without
no_sync. Written for the tests; never run: it only has to parse."""

from helpers.modes import Runner, Settings, start_under_srun


def main():
    opts = Settings().parse()
    start_under_srun(opts)  # expect: DDP130
    runner = Runner(opts)
    getattr(runner, opts.mode)()  # expect: DDP050


if __name__ == "__main__":
    main()
