#!/usr/bin/env bash
# One comment of gpugauge's on a pull request, updated in place on each push: the comment
# that holds the marker is edited, else one is created. Bencher and CodSpeed keep one comment
# the same way; a comment per push buries the discussion.
#   sticky-comment.sh PR_NUMBER BODY_FILE [MARKER_NAME]
# Needs gh (authenticated: GH_TOKEN) and GITHUB_REPOSITORY (owner/name), as in a workflow.
set -euo pipefail
pr=${1:?pull request number} body=${2:?body file} name=${3:-gpugauge-ab}
repo=${GITHUB_REPOSITORY:?owner/name of the repository}
marker="<!-- $name -->"
text="$(cat "$body")
$marker"
# the last comment holding the marker (a comment the job posted before)
id=$(gh api "repos/$repo/issues/$pr/comments" --paginate \
    --jq ".[] | select(.body | contains(\"$marker\")) | .id" | tail -n 1)
if [ -n "$id" ]; then
    gh api --method PATCH "repos/$repo/issues/comments/$id" -f body="$text" >/dev/null
    echo "updated comment $id on pull request $pr"
else
    gh pr comment "$pr" --body "$text"
fi
