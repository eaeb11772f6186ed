"""The long variant of tests/e2e/test_upgrade.py: rolling upgrades from the previous
release, repeated, with a job stepping every 0.05 s through each of them.

    .venv/bin/python bench/upgrade.py                  # embedded and team, 3 rounds each
    .venv/bin/python bench/upgrade.py --team --rounds 5 --json

Each round is a fresh deployment run by the previous release (tests/releases.py): a
stepping job (tests/fixtures/steps.py), an array of 8 short tasks limited to 2 at once and
a chain of 4 jobs, then the upgrade as docs/upgrading.md says (embedded: SIGUSR2 to
today's agent; team: `tpuq db upgrade` under the old agents, then a hand-over per host).
Figures, over all rounds: jobs lost, jobs run more than once, jobs assigned again (an
attempt assigned but not started at the hand-over), the most array tasks at
once, chain order broken, and the stepping job's longest gap between steps during the
upgrade beside its longest gap in the same run before it (the baseline).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent)

from tests import releases  # noqa: E402
from tests.harness import FakeHost, Stack, fixture_cmd, wait_for  # noqa: E402
from tests.services import RedisServer, create_pg_database, drop_pg_database  # noqa: E402

LEASE = {"TPUQ_LEASE_S": "15"}


def one_round(root: Path, team: bool, old: list[str]) -> dict[str, float]:
    s = Stack(home=root / "home")
    redis = pg = None
    if team:
        redis, pg = RedisServer(root / "redis").start(), create_pg_database()
        s.extra.update(TPUQ_DATABASE_URL=pg, TPUQ_BROKER_URL=redis.url)
        s.tpuq("db", "upgrade", command=old)
    try:
        return _run(s, root, team, old)
    finally:
        s.cleanup()
        if redis is not None:
            redis.stop()
        if pg is not None:
            drop_pg_database(pg)


def _run(s: Stack, root: Path, team: bool, old: list[str]) -> dict[str, float]:
    hosts = [FakeHost(root / n, name=n, chips=4) for n in (["a", "b"] if team else ["a"])]
    agents = [s.start_agent(h, command=old, **LEASE) for h in hosts]
    steps, gate = root / "steps.txt", root / "gate"

    def submit(*args: object) -> int:
        return int(s.tpuq("submit", "-q", "--chips", "1", *map(str, args), command=old).stdout)

    stepper = submit(*fixture_cmd("steps.py", steps, gate))
    array = submit("--array", "0-7%2", *fixture_cmd("array_task.py", root / "array.txt", "-", 0.5))
    chain = [submit(*fixture_cmd("record.py", root / "chain.txt", 0.3))]
    for _ in range(3):
        chain.append(submit("--after", chain[-1], *fixture_cmd("record.py", root / "chain.txt", 0.3)))
    wait_for(lambda: steps.exists() and len(steps.read_text().splitlines()) > 20, 30, "steps")
    upgrade_from = time.time()
    if team:
        s.tpuq("db", "upgrade")
    for a in agents:
        assert a.proc is not None
        a.proc.send_signal(signal.SIGUSR2)
        a.proc.wait(30)
        s.start_agent(a.host, **LEASE)
    upgraded_at = time.time()
    ids = [*range(array, array + 8), *chain]
    s.wait_all(ids, "succeeded", timeout=120)
    gate.touch()
    s.wait_state(stepper, "succeeded", timeout=60)
    jobs = [s.job(i) for i in [stepper, *ids]]
    times = [(ln.split()[0], float(ln.split()[1])) for ln in steps.read_text().splitlines()]
    before = [t for _, t in times if t < upgrade_from]
    during = [t for _, t in times if upgrade_from <= t <= upgraded_at + 5]
    order = [int(ln.split()[1]) for ln in (root / "chain.txt").read_text().splitlines()
             if ln.startswith("start")]
    for j in jobs:  # say what happened to any job that did not run once, start to end
        if j.state != "succeeded" or j.attempt > 1:
            print(f"  job {j.id} {j.state}, attempts: " + "; ".join(
                f"{a.number} started={a.started_at is not None} {a.outcome}: {a.reason}"
                for a in s.attempts(j.id)), file=sys.stderr)
    return {"lost": sum(j.state != "succeeded" for j in jobs),
            # an attempt assigned but not started when its agent handed over is given up
            # by the next agent (agent/recovery.py) and assigned again: not a rerun
            "rerun": sum(len([a for a in s.attempts(j.id) if a.started_at is not None]) > 1
                         for j in jobs) + len({a for a, _ in times} - {"1"}),
            "reassigned": sum(j.attempt > 1 for j in jobs),
            "array_at_once": most_at_once(root / "array.txt"),
            "chain_broken": int(order != chain),
            "gap_before_s": max(b - a for a, b in zip(before, before[1:])),
            "gap_during_s": max(b - a for a, b in zip([before[-1], *during], during))}


def most_at_once(path: Path) -> float:
    moves = sorted((float(w[-1]), 1 if w[0] == "start" else -1)
                   for w in (ln.split() for ln in path.read_text().splitlines()))
    now = most = 0
    for _, d in moves:
        now += d
        most = max(most, now)
    return most


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--team", action="store_true", help="the team deployment only")
    p.add_argument("--embedded", action="store_true", help="the embedded deployment only")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    old = releases.install()
    kinds = ["team"] if args.team else ["embedded"] if args.embedded else ["embedded", "team"]
    figures: dict[str, dict[str, float]] = {}
    for kind in kinds:
        rounds = []
        for n in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix=f"tpuq-upgrade-{kind}-") as d:
                rounds.append(one_round(Path(d), kind == "team", old))
            print(f"{kind} round {n + 1}: {rounds[-1]}", file=sys.stderr)
        figures[kind] = {k: (max if k.startswith(("gap", "array")) else sum)(r[k] for r in rounds)
                         for k in rounds[0]}
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    for kind, f in figures.items():
        print(f"{kind:9} rounds {args.rounds}  jobs lost {f['lost']:g}  rerun {f['rerun']:g}  "
              f"assigned again before starting {f['reassigned']:g}  "
              f"array tasks at once {f['array_at_once']:g} (limit 2)  chain broken "
              f"{f['chain_broken']:g}  longest step gap {f['gap_during_s']:.2f} s during the "
              f"upgrade, {f['gap_before_s']:.2f} s before it (baseline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
