"""tpuq benchmark: every figure beside a baseline measured in the same run, and its target.

    .venv/bin/python bench/run.py            # stable numbers, < 4 min
    .venv/bin/python bench/run.py --quick    # CI smoke, < 90 s
    .venv/bin/python bench/run.py --json     # the figures as JSON

Speed is reported, never asserted: the exit status is non-zero only when the benchmark
itself broke (the agent would not start, a job failed, a module raised). See
bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# run as a script: import `bench.*` from the repository root, not bench/ itself (or, as a
# child of `--against`, from links to bench/ and tests/ alone: bench/against.py)
sys.path[0] = os.environ.get("BENCH_IMPORT_ROOT") or str(Path(__file__).resolve().parent.parent)

from bench import against, arrays, baselines, policy, preempt, status, submit, team, turnover
from bench.embedded import BenchError, EmbeddedStack


@dataclass(frozen=True)
class Sizes:
    fork_exec_runs: int
    python_runs: int
    submit_runs: int
    latency_runs: int
    turnover_jobs: int
    turnover_rounds: int
    celery_runs: int
    team_latency_runs: int
    team_turnover_jobs: int
    team_turnover_rounds: int
    preempt_rounds: int
    status_runs: int
    array_tasks: int
    deep_jobs: int  # the deep-queue turnover: this many queued behind the blocker


FULL = Sizes(fork_exec_runs=200, python_runs=100, submit_runs=200, latency_runs=200,
             turnover_jobs=200, turnover_rounds=3, celery_runs=200, team_latency_runs=30,
             team_turnover_jobs=200, team_turnover_rounds=3, preempt_rounds=3, status_runs=30,
             array_tasks=10_000, deep_jobs=2_000)
QUICK = Sizes(fork_exec_runs=30, python_runs=10, submit_runs=10, latency_runs=10,
              turnover_jobs=50, turnover_rounds=1, celery_runs=50, team_latency_runs=10,
              team_turnover_jobs=50, team_turnover_rounds=1, preempt_rounds=1, status_runs=5,
              array_tasks=2_000, deep_jobs=400)


@dataclass(frozen=True)
class Row:
    label: str
    key: str
    baseline_key: str
    baseline_label: str
    target_ms: float | None  # in the row's unit
    unit: str = "ms"
    more_is_better: bool = False  # a rate: the target is a floor
    max_ratio: float | None = None  # a target as a multiple of the baseline


ROWS = (
    Row("submit wall p50", "submit_wall_p50_ms", "python_pass_paired_p50_ms",
        "python -c pass, p50 (paired)", None, max_ratio=2.0),
    Row("submit wall p95", "submit_wall_p95_ms", "python_pass_paired_p95_ms",
        "python -c pass, p95 (paired)", None),
    Row("submit->start p50", "submit_to_start_p50_ms", "python_pass_paired_p50_ms",
        "python -c pass, p50 (paired)", None, max_ratio=2.0),
    Row("submit->start p95", "submit_to_start_p95_ms", "start_floor_p95_ms",
        "python -c pass + fork/exec, p95", None),
    Row("bare client p50", "client_floor_p50_ms", "client_floor_python_pass_paired_p50_ms",
        "python -c pass, p50 (paired); the floor: bench/submit.py BARE_CLIENT", None),
    Row("turnover per job", "turnover_ms_per_job", "bare_turnover_ms_per_job",
        "sequential subprocess.run(/bin/true)", 8.0),
    Row("turnover gap p95", "turnover_gap_p95_ms", "turnover_gap_p50_ms",
        "turnover gap p50", None, max_ratio=1.5),
    Row("turnover, deep queue", "deep_turnover_ms_per_job", "turnover_ms_per_job",
        "turnover per job, the row above", None),
    Row("scheduling pass", "policy_plan_median_ms", "policy_sorted_baseline_median_ms",
        "sorted() of the same 100k keys", 100.0),
    Row("status, 10k jobs, p50", "status_agent_p50_ms", "status_agent_python_pass_paired_p50_ms",
        "python -c pass, p50 (paired)", 100.0),
    Row("status, 10k jobs, no agent", "status_direct_p50_ms", "status_agent_p50_ms",
        "the same listing through the agent, p50", None),
    # team deployment (PostgreSQL + Celery on Redis); the embedded rows above, same run
    Row("team submit wall p50", "team_submit_wall_p50_ms", "team_python_pass_paired_p50_ms",
        "python -c pass, p50 (paired)", None, max_ratio=2.0),
    Row("team submit->start p50", "team_submit_to_start_p50_ms",
        "team_python_pass_paired_p50_ms", "python -c pass, p50 (paired)", None,
        max_ratio=2.0),
    Row("team submit->start p95", "team_submit_to_start_p95_ms", "team_start_floor_p95_ms",
        "python -c pass + raw Celery send->start, p95", None),
    Row("team no-agent wall p50", "team_direct_submit_wall_p50_ms",
        "team_direct_python_pass_paired_p50_ms", "python -c pass, p50 (paired)", 150.0),
    Row("team bare client p50", "team_client_floor_p50_ms",
        "team_client_floor_python_pass_paired_p50_ms",
        "python -c pass, p50 (paired); the floor: BARE_CLIENT", None),
    Row("team bare psycopg p50", "team_direct_psycopg_floor_p50_ms",
        "team_direct_psycopg_floor_python_pass_paired_p50_ms",
        "python -c pass, p50 (paired); the floor: BARE_PSYCOPG", None),
    Row("team no-agent ->start", "team_direct_submit_to_start_p50_ms",
        "team_start_floor_p50_ms", "python -c pass + raw Celery send->start, p50", None),
    Row("team turnover per job", "team_turnover_ms_per_job", "celery_turnover_ms_per_job",
        "raw Celery: tasks running /bin/true", 12.0),
    Row("team turnover gap p95", "team_turnover_gap_p95_ms", "team_turnover_gap_p50_ms",
        "team turnover gap p50", None, max_ratio=1.5),
    # one `tpuq submit --array` of array_tasks tasks, no agent (the CLI writes itself)
    Row("array submit", "array_embedded_tasks_per_s", "array_celery_tasks_per_s",
        "raw Celery apply_async", 10_000.0, unit="tasks/s", more_is_better=True),
    Row("team array submit", "array_team_tasks_per_s", "array_celery_tasks_per_s",
        "raw Celery apply_async", 10_000.0, unit="tasks/s", more_is_better=True),
    # preemption (embedded, fake metadata server, bench/coop_job.py)
    Row("notice->signalled", "preempt_notice_to_signal_ms", "", "", None),
    Row("notice->requeued", "preempt_notice_to_requeued_ms", "preempt_notice_to_signal_ms",
        "notice->signalled", (preempt.GRACE_S + 1.0) * 1000.0),
    Row("restart->running", "preempt_restart_to_running_ms", "preempt_agent_start_ms",
        "agent launch->answers on its socket", 2000.0),
    Row("lost steps", "preempt_lost_steps_max", "", "", 0.0, unit="steps"),
)


# ---- measuring ---------------------------------------------------------------------------
def sections(sizes: Sizes, keep: bool) -> dict[str, Callable[[], dict[str, float]]]:
    """Each part of the run by its name (`--only`), in the order they run."""

    def base() -> dict[str, float]:
        return {**baselines.fork_exec(sizes.fork_exec_runs),
                **baselines.python_start(sizes.python_runs),
                **baselines.sequential_true(sizes.turnover_jobs)}

    def cli() -> dict[str, float]:
        with EmbeddedStack(keep=keep) as stack:
            out = submit.wall_time(stack, sizes.submit_runs)
            out.update(submit.submit_to_start(stack, sizes.latency_runs))
            out.update(submit.client_floor(stack, sizes.submit_runs))
            return out

    def queue() -> dict[str, float]:
        rounds = []
        for _ in range(sizes.turnover_rounds):  # a fresh agent and database each round
            with EmbeddedStack(keep=keep) as stack:
                rounds.append(turnover.turnover(stack, sizes.turnover_jobs))
        return turnover.median_of(rounds)

    def deep_queue() -> dict[str, float]:
        """Turnover with deep_jobs queued (one round): every pass reads every queued
        job, so what each costs shows here first."""
        with EmbeddedStack(keep=keep) as stack:
            got = turnover.turnover(stack, sizes.deep_jobs)
        return {f"deep_{k}": v for k, v in got.items()}

    def team_latency() -> dict[str, float]:
        with team.TeamStack(keep=keep) as stack:
            with team.CeleryWorker(stack) as worker:
                out = team.celery_round_trip(worker, sizes.celery_runs)
                out.update(team.celery_turnover(worker, sizes.team_turnover_jobs))
            runs = sizes.team_latency_runs
            for prefix, env in (("team_", None), ("team_direct_", submit.NO_AGENT)):
                got = {**submit.submit_to_start(stack, runs, env),
                       **submit.wall_time(stack, runs, env)}
                out.update({f"{prefix}{k}": v for k, v in got.items()})
            out.update({f"team_{k}": v for k, v in submit.client_floor(stack, runs).items()})
            out.update({f"team_direct_{k}": v
                        for k, v in submit.psycopg_floor(stack, runs).items()})
        return out

    def team_queue() -> dict[str, float]:
        rounds = []
        for _ in range(sizes.team_turnover_rounds):
            with team.TeamStack(keep=keep) as stack:
                rounds.append(turnover.turnover(stack, sizes.team_turnover_jobs))
        out = turnover.median_of(rounds)
        out["state_api_submit_ms_per_job"] = out.pop("socket_submit_ms_per_job")
        return {f"team_{k}": v for k, v in out.items()}

    def preemption() -> dict[str, float]:
        return preempt.median_of([preempt.one_round(keep)
                                  for _ in range(sizes.preempt_rounds)])

    return {"baselines": base, "submit": cli,
            "status": lambda: status.run(sizes.status_runs, keep),
            "turnover": queue, "deep-queue": deep_queue, "team": team_latency, "team-turnover": team_queue,
            "arrays": lambda: arrays.figures(sizes.array_tasks),
            "preemption": preemption, "policy": policy.run}


def measure(sizes: Sizes, keep: bool, log: Callable[[str], None],
            only: list[str] | None = None) -> tuple[dict[str, float], list[str]]:
    """All figures (ms unless named otherwise) and the errors of sections that broke."""
    figures: dict[str, float] = {}
    errors: list[str] = []
    for name, fn in sections(sizes, keep).items():
        if only is not None and name not in only:
            continue
        if name == "policy" and not policy.available():
            log("scheduling pass: skipped (bench/bench_policy.py not found)")
            continue
        log(f"measuring {name} ...")
        try:
            figures.update(fn())
        except Exception as e:  # noqa: BLE001 - report it, go on, exit non-zero at the end
            if not isinstance(e, BenchError):
                traceback.print_exc(file=sys.stderr)
            errors.append(f"{name}: {e}")
            log(f"  FAILED: {e}")
    floors(figures)
    return figures, errors


def floors(figures: dict[str, float]) -> None:
    """The sums a row compares with: what any CLI-then-spawn path costs at the least."""
    for q in ("p50", "p95"):
        py, fork = f"python_pass_paired_{q}_ms", f"fork_exec_true_{q}_ms"
        if py in figures and fork in figures:
            figures[f"start_floor_{q}_ms"] = figures[py] + figures[fork]
        celery = f"celery_send_to_start_{q}_ms"
        if py in figures and celery in figures:
            figures[f"team_start_floor_{q}_ms"] = figures[py] + figures[celery]


# ---- reporting ---------------------------------------------------------------------------
def rows(figures: dict[str, float]) -> list[dict[str, object]]:
    out = []
    for r in ROWS:
        if r.key not in figures:
            continue
        value = figures[r.key]
        base = figures.get(r.baseline_key) if r.baseline_key else None
        ms = r.unit == "ms"
        ratio = value / base if base else None
        met = []
        if r.target_ms is not None:
            met.append(value >= r.target_ms if r.more_is_better else value <= r.target_ms)
        if r.max_ratio is not None and ratio is not None:
            met.append(ratio <= r.max_ratio)
        out.append({
            "figure": r.label, "key": r.key, "unit": r.unit, "value": value,
            "tpuq_ms": value if ms else None,
            "baseline": r.baseline_label or None, "baseline_ms": base,
            "ratio": ratio, "target": r.target_ms, "target_ms": r.target_ms if ms else None,
            "max_ratio": r.max_ratio, "more_is_better": r.more_is_better,
            "met": all(met) if met else None,
        })
    return out


def machine() -> dict[str, object]:
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
    }


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    if v < 1:
        return f"{v:.2f} ms"
    return f"{v:.1f} ms" if v < 1000 else f"{v / 1000:.2f} s"


def _value(v: float | None, unit: str) -> str:
    if unit == "ms" or v is None:
        return _ms(v)
    if unit == "tasks/s":
        return f"{v:,.0f}/s"
    return f"{v:g} {unit}"


def _target(row: dict[str, Any]) -> str:
    parts = []
    if row["target"] is not None:
        sign = ">=" if row["more_is_better"] else "<="
        parts.append(f"{sign} {_value(row['target'], str(row['unit']))}")
    if row["max_ratio"] is not None:
        parts.append(f"<= {row['max_ratio']:g}x")
    return ", ".join(parts) or "-"


def print_table(figures: dict[str, float], table: list[dict[str, object]], sizes: Sizes,
                meta: dict[str, object], errors: list[str]) -> None:
    print(f"tpuq benchmark, {meta['date']}, {meta['cores']} cores, Python {meta['python']}, "
          f"{meta['platform']}")
    print(f"N: fork/exec {sizes.fork_exec_runs}, python {sizes.python_runs}, "
          f"submit {sizes.submit_runs}, submit->start {sizes.latency_runs}, "
          f"turnover {sizes.turnover_jobs} jobs x {sizes.turnover_rounds} rounds (median); "
          f"team: raw Celery {sizes.celery_runs}, submit->start {sizes.team_latency_runs}, "
          f"turnover {sizes.team_turnover_jobs} jobs x {sizes.team_turnover_rounds} rounds; "
          f"preemption {sizes.preempt_rounds} round(s) (median; lost steps: worst)")
    print()
    print("baselines (this run)                      p50        p95")
    for label, key in (("fork/exec /bin/true", "fork_exec_true"),
                       ("python -c pass (venv)", "python_pass"),
                       ("python -c pass, paired with submits", "python_pass_paired"),
                       ("raw Celery send->task start (Redis)", "celery_send_to_start")):
        if f"{key}_p50_ms" in figures:
            print(f"  {label:38s}{_ms(figures[f'{key}_p50_ms']):>10s} "
                  f"{_ms(figures[f'{key}_p95_ms']):>10s}")
    if "bare_turnover_ms_per_job" in figures:
        print(f"  {'sequential subprocess.run(/bin/true)':38s}"
              f"{_ms(figures['bare_turnover_ms_per_job']):>10s} per job")
    if "celery_turnover_ms_per_job" in figures:
        print(f"  {'raw Celery tasks running /bin/true':38s}"
              f"{_ms(figures['celery_turnover_ms_per_job']):>10s} per job")
    print()
    head = f"{'figure':22s}{'tpuq':>9s}{'baseline':>11s}{'ratio':>8s}  {'target':>11s}  " \
           f"{'':6s}baseline is"
    print(head)
    print("-" * (len(head) + 30))
    for row in table:
        ratio = row["ratio"]
        verdict = {True: "ok", False: "MISSED", None: ""}[row["met"]]  # type: ignore[index]
        unit = str(row["unit"])
        print(f"{row['figure']:22s}{_value(row['value'], unit):>9s}"  # type: ignore[arg-type]
              f"{_value(row['baseline_ms'], unit):>11s}"  # type: ignore[arg-type]
              f"{(f'{ratio:.1f}x' if ratio else '-'):>8s}  "
              f"{_target(row):>11s}  {verdict:7s}{row['baseline'] or ''}")
    extra = [("tpuq submit through the socket (no CLI)", "socket_submit_ms_per_job"),
             ("turnover: median gap between job ends", "turnover_gap_p50_ms"),
             ("turnover: longest gap", "turnover_gap_max_ms"),
             ("turnover: agent CPU per job", "turnover_agent_cpu_ms_per_job"),
             ("deep queue: agent CPU per job", "deep_turnover_agent_cpu_ms_per_job"),
             ("turnover: a file created in TPUQ_HOME", "turnover_file_create_ms"),
             ("scheduling pass, best of 5", "policy_plan_best_ms"),
             ("team: submit via the state API, per job",
              "team_state_api_submit_ms_per_job"),
             ("team turnover: median gap between job ends", "team_turnover_gap_p50_ms"),
             ("team turnover: longest gap", "team_turnover_gap_max_ms"),
             ("team turnover: agent CPU per job", "team_turnover_agent_cpu_ms_per_job"),
             ("team turnover: worst round", "team_turnover_ms_per_job_max"),
             ("team turnover: a file created in TPUQ_HOME", "team_turnover_file_create_ms"),
             ("preemption: grace period of the job", "preempt_grace_ms")]
    shown = [(label, figures[key]) for label, key in extra if key in figures]
    if shown:
        print()
        for label, value in shown:
            print(f"  {label:44s}{_ms(value):>10s}")
    if not policy.available():
        print("\nscheduling pass: skipped (bench/bench_policy.py not found)")
    met = [r["met"] for r in table if r["met"] is not None]
    print(f"\ntargets met: {sum(bool(m) for m in met)}/{len(met)}")
    for e in errors:
        print(f"ERROR {e}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--quick", action="store_true", help="small N for a CI smoke run (< 90 s)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.add_argument("--keep", action="store_true",
                   help="keep the temporary TPUQ_HOME directories (agent logs, database)")
    p.add_argument("--only", metavar="SECTION,...",
                   help=f"only these sections: {', '.join(sections(FULL, False))}")
    p.add_argument("--against", metavar="REV",
                   help="also measure commit REV (its own cached worktree and venv), "
                        "section by section interleaved, and print the ratios")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="with --against: run each section N times per side, alternated "
                        "(figures: the median)")
    args = p.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    names = list(sections(sizes, False))
    only = args.only.split(",") if args.only else None
    unknown = set(only or ()) - set(names)
    if unknown:
        p.error(f"no section {', '.join(sorted(unknown))} (sections: {', '.join(names)})")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    hook = start_up_hook()
    if hook:
        log(f"warning: every Python process of this venv imports {hook} at start-up (an "
            f"editable install's import finder): `python -c pass`, the baseline, then pays "
            f"for it and the ratios look better than a user's `pip install .` makes them; "
            f"`make install` installs without it")
    if args.against:
        return _against(args.against, only or names, args.quick, args.json, log, args.repeat)
    figures, errors = measure(sizes, args.keep, log, only)
    table = rows(figures)
    meta = machine()
    if args.json:
        json.dump({**meta, "quick": args.quick, "sizes": asdict(sizes), "figures": figures,
                   "rows": table, "errors": errors}, sys.stdout, indent=2)
        print()
    else:
        print_table(figures, table, sizes, meta, errors)
    return 1 if errors else 0


def start_up_hook() -> str | None:
    """The name of a module that a .pth file of this venv imports at every interpreter
    start (setuptools' default editable finder, `__editable___<name>_finder`), or None."""
    return next((m for m in sys.modules
                 if m.startswith("__editable__") and m.endswith("_finder")), None)


def _against(rev: str, names: list[str], quick: bool, as_json: bool,
             log: Callable[[str], None], repeat: int) -> int:
    sides = against.compare(rev, names, quick, log, repeat)
    for side in sides.values():
        floors(side["figures"])
    table: dict[str, Any] = {k: rows(v["figures"]) for k, v in sides.items()}
    errors = [e for v in sides.values() for e in v["errors"]]
    if as_json:
        json.dump({**machine(), "quick": quick, "against": rev, "sides": sides,
                   "rows": table}, sys.stdout, indent=2)
        print()
    else:
        print(f"tpuq benchmark, this tree against {rev}, {machine()['date']}, "
              f"{'quick' if quick else 'full'} sizes, sections interleaved")
        table.update({f"{k} figures": v["figures"] for k, v in sides.items()})
        against.print_comparison(rev, table, errors)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
