#!/usr/bin/env bash
# try.sh: a real kubelet on this machine (docs/images.md, "Real kubelets"). As root, with the images of make image:
#   containerd (Debian 1.6.20, KUBELET=1 make install-deps) and kubelet v1.37.2 (built from the Go module proxy by
#   contrib/build-kube.sh, KUBE_EXTRA=kubelet), both in the network namespace kubelet-try, standalone (no API server);
#   the images are imported into containerd from _output/images (no registry: the pod sandbox image oeip-pause is
#   built here too); one static hostNetwork pod from the node image runs the image's iptables (through the wrapper)
#   and exits; the script prints the kubelet's view of the pod and the container's output, then stops everything.
# What this host needs, found by running it (each is set below):
#   - cgroup v1 (hybrid, no controllers on the v2 mount): kubelet v1.37 refuses it unless failCgroupV1: false;
#   - the kubelet's cgroupRoot must exist in every v1 hierarchy (cpuset with cpus and mems copied);
#   - root here lacks CAP_SYS_RESOURCE, so runc cannot lower oom_score_adj to the sandbox's -998: containerd's
#     restrict_oom_score_adj = true clamps it;
#   - `ip netns exec` remounts /sys, which hides /sys/fs/cgroup from the kubelet and containerd: they are entered
#     into the namespace with `nsenter --net` only;
#   - containerd 1.6 does not answer the kubelet's RuntimeConfig call (logged once; the kubelet's cgroupfs is used).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
state=${KUBELET_TRY_STATE:-/var/lib/oeip-kubelet-try}
ns=kubelet-try
cg=oeip-kubelet-try
KUBELET=1 "$root/contrib/install-deps.sh"
bin=$(KUBE_EXTRA=kubelet bash "$root/contrib/build-kube.sh")
for a in ovn-egressip-node ovn-egressip; do
  [[ -f $root/_output/images/$a.tar ]] || { echo "try: $root/_output/images/$a.tar missing: make image" >&2; exit 1; }
done
oci=$root/_output/bin/ociimage

pids=()
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 1
  for t in $(ctr -a "$state/containerd.sock" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr -a "$state/containerd.sock" -n k8s.io tasks kill -s KILL "$t" 2>/dev/null
  done
  sleep 1
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
  umount -R "$state/kubelet" 2>/dev/null
  find /sys/fs/cgroup/*/"$cg" -depth -type d -exec rmdir {} \; 2>/dev/null
}
trap cleanup EXIT
rm -rf "$state"; mkdir -p "$state/manifests" "$state/logs"
ip netns add "$ns"; ip netns exec "$ns" ip link set lo up

# The pod sandbox image, built here: a static Go program that waits for SIGTERM.
CGO_ENABLED=0 go build -C "$root" -trimpath -ldflags "-s -w -buildid=" -o "$state/pause" ./contrib/kubelet/pause
"$oci" build -out "$state/pause.tar" -name oeip-pause -tag latest -created 0 -user 65535:65535 -entrypoint /pause \
  -add "$state/pause:/pause" >/dev/null

cat >"$state/containerd.toml" <<EOT
version = 2
root = "$state/containerd/root"
state = "$state/containerd/state"
[grpc]
  address = "$state/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/oeip-pause:latest"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
EOT
nsenter --net="/var/run/netns/$ns" containerd --config "$state/containerd.toml" >"$state/containerd.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [[ -S $state/containerd.sock ]] && break; sleep 0.2; done
for a in "$state/pause.tar" "$root/_output/images/ovn-egressip-node.tar" "$root/_output/images/ovn-egressip.tar"; do
  ctr -a "$state/containerd.sock" -n k8s.io images import "$a" >/dev/null
done
echo "== images in containerd"; ctr -a "$state/containerd.sock" -n k8s.io images ls -q | grep docker.io

for d in /sys/fs/cgroup/*/; do
  [[ $(basename "$d") == unified ]] && continue
  mkdir -p "$d$cg"
done
cp /sys/fs/cgroup/cpuset/cpuset.cpus "/sys/fs/cgroup/cpuset/$cg/cpuset.cpus"
cp /sys/fs/cgroup/cpuset/cpuset.mems "/sys/fs/cgroup/cpuset/$cg/cpuset.mems"
cat >"$state/kubelet.yaml" <<EOT
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$cg
failSwapOn: false
staticPodPath: $state/manifests
podLogsDir: $state/logs
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
address: 127.0.0.1
readOnlyPort: 0
containerRuntimeEndpoint: unix://$state/containerd.sock
enforceNodeAllocatable: []
EOT
cat >"$state/manifests/iptables-check.yaml" <<'EOT'
apiVersion: v1
kind: Pod
metadata:
  name: iptables-check
  namespace: ovn-egressip
spec:
  hostNetwork: true
  restartPolicy: Never
  containers:
  - name: node-image
    image: ovn-egressip-node:latest
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "iptables -V && iptables -t nat -S POSTROUTING && while read -r l; do case $l in Uid*|CapEff*) echo $l;; esac; done </proc/self/status"]
    securityContext:
      capabilities:
        add: ["NET_ADMIN", "NET_RAW"]
EOT
ip netns exec "$ns" iptables -t nat -A POSTROUTING -s 10.244.0.0/16 -j MASQUERADE   # the host's own rule
nsenter --net="/var/run/netns/$ns" "$bin/kubelet" --config "$state/kubelet.yaml" --root-dir "$state/kubelet" \
  --hostname-override kubelet-try --v=2 >"$state/kubelet.log" 2>&1 &
pids+=($!)
start=$SECONDS
phase=
while ((SECONDS - start < 90)); do
  phase=$(nsenter --net="/var/run/netns/$ns" curl -sk https://127.0.0.1:10250/pods 2>/dev/null |
    python3 -c 'import json,sys
for p in json.load(sys.stdin).get("items", []):
    print(p["status"].get("phase", ""))' 2>/dev/null || true)
  [[ $phase == Succeeded || $phase == Failed ]] && break
  sleep 1
done
echo "== kubelet $("$bin/kubelet" --version) on $(uname -r), cgroup v1; static pod ovn-egressip/iptables-check: ${phase:-no status} after $((SECONDS - start))s"
echo "== container output"; cat "$state"/logs/*/*/0.log 2>/dev/null | sed 's/^[^ ]* [^ ]* [^ ]* //'
echo "== kubelet errors (first of each)"; grep '^E' "$state/kubelet.log" | sed -E 's/^E[0-9]+ [0-9:.]+ +[0-9]+ //' | cut -c1-200 | sort -u | head -5
[[ $phase == Succeeded ]]
