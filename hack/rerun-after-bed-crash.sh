#!/usr/bin/env bash
# Runs `go test ARGS... PKG` and, when it fails while the test bed's ovs-vswitchd crashed (the OVS 3.1 userspace
# conntrack assertion of Debian bookworm's openvswitch, docs/local-cluster.md), runs once more only the first-level
# subtests that failed, and says so. A failure with no such crash, or one that fails again, fails the run.
#   hack/rerun-after-bed-crash.sh PKG GO-TEST-ARGS...
set -uo pipefail
pkg=$1; shift
out=$(mktemp)
mark=$(mktemp)
trap 'rm -f "$out" "$mark"' EXIT
touch "$mark" # only logs kept by this run count
go test "$@" "$pkg" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
[[ $rc == 0 ]] && exit 0
# Failed tests as go test prints them: a top-level "--- FAIL: TestX (..)", its first-level subtests indented by 4
# ("    --- FAIL: TestX/sub (..)"). A top-level test runs again with the subtests of it that failed, or whole.
mapfile -t failed < <(awk '
  /^--- FAIL: Test/ { n=$3; if (!(n in subs)) subs[n]=""; order[++k]=n; next }
  /^    --- FAIL: Test/ { n=$3; top=n; sub(/\/.*/, "", top); subs[top]=subs[top] " " n; next }
  END { for (i=1; i<=k; i++) { t=order[i]; if (subs[t]=="") print t; else { split(subs[t], a, " "); for (j in a) print a[j] } } }' "$out" | sort -u)
crashes=$(find _output -path '*-logs/*ovs-vswitchd.log' -newer "$mark" -exec grep -l 'assertion conn->conn_type == CT_CONN_TYPE_DEFAULT' {} + 2>/dev/null | wc -l)
if [[ ${#failed[@]} == 0 || $crashes == 0 ]]; then
  echo "== $pkg failed (no ovs-vswitchd crash of the test bed in the kept logs): not run again"
  exit "$rc"
fi
echo "== $pkg: ovs-vswitchd of the test bed crashed during the run (OVS 3.1 conntrack assertion); running again once: ${failed[*]}"
rm -rf _output/*-logs
for t in "${failed[@]}"; do
  # -run takes one pattern per level, and a subtest name's own slashes are levels too.
  pattern=$(awk -F/ '{for (i=1;i<=NF;i++) printf "%s^%s$", (i>1?"/":""), $i}' <<<"$t")
  go test "$@" -run "$pattern" "$pkg" || exit 1
done
echo "== $pkg: passed when run again after the test bed's crash: ${failed[*]}"
