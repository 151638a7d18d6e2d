#!/usr/bin/env bash
# The main job, as a cluster admin does it, on the local cluster:
# ovnkube master + node daemons with --egress-ip-enable, kubectl label, kubectl apply,
# then real requests from pods to the external echo server, showing the source IP it saw.
#   GATEWAY_MODE=shared|local  CLUSTER_IP_FAMILY=ipv4|ipv6|dual  CLUSTER_LAYOUT=interconnect (default)|centralized
#   CLUSTER_STATE=dir (default _output/cluster)
# Stop everything with: make demo-down
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
MODE=${GATEWAY_MODE:-shared}
FAMILY=${CLUSTER_IP_FAMILY:-ipv4}
LAYOUT=${CLUSTER_LAYOUT:-interconnect}
case $LAYOUT in centralized|interconnect) ;; *) echo "CLUSTER_LAYOUT=$LAYOUT: want centralized or interconnect" >&2; exit 2 ;; esac
export CLUSTER_STATE=${CLUSTER_STATE:-$root/_output/cluster} GATEWAY_MODE=$MODE CLUSTER_IP_FAMILY=$FAMILY CLUSTER_NODES=3 CLUSTER_LAYOUT=$LAYOUT
case $FAMILY in
  ipv4) fams=(4); subnets=10.244.0.0/16; join=100.64.0.0/16; example=dist/examples/egressip.yaml; eipname=egressip-prod ;;
  ipv6) fams=(6); subnets=fd00:10:244::/48; join=fd98::/64; example=dist/examples/egressip-ipv6.yaml; eipname=egressip-prod-v6 ;;
  dual) fams=(4 6); subnets=10.244.0.0/16,fd00:10:244::/48; join=100.64.0.0/16,fd98::/64
        example=dist/examples/egressip-dualstack.yaml; eipname=egressip-payments ;;
  *) echo "CLUSTER_IP_FAMILY=$FAMILY: want ipv4, ipv6 or dual" >&2; exit 2 ;;
esac
CTL=$root/_output/bin/clusterctl
OVNKUBE=$root/_output/bin/ovnkube
DEMO=$CLUSTER_STATE/demo

step() { printf '\n\033[1m### %s\033[0m\n' "$*"; }
# show prints a command the way it can be pasted into a shell (arguments with shell characters single-quoted,
# the kubectl function as plain "kubectl"), then runs it.
show() {
  local out="$" a
  for a in "$@"; do
    if [[ $a =~ [^A-Za-z0-9_./:=,@%+-] ]]; then out+=" '${a//\'/\'\\\'\'}'"; else out+=" $a"; fi
  done
  printf '%s\n' "$out"
  "$@"
}

if [[ $LAYOUT == interconnect ]]; then ovn="one OVN zone per node (NB, SB, northd, ovn-controller each), joined by a transit switch"
else ovn="OVN (NB, SB, northd, ovn-controller)"; fi
step "1. Local cluster: kube-apiserver, $ovn, 3 nodes as network namespaces, $MODE gateway mode, $FAMILY"
"$CTL" up
eval "$("$CTL" status | grep -v '^#')"
export KUBECONFIG
kubectl() { "$KUBECTL" "$@"; }
"$CTL" status | grep '^#' | sed 's/^# //'
show kubectl get nodes

if [[ $LAYOUT == interconnect ]]; then
  step "2. ovnkube: the cluster manager (host) and, per node, its zone controller with its node daemon (inside the node's network namespace)"
else
  step "2. ovnkube: one master (host) and one node daemon per node (inside the node's network namespace)"
fi
"$root/contrib/demo-stop.sh" >/dev/null 2>&1 || true
mkdir -p "$DEMO"
# Each runs as the ServiceAccount dist/manifests gives it (clusterctl kubeconfig): the master with its ClusterRole and
# its Lease in ovn-egressip, each node daemon with a token bound to its Node (admission policy ovnkube-egressip-node-writes).
common=(--egress-ip-enable --gateway-mode "$MODE" --cluster-subnets "$subnets" --join-subnet "$join")
mk=$("$CTL" kubeconfig master)
if [[ $LAYOUT == interconnect ]]; then role=(--init-cluster-manager); else role=(--init-master --nb-address "$NB_ADDRESS"); fi
echo "\$ ovnkube ${role[*]} ${common[*]} --kubeconfig $mk --leader-elect-namespace ovn-egressip --metrics-bind-address 127.0.0.1:9412"
nohup "$OVNKUBE" "${role[@]}" "${common[@]}" --kubeconfig "$mk" --leader-elect-namespace ovn-egressip \
  --metrics-bind-address 127.0.0.1:9412 >"$DEMO/ovnkube-master.log" 2>&1 & echo $! >"$DEMO/ovnkube-master.pid"
for n in node1 node2 node3; do
  nk=$("$CTL" kubeconfig "$n")
  zone=()
  if [[ $LAYOUT == interconnect ]]; then
    var=ZONE_NB_$n
    zone=(--init-ovnkube-controller "$n" --nb-address "${!var}")
  fi
  echo "\$ ip netns exec oeip-$n ovnkube --init-node $n ${zone[*]} ${common[*]} --kubeconfig $nk"
  nohup ip netns exec "oeip-$n" "$OVNKUBE" --init-node "$n" "${zone[@]}" "${common[@]}" --kubeconfig "$nk" >"$DEMO/ovnkube-$n.log" 2>&1 &
  echo $! >"$DEMO/ovnkube-$n.pid"
done
for i in $(seq 1 100); do
  n=$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.annotations.k8s\.ovn\.org/node-primary-ifaddr}{"\n"}{end}' | grep -c '"ipv' || true)
  [[ $n == 3 ]] && break; sleep 0.2
done
show kubectl get nodes -o custom-columns='NAME:.metadata.name,PRIMARY-IFADDR:.metadata.annotations.k8s\.ovn\.org/node-primary-ifaddr'

step "3. Let node2 and node3 host egress IPs"
show kubectl label node node2 node3 k8s.ovn.org/egress-assignable="" --overwrite

step "4. Namespaces and pods (pods are network namespaces on their node's switch)"
echo "\$ kubectl create namespace prod; kubectl create namespace dev"
kubectl create namespace prod --dry-run=client -o yaml | kubectl apply -f - >/dev/null
show kubectl label namespace prod environment=production --overwrite
[[ $FAMILY == dual ]] && show kubectl label namespace prod team=payments --overwrite
kubectl create namespace dev --dry-run=client -o yaml | kubectl apply -f - >/dev/null
show kubectl label namespace dev environment=development --overwrite
for spec in prod/web1:node1:app=web prod/web2:node3:app=web prod/db1:node1:app=db dev/web1:node1:app=web; do
  IFS=: read -r ref node labels <<<"$spec"
  "$CTL" pod del "$ref" >/dev/null 2>&1 || true
  show "$CTL" pod add "$ref" --node "$node" --labels "$labels"
done
show kubectl get pods -A -o wide

step "5. Apply the EgressIP"
show cat "$example"
show kubectl apply -f "$example"
for i in $(seq 1 100); do
  n=$(kubectl get eip "$eipname" -o jsonpath='{.status.items[*].node}' | wc -w)
  [[ $n == 2 ]] && break; sleep 0.2
done
# Ready once every holder has programmed its IP (its NB rows; in local gateway mode also its host rules).
show kubectl wait --for=condition=Ready --timeout=30s eip/"$eipname"
show kubectl get eip
show kubectl get eip "$eipname" -o jsonpath='{range .status.items[*]}{.egressIP}{" is held by "}{.node}{"\n"}{end}'

case $FAMILY in ipv4) over="IPv4" ;; ipv6) over="IPv6" ;; dual) over="IPv4 and IPv6" ;; esac
step "6. Requests from each pod to the external echo server (port 9000, over $over), and the source IP it saw"
sleep 1
if [[ $MODE == shared ]]; then own="its gateway router's address (GR_<node> SNAT)"; else own="its node's address (node MASQUERADE)"; fi
for ref in prod/web1 prod/web2 prod/db1 dev/web1; do
  case $FAMILY/$ref in
    dual/prod/*) why="namespace team=payments -> the egress IP of the request's family" ;;
    */prod/web*) why="selected: app=web in a namespace not labelled development -> an egress IP (ECMP over both holders)" ;;
    */prod/db1) why="not selected (app=db) -> $own" ;;
    */dev/web1) why="namespace is development -> $own" ;;
  esac
  for f in "${fams[@]}"; do
    src=$("$CTL" pod request "$ref" --family "$f" 2>&1 || true)
    printf '  %-10s IPv%s -> echo saw %-24s (%s)\n' "$ref" "$f" "$src" "$why"
  done
done

step "Look around"
ipt=""
if [[ $MODE == local ]]; then
  ipt=$'\n  ip netns exec oeip-node2 iptables -t nat -S OVN-KUBE-EGRESSIP   # the node\'s SNAT rules ("incompatible" = no such chain: no egress IP held; ip6tables for IPv6)'
fi
nb1=${ZONE_NB_node1:-} nb2=${ZONE_NB_node2:-}
[[ $LAYOUT == interconnect ]] || nb1=$NB_ADDRESS nb2=$NB_ADDRESS
if [[ $LAYOUT == interconnect ]]; then
  step "The rows of two zones: node1's (its pods' reroutes) and node2's (a holder: its SNATs)"
  show ovn-nbctl --db="$nb1" lr-policy-list ovn_cluster_router
  show ovn-nbctl --db="$nb2" lr-policy-list ovn_cluster_router
  show ovn-nbctl --db="$nb2" lr-nat-list GR_node2
fi
cat <<MSG
  export KUBECONFIG=$KUBECONFIG
  $KUBECTL get eip -o yaml
  ovn-nbctl --db=$nb1 lr-policy-list ovn_cluster_router
  ovn-nbctl --db=$nb2 lr-nat-list GR_node2$ipt
  $CTL pod request prod/web1 [--family 6]                           # one more request
  curl -s 127.0.0.1:9412/metrics | grep egress                      # the cluster manager's (centralized: the master's) metrics
  logs: $DEMO/*.log
  (an EgressIP puts at most one of its IPs on a node: unlabel node2 and one of its IPs stays unassigned, with an Event)
Stop everything: make demo-down   (ovnkube processes, then the cluster)
MSG
