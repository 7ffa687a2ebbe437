"""The hog-runs tool (tests/reliability/hog_runs.py): runs in a row, stops at the first failure, kills its hogs."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys

import pytest

from tests.reliability.hog_runs import main


def _repo(path) -> None:
    """A git checkout with one code file and one doc, committed."""
    path.mkdir()
    (path / "docs").mkdir()
    (path / "code.py").write_text("x = 1\n")
    (path / "docs" / "notes.md").write_text("notes\n")
    git = ["git", "-C", str(path), "-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "start"], check=True)


@pytest.fixture
def repo(tmp_path):
    """A clean checkout to count for (the tool refuses a count on uncommitted code)."""
    _repo(tmp_path / "repo")
    return tmp_path / "repo"


def test_counts_green_runs_and_kills_the_hog(tmp_path, repo) -> None:
    out = tmp_path / "r.json"
    rc = main(["--runs", "2", "--hog-threads", "1", "--command", f"{sys.executable} -c \"print('1 passed')\"",
               "--logs", str(tmp_path / "logs"), "--json", str(out), "--repo", str(repo)])
    report = json.loads(out.read_text())
    assert rc == 0 and report["green_in_a_row"] == 2 and [r["rc"] for r in report["runs"]] == [0, 0]
    assert report["runs"][0]["last_line"] == "1 passed" and (tmp_path / "logs" / "run2.log").exists()
    assert not mp.active_children()  # the hog process was killed and joined


def test_stops_at_the_first_failing_run(tmp_path, repo) -> None:
    out = tmp_path / "r.json"
    rc = main(["--runs", "5", "--hog-threads", "0", "--command", f"{sys.executable} -c 'raise SystemExit(3)'",
               "--logs", str(tmp_path / "logs"), "--json", str(out), "--repo", str(repo)])
    report = json.loads(out.read_text())
    assert rc == 1 and len(report["runs"]) == 1 and report["runs"][0]["rc"] == 3 and report["green_in_a_row"] == 0


def test_reports_the_summary_line_not_makes_last_words(tmp_path, repo) -> None:
    out, script = tmp_path / "r.json", tmp_path / "suite.py"
    script.write_text("print('=== 1 failed, 1706 passed in 557.84s ===')\nprint(\"make[1]: Leaving directory '/x'\")\n")
    main(["--runs", "1", "--hog-threads", "0", "--command", f"{sys.executable} {script}",
          "--logs", str(tmp_path / "logs"), "--json", str(out), "--repo", str(repo)])
    assert json.loads(out.read_text())["runs"][0]["last_line"] == "1 failed, 1706 passed in 557.84s"


def test_resume_continues_a_count_a_session_end_cut_short(tmp_path, repo) -> None:
    """The count survives the session: the JSON is rewritten after every run, and --resume goes on at the next run
    when only docs changed since; the report lists both stretches."""
    out, logs = tmp_path / "r.json", tmp_path / "logs"
    ok = ["--hog-threads", "0", "--command", f"{sys.executable} -c \"print('1 passed')\"", "--logs", str(logs),
          "--json", str(out), "--repo", str(repo)]
    assert main(["--runs", "2", *ok]) == 0
    (repo / "docs" / "notes.md").write_text("the first two runs recorded\n")  # a doc change keeps the count
    assert main(["--runs", "4", "--resume", *ok]) == 0
    report = json.loads(out.read_text())
    assert [r["rc"] for r in report["runs"]] == [0, 0, 0, 0] and report["green_in_a_row"] == 4
    assert [s["first_run"] for s in report["sessions"]] == [1, 3] and (logs / "run4.log").exists()
    assert not (logs / "run5.log").exists()


def test_resume_refuses_changed_code_a_red_count_or_a_missing_report(tmp_path, repo) -> None:
    out, logs = tmp_path / "r.json", tmp_path / "logs"
    common = ["--hog-threads", "0", "--logs", str(logs), "--json", str(out), "--repo", str(repo)]
    green = ["--command", f"{sys.executable} -c \"print('1 passed')\""]
    with pytest.raises(SystemExit):  # nothing to resume
        main(["--runs", "3", "--resume", *green, *common])
    assert main(["--runs", "1", *green, *common]) == 0
    (repo / "code.py").write_text("x = 2\n")  # the code under test changed: the count is for another program
    with pytest.raises(SystemExit):
        main(["--runs", "3", "--resume", *green, *common])
    (repo / "code.py").write_text("x = 1\n")
    (repo / "new_module.py").write_text("y = 1\n")  # untracked code is code too
    with pytest.raises(SystemExit):
        main(["--runs", "3", "--resume", *green, *common])
    with pytest.raises(SystemExit):  # and no new count starts on it either
        main(["--runs", "3", *green, *common])
    (repo / "new_module.py").unlink()
    with pytest.raises(SystemExit):  # another command or hog count is another experiment
        main(["--runs", "3", "--resume", "--command", f"{sys.executable} -c \"print('2 passed')\"", *common])
    assert main(["--runs", "3", "--command", f"{sys.executable} -c 'raise SystemExit(1)'", *common]) == 1
    with pytest.raises(SystemExit):  # a red run ends a count: start a new one
        main(["--runs", "3", "--resume", *green, *common])


def test_a_run_cut_short_by_a_signal_is_not_recorded_and_is_run_again(tmp_path, repo) -> None:
    """A session's end kills the suite or this tool: neither makes a red run; --resume runs that run again."""
    out, logs, counter = tmp_path / "r.json", tmp_path / "logs", tmp_path / "n"
    common = ["--hog-threads", "0", "--logs", str(logs), "--json", str(out), "--repo", str(repo)]
    suite = tmp_path / "suite.py"  # green, except that its 3rd start is killed by SIGKILL
    suite.write_text(
        "import os, pathlib, signal\n"
        f"p = pathlib.Path({str(counter)!r})\n"
        "n = int(p.read_text()) + 1 if p.exists() else 1\n"
        "p.write_text(str(n))\n"
        "if n == 3:\n    os.kill(os.getpid(), signal.SIGKILL)\n"
        "print('1 passed')\n"
    )
    cmd = ["--command", f"{sys.executable} {suite}"]
    assert main(["--runs", "4", *cmd, *common]) == 3
    report = json.loads(out.read_text())
    assert [r["rc"] for r in report["runs"]] == [0, 0] and report["interrupted"] == "run 3 was killed by a signal"
    assert main(["--runs", "4", "--resume", *cmd, *common]) == 0
    report = json.loads(out.read_text())
    assert [r["rc"] for r in report["runs"]] == [0, 0, 0, 0] and [s["first_run"] for s in report["sessions"]] == [1, 3]


def test_the_tool_signalled_mid_run_kills_the_suite_and_records_nothing(tmp_path, repo) -> None:
    out, logs, pid_file = tmp_path / "r.json", tmp_path / "logs", tmp_path / "pid"
    suite = tmp_path / "suite.py"  # signals the tool (its parent) as a session's end would, then would run on
    suite.write_text(
        "import os, pathlib, signal, time\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n"
        "os.kill(os.getppid(), signal.SIGTERM)\n"
        "time.sleep(60)\n"
    )
    rc = main(["--runs", "2", "--hog-threads", "1", "--command", f"{sys.executable} {suite}", "--logs", str(logs),
               "--json", str(out), "--repo", str(repo)])
    report = json.loads(out.read_text())
    assert rc == 3 and report["runs"] == [] and "SIGTERM" in report["interrupted"]
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):  # the suite was killed (and reaped), not left running
        os.kill(pid, 0)
    assert not mp.active_children()
