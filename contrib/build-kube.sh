#!/usr/bin/env bash
# Builds kube-apiserver and kubectl v1.37.2 from the Go module proxy (module contrib/k8sbuild)
# into a per-machine cache that survives cluster-down and fresh clones:
#   ${OVN_EIP_CACHE:-/var/cache/ovn-egressip}/kube-v1.37.2/bin/{kube-apiserver,kubectl}
# Prints the bin directory on stdout. Cold build: about 7 minutes on 2 cores; cached: instant.
# KUBE_EXTRA="kubelet kube-controller-manager kube-scheduler" also builds those (once; contrib/kubelet/try.sh uses
# the kubelet: about 11 minutes cold on 2 cores with the apiserver's build cache warm).
# Concurrent callers (parallel tests, make) are serialised with flock: one builds, the others wait and reuse it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
V=v1.37.2
cache=${OVN_EIP_CACHE:-/var/cache/ovn-egressip}/kube-$V
bin=$cache/bin
extra=(${KUBE_EXTRA:-})
cached() {
  [[ -x $bin/kube-apiserver && -x $bin/kubectl && -f $bin/.stamp && "$(cat "$bin/.stamp")" == "$V" ]] || return 1
  local x; for x in "${extra[@]}"; do [[ -x $bin/$x ]] || return 1; done
}
. "$here/cache.sh"
cache_reuse_or_lock "$bin" "$cache"
command -v go >/dev/null || { echo "build-kube: go is not installed (need Go 1.26 to build kube-apiserver/kubectl $V)" >&2; exit 1; }
LD="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LD="$LD -X $p.gitVersion=$V -X $p.gitMajor=1 -X $p.gitMinor=37 -X $p.gitTreeState=clean -X $p.buildDate=2026-01-01T00:00:00Z"
done
cd "$here/k8sbuild"
log=$cache/build.log
echo "building kube-apiserver kubectl ${extra[*]} $V (cold: ~7 min, ~11 more for the kubelet; log $log)" >&2
: >"$log"
for cmd in kube-apiserver kubectl "${extra[@]}"; do
  [[ -x $bin/$cmd && -f $bin/.stamp && "$(cat "$bin/.stamp")" == "$V" ]] && continue
  if ! go build -trimpath -ldflags "$LD" -o "$bin/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd" >>"$log" 2>&1; then
    echo "build-kube: failed to build $cmd $V (see $log): $(tail -n 3 "$log" | tr '\n' ' ')" >&2
    exit 1
  fi
  mv "$bin/$cmd.tmp" "$bin/$cmd"
done
echo "$V" > "$bin/.stamp"
echo "$bin"
