#!/usr/bin/env bash
# make manifests: renders dist/manifests from the chart dist/helm/ovnkube-egressip, one file per layout:
#   dist/manifests/ovnkube-egressip.yaml               centralized layout (the master Deployment, the node DaemonSet)
#   dist/manifests/interconnect/ovnkube-egressip.yaml  interconnect layout (the cluster manager, the zone DaemonSet)
# with the chart's default values, release ovnkube-egressip in namespace ovn-egressip (created by the manifest).
# CHECK=1 renders into a temporary directory and fails when dist/manifests differs (hack/verify.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
helm=$(./contrib/build-helm.sh)/helm
chart=dist/helm/ovnkube-egressip
out=dist/manifests
if [[ ${CHECK:-} == 1 ]]; then out=$(mktemp -d); trap 'rm -rf "$out"' EXIT; fi
mkdir -p "$out/interconnect"
render() { # layout file header
  { printf '%s\n' "$3"; "$helm" template ovnkube-egressip "$chart" --namespace ovn-egressip --set createNamespace=true \
      --set layout="$1"; } >"$out/$2.tmp"
  mv "$out/$2.tmp" "$out/$2"
}
render centralized ovnkube-egressip.yaml "# ovn-egressip on a cluster that runs OVN-Kubernetes-style networking with one NB (centralized layout).
# Rendered from the chart dist/helm/ovnkube-egressip by \`make manifests\` (do not edit: change the chart; helm install
# of the chart with --set layout=centralized is the same, with your values).
# Apply the CRD first: kubectl apply -f dist/crds/k8s.ovn.org_egressips.yaml
# Then set the images (ovn-egressip:latest for the master, ovn-egressip-node:latest for the node DaemonSet: \`make image\`,
# docs/images.md) and the NB address (ovnkube-config), and apply this file."
render interconnect interconnect/ovnkube-egressip.yaml "# ovn-egressip on a cluster that runs OVN Interconnect with one zone per node (interconnect layout, as current
# OVN-Kubernetes): the cluster manager Deployment, and on every node the zone controller with the node daemon, beside
# the zone's own NB (the socket of zone.nbAddress under zone.ovnRunDir; the rest of OVN-Kubernetes runs the zone's OVN).
# Rendered from the chart dist/helm/ovnkube-egressip by \`make manifests\` (do not edit: change the chart; helm install
# of the chart is the same, with your values).
# Apply the CRD first: kubectl apply -f dist/crds/k8s.ovn.org_egressips.yaml
# Then set the images (\`make image\`, docs/images.md) and apply this file."
if [[ ${CHECK:-} == 1 ]]; then
  for f in ovnkube-egressip.yaml interconnect/ovnkube-egressip.yaml; do
    if ! diff -u "dist/manifests/$f" "$out/$f" >&2; then
      echo "verify: dist/manifests/$f differs from the chart dist/helm/ovnkube-egressip: run 'make manifests' and commit" >&2
      exit 1
    fi
  done
fi
