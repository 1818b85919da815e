"""Command line: `python -m ddp_lab doctor`."""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ddp_lab", description="ddp-lab course helpers")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("doctor", help="show what this machine can run (torch, cores, GPUs, backends)")
    args = parser.parse_args(argv)
    if args.command == "doctor":
        from ddp_lab.machine import doctor

        doctor()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
