#!/usr/bin/env bash
# Builds the helm CLI v4.3.2 from the Go module proxy (module contrib/helmbuild, helm.sh/helm/v4/cmd/helm) into a
# per-machine cache that survives fresh clones, the way contrib/build-kube.sh caches kube-apiserver and kubectl:
#   ${OVN_EIP_CACHE:-/var/cache/ovn-egressip}/helm-v4.3.2/bin/helm   (bin/.stamp holds the version, build.log the
#   last build's output)
# Prints the bin directory on stdout. Cold build: a few minutes on 2 cores; cached: instant.
# Concurrent callers (make lint, make verify, tests) are serialised with flock: one builds, the others wait and reuse it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
V=v4.3.2
cache=${OVN_EIP_CACHE:-/var/cache/ovn-egressip}/helm-$V
bin=$cache/bin
cached() { [[ -x $bin/helm && -f $bin/.stamp && "$(cat "$bin/.stamp")" == "$V" ]]; }
. "$here/cache.sh"
cache_reuse_or_lock "$bin" "$cache"
command -v go >/dev/null || { echo "build-helm: go is not installed (need Go 1.26 to build helm $V)" >&2; exit 1; }
# The version helm prints (helm version): the module's own default is only major.minor.
LD="-s -w -X helm.sh/helm/v4/internal/version.version=$V"
cd "$here/helmbuild"
log=$cache/build.log
echo "building helm $V (cold: a few minutes; log $log)" >&2
: >"$log"
if ! go build -trimpath -ldflags "$LD" -o "$bin/helm.tmp" helm.sh/helm/v4/cmd/helm >>"$log" 2>&1; then
  echo "build-helm: failed to build helm $V (see $log): $(tail -n 3 "$log" | tr '\n' ' ')" >&2
  exit 1
fi
mv "$bin/helm.tmp" "$bin/helm"
echo "$V" >"$bin/.stamp"
echo "$bin"
