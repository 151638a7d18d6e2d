#!/usr/bin/env bash
# Builds golangci-lint v2.15.0 from the Go module proxy (go install of the released module, with its own go.mod and
# go.sum, checked against the checksum database) into the per-machine cache that survives fresh clones, the way
# contrib/build-helm.sh caches helm:
#   ${OVN_EIP_CACHE:-/var/cache/ovn-egressip}/golangci-lint-v2.15.0/bin/golangci-lint   (bin/.stamp holds the
#   version, build.log the last build's output)
# Prints the bin directory on stdout. Cold build: about 3-4 minutes on 2 cores; cached: instant.
# Concurrent callers (make lint in two work trees) are serialised with flock: one builds, the others wait and reuse it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
V=v2.15.0
cache=${OVN_EIP_CACHE:-/var/cache/ovn-egressip}/golangci-lint-$V
bin=$cache/bin
cached() { [[ -x $bin/golangci-lint && -f $bin/.stamp && "$(cat "$bin/.stamp")" == "$V" ]]; }
. "$here/cache.sh"
cache_reuse_or_lock "$bin" "$cache"
command -v go >/dev/null || { echo "build-golangci-lint: go is not installed (need Go 1.26 to build golangci-lint $V)" >&2; exit 1; }
log=$cache/build.log
echo "building golangci-lint $V (cold: a few minutes; log $log)" >&2
: >"$log"
# go install MODULE@VERSION builds with the module's own dependency versions, outside this repository's go.mod. GOBIN
# is a scratch directory so that a half-written binary never sits at the cached path.
tmp=$cache/tmp
rm -rf "$tmp" && mkdir -p "$tmp"
if ! GOBIN=$tmp GOFLAGS=-trimpath go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$V" >>"$log" 2>&1; then
  echo "build-golangci-lint: failed to build golangci-lint $V (see $log): $(tail -n 3 "$log" | tr '\n' ' ')" >&2
  exit 1
fi
mv "$tmp/golangci-lint" "$bin/golangci-lint"
rm -rf "$tmp"
echo "$V" >"$bin/.stamp"
echo "$bin"
