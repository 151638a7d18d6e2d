#!/usr/bin/env bash
# make chart-check (part of make verify): helm lint --strict and helm template of dist/helm/ovnkube-egressip in both
# layouts and both gateway modes, and dist/manifests equal to what the chart renders (make manifests).
set -euo pipefail
cd "$(dirname "$0")/.."
helm=$(./contrib/build-helm.sh)/helm
chart=dist/helm/ovnkube-egressip
for layout in centralized interconnect; do
  for mode in shared local; do
    "$helm" lint --strict --quiet "$chart" --set layout=$layout --set gatewayMode=$mode >/dev/null ||
      { "$helm" lint --strict "$chart" --set layout=$layout --set gatewayMode=$mode >&2; exit 1; }
    n=$("$helm" template ovnkube-egressip "$chart" --namespace ovn-egressip --set layout=$layout --set gatewayMode=$mode |
      grep -c '^kind: ')
    echo "chart: layout=$layout gatewayMode=$mode: helm lint passed, helm template rendered $n objects"
  done
done
CHECK=1 ./hack/update-manifests.sh
echo "chart: dist/manifests is what the chart renders"
