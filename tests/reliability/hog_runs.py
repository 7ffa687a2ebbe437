"""The default suite run again and again beside a CPU hog (issue 19, item 2: green 10 times in a row beside a 2-thread
CPU hog), one fixed command:

    python -m tests.reliability.hog_runs --runs 10 --hog-threads 2 --json hog-runs.json

Starts `--hog-threads` processes that spin on the CPU for the whole time, then runs `make test` (or `--command`)
`--runs` times in a row in this checkout, and prints one line per run (exit status, wall time, load average before
and after, pytest's last line) and a summary; the JSON keeps the same and is rewritten after every run. Stops at
the first failing run unless `--keep-going`. Exits 0 only when every run passed. The hog processes are killed on the
way out, whatever happens.

`--resume` continues the count the JSON holds when a session ended under it: only with the same command and hog
threads, if that count had no failing run and nothing outside `docs/` changed between its commit and this checkout
(committed, uncommitted or untracked); the report lists each stretch (`sessions`). A run cut short by a signal
(SIGTERM/SIGHUP/SIGINT to this tool, or the suite killed by one, as at a session's end) is neither green nor red:
it is not recorded, and a resumed count runs it again. A count starts only on a checkout whose code is committed.
Ten runs take 3 h on the slowest VM seen, more than one session.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence


def spin() -> None:
    """Burn one CPU until killed."""
    while True:
        pass


SUMMARY = re.compile(r"\b\d+ (passed|failed|errors?)\b")


def last_line(text: str) -> str:
    """The test runner's summary line ("1 failed, 1706 passed in ..."), else the last non-empty line: under make
    the output ends with make's own "Leaving directory", which says nothing about the run."""
    lines = [line for line in text.splitlines() if line.strip()]
    summaries = [line for line in lines if SUMMARY.search(line)]
    return summaries[-1].strip("= ") if summaries else (lines[-1] if lines else "")


class Interrupted(Exception):
    """This tool was signalled (a session ending): the run in progress counts for nothing."""


def _interrupt(signum: int, frame: Any) -> None:
    raise Interrupted(signal.Signals(signum).name)


def one_run(command: Sequence[str], log: Path) -> dict[str, Any] | None:
    """Run the command once, its output into `log`; what the summary needs, or None when a signal cut it short."""
    load0, t0 = os.getloadavg()[0], time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        child = subprocess.Popen(list(command), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = child.wait()
        except Interrupted:
            os.killpg(child.pid, signal.SIGKILL)  # the suite and everything it started
            child.wait()
            raise
    if rc < 0:  # the suite itself was killed by a signal (OOM killer, a session's end): not a verdict on it
        return None
    wall_s = time.monotonic() - t0
    return {"rc": rc, "wall_s": round(wall_s, 1), "load_before": load0, "load_after": os.getloadavg()[0],
            "last_line": last_line(log.read_text(encoding="utf-8", errors="replace")), "log": str(log)}


def code_changed_since(commit: str, repo: Path, own: Sequence[Path] = ()) -> bool:
    """Whether anything outside docs/ differs between `commit` and the checkout at `repo`: committed, uncommitted or
    untracked (not ignored) files; `own` are this tool's JSON and logs, which may lie untracked in the checkout."""
    diff = subprocess.run(["git", "diff", "--quiet", commit, "--", ".", ":(exclude)docs"], cwd=repo, capture_output=True)
    if diff.returncode != 0:
        return True
    listed = subprocess.run(["git", "ls-files", "--others", "--exclude-standard", "--", ".", ":(exclude)docs"],
                            cwd=repo, capture_output=True, text=True).stdout.splitlines()
    mine = [p.resolve() for p in own]
    return any(not any(m == (repo / f).resolve() or m in (repo / f).resolve().parents for m in mine) for f in listed)


def resumable(report: dict[str, Any], args: argparse.Namespace) -> str | None:
    """Why this earlier report cannot be continued by these arguments, or None when it can."""
    if "commit_full" not in report:
        return "it was written by an older version of this tool (no full commit recorded)"
    if report.get("command") != args.command or report.get("hog_threads") != args.hog_threads:
        return (f"it ran {report.get('command')!r} beside {report.get('hog_threads')} hog threads, not "
                f"{args.command!r} beside {args.hog_threads}")
    if any(r["rc"] != 0 for r in report.get("runs", [])):
        return "it has a failing run"
    if len(report.get("runs", [])) >= args.runs:
        return f"it already holds {len(report['runs'])} runs"
    if code_changed_since(report["commit_full"], args.repo, [args.json, args.logs]):
        return f"code outside docs/ changed since its commit {report['commit']}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.reliability.hog_runs", description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10, help="runs in a row")
    p.add_argument("--hog-threads", type=int, default=2, help="spinning processes beside the suite")
    p.add_argument("--command", default="make test", help="the suite's command (shell words)")
    p.add_argument("--logs", type=Path, default=Path("hog-runs"), help="one log per run goes here")
    p.add_argument("--json", type=Path, default=Path("hog-runs.json"), help="write the summary here")
    p.add_argument("--keep-going", action="store_true", help="do not stop at the first failing run")
    p.add_argument("--repo", type=Path, default=Path("."), help="the checkout whose commit the count is for")
    p.add_argument("--resume", action="store_true",
                   help="continue the count in --json (same code, no failing run) instead of starting a new one")
    args = p.parse_args(argv)
    if args.runs < 1 or args.hog_threads < 0:
        p.error("--runs must be >= 1 and --hog-threads >= 0")
    args.logs.mkdir(parents=True, exist_ok=True)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    git = ["git", "rev-parse", "HEAD"]
    commit_full = subprocess.run(git, cwd=args.repo, capture_output=True, text=True).stdout.strip()
    report: dict[str, Any] | None = None
    if args.resume:
        if not args.json.exists():
            p.error(f"--resume: {args.json} does not exist")
        earlier = json.loads(args.json.read_text(encoding="utf-8"))
        why = resumable(earlier, args)
        if why is not None:
            p.error(f"--resume: cannot continue the count in {args.json}: {why}")
        report = earlier
        stretch = {"started_utc": now, "commit": commit_full[:7], "first_run": len(report["runs"]) + 1}
        report.setdefault("sessions", []).append(stretch)
        print(f"resuming at run {len(report['runs']) + 1} of {args.runs} (count started at {report['commit']})",
              flush=True)
    if report is None:
        if code_changed_since("HEAD", args.repo, [args.json, args.logs]):
            p.error("the checkout has uncommitted or untracked code outside docs/: commit it first (a count is for "
                    "one commit)")
        report = {"command": args.command, "commit": commit_full[:7], "commit_full": commit_full,
                  "hog_threads": args.hog_threads, "cpu_count": os.cpu_count(), "started_utc": now,
                  "sessions": [{"started_utc": now, "commit": commit_full[:7], "first_run": 1}], "runs": []}
    hogs = [mp.Process(target=spin, daemon=True) for _ in range(args.hog_threads)]
    for h in hogs:
        h.start()
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    interrupted = None
    try:
        for i in range(len(report["runs"]) + 1, args.runs + 1):
            run = one_run(shlex.split(args.command), args.logs / f"run{i}.log")
            if run is None:
                interrupted = f"run {i} was killed by a signal"
                break
            run["started_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - run["wall_s"]))
            report["runs"].append(run)
            args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")  # survives a session's end
            print(f"run {i}: exit {run['rc']}, {run['wall_s']:.0f} s, load {run['load_before']:.1f} -> "
                  f"{run['load_after']:.1f}: {run['last_line']}", flush=True)
            if run["rc"] != 0 and not args.keep_going:
                break
    except Interrupted as exc:
        interrupted = f"{exc} during run {len(report['runs']) + 1}"
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for h in hogs:
            h.kill()
            h.join()
    report["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if interrupted is not None:
        report["interrupted"] = interrupted
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
        print(f"interrupted: {interrupted}; {len(report['runs'])} runs recorded; go on with --resume", flush=True)
        return 3
    green = sum(1 for r in report["runs"] if r["rc"] == 0)
    report["green_in_a_row"] = next((i for i, r in enumerate(report["runs"]) if r["rc"] != 0), len(report["runs"]))
    args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    print(f"{green} of {len(report['runs'])} runs green ({report['green_in_a_row']} in a row) at {report['commit']}, "
          f"{args.hog_threads} hog threads; wrote {args.json}")
    return 0 if green == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
