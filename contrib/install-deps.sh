#!/usr/bin/env bash
# Installs what the local cluster needs on a Debian machine (run as root):
#   - Debian packages, only those whose programs are missing (apt-get update is run only then);
#   - kube-apiserver and kubectl v1.37.2, built once per machine from the Go module proxy (contrib/build-kube.sh;
#     cold about 7 minutes on 2 cores, then cached in ${OVN_EIP_CACHE:-/var/cache/ovn-egressip});
#   - userspace Open vSwitch 4.0.0 (ovs-vswitchd, ovsdb-server, ovs-vsctl, ...), built once per machine from Debian's
#     source package openvswitch 4.0.0-2 (contrib/build-ovs.sh; cold about 4 minutes on 2 cores, cached beside
#     kube-apiserver): the test bed runs it instead of bookworm's 3.1.0, whose userspace conntrack aborts under load
#     (when the archive no longer serves that source, a warning, and the bed runs bookworm's).
# On failure it prints one line naming the cause and exits 1.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log=${TMPDIR:-/tmp}/ovn-egressip-install-deps.log

# program -> Debian package
declare -A pkg=(
  [ovsdb-server]=openvswitch-switch [ovs-vswitchd]=openvswitch-switch [ovs-vsctl]=openvswitch-switch
  [ovn-northd]=ovn-central [ovn-controller]=ovn-host [etcd]=etcd-server
  [iptables]=iptables [ip]=iproute2 [ethtool]=ethtool [tcpdump]=tcpdump [arping]=iputils-arping
  [ping]=iputils-ping [nc]=netcat-openbsd
  [mmdebstrap]=mmdebstrap [runc]=runc  # make image (the node image's Debian root) and the image smoke test / OVNKUBE_FROM=image
)
# KUBELET=1 (contrib/kubelet/try.sh, make kubelet-demo): containerd for a real kubelet
if [[ ${KUBELET:-} == 1 ]]; then pkg[containerd]=containerd; pkg[ctr]=containerd; pkg[curl]=curl; pkg[python3]=python3; fi
missing=()
for prog in "${!pkg[@]}"; do
  command -v "$prog" >/dev/null 2>&1 || missing+=("${pkg[$prog]}")
done
[[ -f /usr/share/ovn/ovn-nb.ovsschema ]] || missing+=(ovn-common)
# the kubelet mode: containerd's CRI runs the loopback CNI plugin in every sandbox (Debian's, beside ours)
[[ ${KUBELET:-} == 1 && ! -x /usr/lib/cni/loopback ]] && missing+=(containernetworking-plugins)
if ((${#missing[@]})); then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  if [[ $(id -u) != 0 ]]; then
    echo "install-deps: missing packages ${missing[*]}: run as root to apt-get install them" >&2; exit 1
  fi
  command -v apt-get >/dev/null || { echo "install-deps: missing packages ${missing[*]} and no apt-get on this machine" >&2; exit 1; }
  echo "install-deps: apt-get install ${missing[*]}" >&2
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    echo "install-deps: cannot install ${missing[*]} with apt-get: $(grep -E '^E:' "$log" | head -n1 || tail -n1 "$log") (log $log)" >&2
    exit 1
  fi
fi
command -v go >/dev/null || { echo "install-deps: go not found (Go 1.26 builds kube-apiserver, kubectl and the harness)" >&2; exit 1; }
bash "$here/build-kube.sh" >/dev/null
# The OVS build is the bed's, not a requirement: when Debian's archive no longer serves that source (sid moves on),
# the bed falls back to bookworm's openvswitch-switch and says so (test/cluster: ResolveOVSTools).
if ! bash "$here/build-ovs.sh" >/dev/null; then
  echo "install-deps: no OVS build (the line above says why): the test bed runs Debian's openvswitch-switch $(dpkg-query -W -f='${Version}' openvswitch-switch 2>/dev/null), whose userspace conntrack can abort ovs-vswitchd under load (hack/rerun-after-bed-crash.sh reruns a case that meets it)" >&2
fi
