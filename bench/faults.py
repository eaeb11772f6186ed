"""The long fault batch: hundreds of randomized fault runs per deployment, outside CI.

    .venv/bin/python bench/faults.py                 # 200 runs per deployment, ~40 min
    .venv/bin/python bench/faults.py --runs 20       # a quick look
    .venv/bin/python bench/faults.py --seed 12345    # a batch again
    .venv/bin/python bench/faults.py --only team     # one deployment

Runs tests/e2e/test_faults.py (what CI runs as a short seeded batch) with
TPUQ_FAULT_RUNS and a random base seed, and prints, per deployment, the runs, the jobs,
the faults injected by kind and the promises broken (0, or the batch fails and pytest's
report says which run, with its seed). The figures go in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200, help="runs per deployment")
    ap.add_argument("--seed", type=int, default=None, help="base seed (default random)")
    ap.add_argument("--only", choices=("embedded", "team"), help="one deployment")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    with tempfile.TemporaryDirectory(prefix="tpuq-faults-") as d:
        report = Path(d) / "report.jsonl"
        env = {**os.environ, "TPUQ_FAULT_RUNS": str(args.runs), "TPUQ_FAULT_SEED": str(seed),
               "TPUQ_FAULT_REPORT": str(report)}
        began = time.monotonic()
        rc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                             "--timeout=0",  # a batch runs for many minutes: pytest-timeout's 300 s is for CI
                             *(["-k", args.only] if args.only else []),
                             "tests/e2e/test_faults.py"], cwd=ROOT, env=env).returncode
        wall = time.monotonic() - began
        rows = [json.loads(line) for line in report.read_text().splitlines()] \
            if report.exists() else []
    print(f"\nfault batch {time.strftime('%Y-%m-%d')}, base seed {seed}, {wall / 60:.0f} min")
    for r in rows:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(r["faults"].items()))
        print(f"  {r['deployment']:<8} runs {r['runs']}  jobs {r['jobs']}  "
              f"promises broken 0  ({r['seconds'] / 60:.0f} min)\n    faults: {faults}")
    if rc != 0:
        print("  the batch failed: pytest's report above names the run, its seed and what broke")
    return rc


if __name__ == "__main__":
    sys.exit(main())
