"""`python -m ddp_lab.plan ...`: the planner's command line, the same as `python -m ddp_lab plan ...`.

Introduced in notebooks/13-plan-your-training-run.ipynb.
"""

from __future__ import annotations

import sys

from ddp_lab.__main__ import main

if __name__ == "__main__":
    sys.exit(main(["plan", *sys.argv[1:]]))
