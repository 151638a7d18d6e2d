#!/usr/bin/env bash
# make kubelet-demo (root; docs/images.md "Real kubelets"): dist/manifests installed on real kubelets, and checked.
#   1. the local cluster in kubelet mode (clusterctl up --kubelets): kube-controller-manager, kube-scheduler, and per
#      node containerd + a kubelet v1.37.2 in the node's network namespace, the images of make image imported;
#   2. kubectl apply -f of dist/manifests with the two lines an admin sets for this cluster (the NB address, the
#      gateway mode): the master Deployment and the node DaemonSet run as pods; they turn Ready, a master holds the Lease;
#   3. the README's demo on them: egress-assignable nodes, the EgressIP of dist/examples/egressip.yaml, a served pod
#      (the oeip-prober image, a real container on node1 wired into OVN by the CNI plugin) whose requests the external
#      echo server sees with an egress IP as source, and an unselected one (namespace dev) seen with its node's
#      address;
#   4. kubectl rollout restart of the node DaemonSet while the served pod asks the echo server every 20 ms: every
#      answered request of the roll must name an egress IP as source (counts printed).
# Fails (exit 1) when any of it does not hold. Tears the cluster down at the end unless KUBELET_DEMO_KEEP=1.
# GATEWAY_MODE=shared|local (default local: the node daemons program the egress IPs, so their roll matters).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
mode=${GATEWAY_MODE:-local}
state=${CLUSTER_STATE:-$root/_output/cluster}
work=$root/_output/kubelet-demo
kubebin=$(KUBE_EXTRA="kubelet kube-controller-manager kube-scheduler" ./contrib/build-kube.sh)
KUBECTL=$kubebin/kubectl
kubectl() { "$KUBECTL" "$@"; }
show() { echo "\$ kubectl $*"; kubectl "$@"; }
fail() { echo "kubelet-demo: FAIL: $*" >&2; exit 1; }
go build -o _output/bin/clusterctl ./test/cluster/cmd/clusterctl
down() { [[ ${KUBELET_DEMO_KEEP:-} == 1 ]] || ./_output/bin/clusterctl down --state "$state"; }
trap down EXIT
rm -rf "$work"; mkdir -p "$work"

echo "### 1. Local cluster with kubelets ($mode gateway mode)"
t0=$SECONDS
./_output/bin/clusterctl up --kubelets --gateway-mode "$mode" --state "$state"
export KUBECONFIG=$state/kubeconfig
show get nodes -o wide

echo; echo "### 2. The manifests (dist/manifests/ with this cluster's NB address and gateway mode)"
cp -r dist/manifests "$work/manifests"
sed -i -e "s|address = tcp:ovnkube-db.ovn-kubernetes.svc:6641|address = tcp:172.18.0.1:6641|" \
  -e "s|^    mode = shared|    mode = $mode|" "$work/manifests/ovnkube-egressip.yaml"
(cd "$work" && diff -u "$root/dist/manifests/ovnkube-egressip.yaml" manifests/ovnkube-egressip.yaml | sed -n '3,$p' | grep '^[-+]') || true
t1=$SECONDS
show apply -f "$work/manifests/"
kubectl -n ovn-egressip rollout status daemonset/ovnkube-egressip-node --timeout=240s
kubectl -n ovn-egressip rollout status deployment/ovnkube-egressip-master --timeout=240s
echo "pods Ready $((SECONDS - t1))s after kubectl apply"
show -n ovn-egressip get pods -o wide
holder=
for _ in $(seq 60); do
  holder=$(kubectl -n ovn-egressip get lease ovn-egressip-master -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  [[ -n $holder ]] && break
  sleep 1
done
[[ -n $holder ]] || fail "no master holds the Lease ovn-egressip/ovn-egressip-master"
show -n ovn-egressip get lease ovn-egressip-master
# identity <hostname>_<pid>: a hostNetwork pod has its node's hostname, and the process is pid 1 in its container
masters=$(kubectl -n ovn-egressip get pods -l app=ovnkube-egressip-master -o jsonpath='{range .items[*]}{.spec.nodeName}{"_1 "}{end}')
[[ " $masters" == *" $holder "* ]] || fail "the Lease holder $holder is none of the master pods ($masters)"
echo "Lease ovn-egressip/ovn-egressip-master held by $holder (the master pods are $masters)"

echo; echo "### 3. The demo on them"
show label node node2 node3 k8s.ovn.org/egress-assignable= --overwrite
kubectl create namespace prod --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl create namespace dev --dry-run=client -o yaml | kubectl apply -f - >/dev/null
show label namespace prod environment=production --overwrite
show label namespace dev environment=development --overwrite
show apply -f dist/examples/egressip.yaml
for _ in $(seq 60); do
  [[ $(kubectl get eip egressip-prod -o jsonpath='{.status.items[*].node}' | wc -w) == 2 ]] && break
  sleep 1
done
show get eip
prober() { # namespace name interval
  cat <<EOT
apiVersion: v1
kind: Pod
metadata:
  name: $2
  namespace: $1
  labels: {app: web}
spec:
  nodeSelector: {kubernetes.io/hostname: node1}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: prober
    image: oeip-prober:latest
    imagePullPolicy: Never
    args: ["-target", "172.18.0.100:9000", "-interval", "$3"]
EOT
}
prober prod web-prober 20ms >"$work/prod-prober.yaml"
prober dev web-prober 200ms >"$work/dev-prober.yaml"
show apply -f "$work/prod-prober.yaml" -f "$work/dev-prober.yaml"
kubectl wait --for=condition=Ready pod/web-prober -n prod --timeout=120s >/dev/null
kubectl wait --for=condition=Ready pod/web-prober -n dev --timeout=120s >/dev/null
show get pods -n prod -o wide
show get pods -n dev -o wide
sleep 2
eips=$(kubectl get eip egressip-prod -o jsonpath='{.spec.egressIPs[*]}')
summary() { # file -> "N requests: SRC=COUNT ...; errors E"
  awk -v eips="$eips" '{ if ($3 == "error") e++; else { n++; c[$3]++ } }
    END { s = ""; for (k in c) s = s " " k "=" c[k]; printf "%d answered:%s; errors %d\n", n, s, e }' "$1"
}
kubectl logs -n prod web-prober >"$work/prod-before.log"
kubectl logs -n dev web-prober >"$work/dev-before.log"
echo "prod/web-prober (app=web, selected) -> echo saw: $(tail -n 50 "$work/prod-before.log" | summary /dev/stdin) (last 50 requests)"
echo "dev/web-prober  (namespace development, not selected) -> echo saw: $(tail -n 5 "$work/dev-before.log" | summary /dev/stdin) (last 5 requests)"
other=$(tail -n 50 "$work/prod-before.log" | awk -v eips=" $eips " '$3 != "error" && index(eips, " " $3 " ") == 0' | wc -l)
answered=$(tail -n 50 "$work/prod-before.log" | awk '$3 != "error"' | wc -l)
((answered > 0 && other == 0)) || fail "the served pod's requests do not all leave with an egress IP ($eips)"
node1ip=$([[ $mode == local ]] && echo 172.18.0.11 || echo 172.18.0.21)
[[ $(tail -n 1 "$work/dev-before.log" | awk '{print $3}') == "$node1ip" ]] || fail "dev/web-prober is not seen with $node1ip"

echo; echo "### 4. kubectl rollout restart of the node DaemonSet while prod/web-prober asks every 20 ms"
n0=$(kubectl logs -n prod web-prober | wc -l)
t2=$SECONDS
show -n ovn-egressip rollout restart daemonset/ovnkube-egressip-node
kubectl -n ovn-egressip rollout status daemonset/ovnkube-egressip-node --timeout=300s
roll=$((SECONDS - t2))
sleep 1
kubectl logs -n prod web-prober | sed -n "$((n0 + 1)),\$p" >"$work/prod-roll.log"
show -n ovn-egressip get pods -o wide
total=$(wc -l <"$work/prod-roll.log")
answered=$(awk '$3 != "error"' "$work/prod-roll.log" | wc -l)
other=$(awk -v eips=" $eips " '$3 != "error" && index(eips, " " $3 " ") == 0' "$work/prod-roll.log" | wc -l)
gap=$(awk -v eips=" $eips " '$3 != "error" && index(eips, " " $3 " ") > 0 { if (last && $1 - last > g) g = $1 - last; last = $1 } END { print g + 0 }' "$work/prod-roll.log")
echo "during the roll: $(summary "$work/prod-roll.log")"
line="ROLLING RESTART (kubelets, $mode): kubectl rollout restart of 3 node daemon pods done in ${roll}s; $total requests, longest gap between requests seen with an egress IP: ${gap}ms (lost $((total - answered)), other source $other)"
echo "$line"
mkdir -p _output; echo "$line" >>_output/kubelet-demo-results.txt
((answered > 0)) || fail "no request of the served pod was answered during the roll"
((other == 0)) || fail "$other requests left with another source during the roll"
echo "Leases in ovn-egressip (directconn's pods are on the pod network: they reach the apiserver through the kubernetes Service's OVN load balancer):"
show -n ovn-egressip get leases
echo "kubelet-demo: PASS (cluster up to the end of the roll: $((SECONDS - t0))s)"
