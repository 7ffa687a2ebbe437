"""The hog-runs tool (tests/reliability/hog_runs.py): runs in a row, stops at the first failure, kills its hogs."""

from __future__ import annotations

import json
import multiprocessing as mp
import subprocess
import sys

import pytest

from tests.reliability.hog_runs import main


def test_counts_green_runs_and_kills_the_hog(tmp_path) -> None:
    out = tmp_path / "r.json"
    rc = main(["--runs", "2", "--hog-threads", "1", "--command", f"{sys.executable} -c \"print('1 passed')\"",
               "--logs", str(tmp_path / "logs"), "--json", str(out)])
    report = json.loads(out.read_text())
    assert rc == 0 and report["green_in_a_row"] == 2 and [r["rc"] for r in report["runs"]] == [0, 0]
    assert report["runs"][0]["last_line"] == "1 passed" and (tmp_path / "logs" / "run2.log").exists()
    assert not mp.active_children()  # the hog process was killed and joined


def test_stops_at_the_first_failing_run(tmp_path) -> None:
    out = tmp_path / "r.json"
    rc = main(["--runs", "5", "--hog-threads", "0", "--command", f"{sys.executable} -c 'raise SystemExit(3)'",
               "--logs", str(tmp_path / "logs"), "--json", str(out)])
    report = json.loads(out.read_text())
    assert rc == 1 and len(report["runs"]) == 1 and report["runs"][0]["rc"] == 3 and report["green_in_a_row"] == 0


def test_reports_the_summary_line_not_makes_last_words(tmp_path) -> None:
    out, script = tmp_path / "r.json", tmp_path / "suite.py"
    script.write_text("print('=== 1 failed, 1706 passed in 557.84s ===')\nprint(\"make[1]: Leaving directory '/x'\")\n")
    main(["--runs", "1", "--hog-threads", "0", "--command", f"{sys.executable} {script}",
          "--logs", str(tmp_path / "logs"), "--json", str(out)])
    assert json.loads(out.read_text())["runs"][0]["last_line"] == "1 failed, 1706 passed in 557.84s"


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


def test_resume_continues_a_count_a_session_end_cut_short(tmp_path) -> None:
    """The count survives the session: the JSON is rewritten after every run, and --resume goes on at the next run
    when only docs changed since; the report lists both stretches."""
    repo, out, logs = tmp_path / "repo", tmp_path / "r.json", tmp_path / "logs"
    _repo(repo)
    ok = ["--hog-threads", "0", "--command", f"{sys.executable} -c \"print('1 passed')\"", "--logs", str(logs),
          "--json", str(out), "--repo", str(repo)]
    assert main(["--runs", "2", *ok]) == 0
    (repo / "docs" / "notes.md").write_text("the first two runs recorded\n")  # a doc change keeps the count
    assert main(["--runs", "4", "--resume", *ok]) == 0
    report = json.loads(out.read_text())
    assert [r["rc"] for r in report["runs"]] == [0, 0, 0, 0] and report["green_in_a_row"] == 4
    assert [s["first_run"] for s in report["sessions"]] == [1, 3] and (logs / "run4.log").exists()
    assert not (logs / "run5.log").exists()


def test_resume_refuses_changed_code_a_red_count_or_a_missing_report(tmp_path) -> None:
    repo, out, logs = tmp_path / "repo", tmp_path / "r.json", tmp_path / "logs"
    _repo(repo)
    common = ["--hog-threads", "0", "--logs", str(logs), "--json", str(out), "--repo", str(repo)]
    green = ["--command", f"{sys.executable} -c \"print('1 passed')\""]
    with pytest.raises(SystemExit):  # nothing to resume
        main(["--runs", "3", "--resume", *green, *common])
    assert main(["--runs", "1", *green, *common]) == 0
    (repo / "code.py").write_text("x = 2\n")  # the code under test changed: the count is for another program
    with pytest.raises(SystemExit):
        main(["--runs", "3", "--resume", *green, *common])
    (repo / "code.py").write_text("x = 1\n")
    assert main(["--runs", "3", "--command", f"{sys.executable} -c 'raise SystemExit(1)'", *common]) == 1
    with pytest.raises(SystemExit):  # a red run ends a count: start a new one
        main(["--runs", "3", "--resume", *green, *common])
