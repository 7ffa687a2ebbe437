"""The hog-runs tool (tests/reliability/hog_runs.py): runs in a row, stops at the first failure, kills its hogs."""

from __future__ import annotations

import json
import multiprocessing as mp
import sys

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
