"""Command line: `python -m ddp_lab doctor`, `python -m ddp_lab grade [my-work/]`, `python -m ddp_lab plan ...`
and `python -m ddp_lab status`."""

from __future__ import annotations

from ddp_lab.plan.cli import run
from ddp_lab.plan.cli_flags import OneLineErrors, add_arguments


def main(argv: list[str] | None = None) -> int:
    # Errors are one line (no usage block above them): `python -m ddp_lab plan: error: --dp must be ...`.
    parser = OneLineErrors(prog="python -m ddp_lab", description="Helpers of the ddp-lab course.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=OneLineErrors)
    commands.add_parser(
        "doctor", help="show what this machine can run",
        description="Show what this machine can run: Python and torch versions (and whether the course "
                    "was proven on that torch), CPU cores, GPUs, the backends built into torch, and how "
                    "many ranks to launch.")
    grade = commands.add_parser(
        "grade", help="run exercise notebooks and show each exercise's state",
        description="Run each exercise notebook top to bottom in a fresh kernel (past failing cells; "
                    "the notebooks are never modified) and print one table: notebook, exercise, and "
                    "✓, ✗ with the check's first line of feedback, or 'not attempted'. A notebook that "
                    "cannot be graded (not a readable notebook, a cell past --timeout, a kernel that died) "
                    "gets one 'could not run' row saying why, and the others are still graded. Exit status: "
                    "0 every attempted exercise passes; 1 an answer is wrong; 2 bad usage (no notebooks "
                    "there, --timeout below 1); 3 a notebook could not be graded (wins over 1).")
    grade.add_argument("paths", nargs="*",
                       help="exercise notebooks or folders of them (default: the course's my-work/, your copies "
                            "from `make lab`, from any directory; without it, the course's exercises/)")
    grade.add_argument("--json", action="store_true", help="print the rows as JSON, for an instructor to collect")
    grade.add_argument("--timeout", type=int, default=600, help="seconds one cell may run, at least 1 (default 600)")
    grade.add_argument("--jobs", type=int, default=None,
                       help="notebooks graded at once (default: one per 4 usable cores, at least 1)")
    plan = commands.add_parser(
        "plan", help="plan a training run: per-GPU memory, step time, tokens/s and MFU of dp x tp x pp x ZeRO plans",
        description="Plan a training run (lesson 13). With --model and --cluster: search every valid plan, keep "
                    "those that fit GPU memory and print the fastest; add a strategy (--dp/--tp/--pp/--zero/"
                    "--recompute ...) to print that plan's memory and time breakdown. Short form: --params 7.5B "
                    "--dp 64 --zero 3 prints per-GPU parameters, gradients and optimizer state in GB (10^9 bytes).")
    add_arguments(plan)
    commands.add_parser(
        "status", help="show what each rank of your live clusters is doing, from a terminal while a cell runs",
        description="For every live cluster (%%ddp, ddp_lab.Cluster) of your kernels: one line per rank, as "
                    "%ddp_status prints it (alive or not, pid, idle or running which cell for how long, the "
                    "collective it waits in, its memory). Run it in a terminal (JupyterLab: File > New > "
                    "Terminal) while a cell seems stuck: the kernel itself cannot run %ddp_status until the "
                    "cell ends. It sends the ranks no command; a busy rank is asked for its stack by a signal "
                    "and waited for at most about half a second. Says 'no live cluster' when there is none.")
    args, unknown = parser.parse_known_args(argv)
    if unknown:   # said by the command's own parser, which knows its flags (the top one would name no command)
        commands.choices[args.command].refuse_unknown(unknown)
    if args.command == "plan":
        return run(args, plan)
    if args.command == "status":
        from ddp_lab.cluster.status import show_live_clusters  # lazy: each command imports only what it runs

        show_live_clusters()
        return 0
    if args.command == "doctor":
        from ddp_lab.hardware.machine import doctor  # lazy: each command imports only what it runs

        doctor()
        return 0
    from ddp_lab.checks.grade import main as grade_main  # lazy: each command imports only what it runs (grade: nbclient)

    return grade_main(args.paths, as_json=args.json, timeout=args.timeout, jobs=args.jobs)


if __name__ == "__main__":
    raise SystemExit(main())
