"""The pull request's A/B table is one comment, updated in place on each push (issue 51).

`.github/scripts/sticky-comment.sh` runs against a fake `gh` that keeps a pull request's
comments in a JSON file, as GitHub's API would: the workflow's own step, three pushes.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".github" / "scripts" / "sticky-comment.sh"

FAKE_GH = """\
#!{python}
import json, os, sys
state = os.environ["FAKE_GH_STATE"]
comments = json.load(open(state)) if os.path.exists(state) else []
args = sys.argv[1:]
with open(state + ".calls", "a") as log:
    log.write(" ".join(args[:3]) + "\\n")
if args[:2] == ["pr", "comment"]:
    body = args[args.index("--body") + 1]
    comments.append({{"id": 100 + len(comments), "body": body}})
elif args[0] == "api" and "--method" in args:
    cid = int(args[args.index("--method") + 2].rsplit("/", 1)[1])
    body = args[args.index("-f") + 1].split("=", 1)[1]
    next(c for c in comments if c["id"] == cid)["body"] = body
elif args[0] == "api":
    jq = args[args.index("--jq") + 1]
    marker = jq.split('contains("', 1)[1].split('")', 1)[0]
    for c in comments:
        if marker in c["body"]:
            print(c["id"])
json.dump(comments, open(state, "w"))
"""


def test_the_ab_table_is_one_comment_updated_on_each_push(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(FAKE_GH.format(python=sys.executable))
    gh.chmod(gh.stat().st_mode | stat.S_IEXEC)
    state = tmp_path / "comments.json"
    # somebody else's comment on the pull request stays as it is
    state.write_text(json.dumps([{"id": 1, "body": "LGTM"}]))
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_GH_STATE": str(state),
        "GITHUB_REPOSITORY": "owner/repo",
    }
    for push in range(3):
        body = tmp_path / "ab.md"
        body.write_text(f"### gpugauge A/B: 3 cases: {push} slower, 0 faster\n\n| table |\n")
        done = subprocess.run(
            ["bash", str(SCRIPT), "7", str(body)], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    comments = json.loads(state.read_text())
    assert [c["id"] for c in comments] == [1, 101]  # one of ours, created once
    assert comments[0]["body"] == "LGTM"
    ours = comments[1]["body"]
    assert ours.splitlines()[0] == "### gpugauge A/B: 3 cases: 2 slower, 0 faster"  # the last
    calls = (tmp_path / "comments.json.calls").read_text().splitlines()
    assert sum(c.startswith("pr comment") for c in calls) == 1
    assert sum("PATCH" in c for c in calls) == 2


def test_the_workflow_posts_through_the_script() -> None:
    workflow = (ROOT / ".github" / "workflows" / "pr-ab.yml").read_text()
    assert "bash .github/scripts/sticky-comment.sh" in workflow
    assert "gh pr comment" not in workflow  # a comment per push no more
    assert SCRIPT.stat().st_mode & stat.S_IXUSR


def test_the_markdown_s_first_line_holds_the_verdict_counts() -> None:
    from gpugauge.ab.render import markdown
    from gpugauge.ab.result import CaseAB
    from tests.test_ab import _pairs, _report

    md = markdown(_report((CaseAB("c", "t.py::c", _pairs(1.05)),)))
    assert md.splitlines()[0].startswith("### gpugauge A/B: 1 case: 1 slower, 0 faster")
