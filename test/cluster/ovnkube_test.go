package cluster

import (
	"slices"
	"strings"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

// TestOvnkubeArgs: the roles of each layout, and the subnets of the cluster's families.
func TestOvnkubeArgs(t *testing.T) {
	central := &Cluster{p: paths{dir: "/s"}, st: State{GatewayMode: gwmode.Local, IPFamily: FamilyDual, NBAddress: "unix:/s/run/ovnnb_db.sock"}}
	ic := &Cluster{p: paths{dir: "/s"}, st: State{GatewayMode: gwmode.Shared, IPFamily: FamilyIPv4, Layout: LayoutInterconnect}}
	// The local cluster's nodes are netns of one machine: the leaders opt in to the fast health check timings.
	const fast = "--egressip-reachability-interval 25ms --egressip-reachability-total-timeout 75ms"
	for _, tc := range []struct {
		name string
		got  []string
		want string
	}{
		{"central common", central.OvnkubeCommonArgs("/kc", "2"), "--egress-ip-enable --gateway-mode local --kubeconfig /kc " +
			"--cluster-subnets 10.244.0.0/16,fd00:10:244::/48 --join-subnet 100.64.0.0/16,fd98::/64 --loglevel 2"},
		{"central leader", central.OvnkubeLeaderArgs(), "--init-master --nb-address unix:/s/run/ovnnb_db.sock " + fast},
		{"central node", central.OvnkubeNodeArgs("node2"), "--init-node node2 --egressip-node-resync-interval 2s"},
		{"ic common", ic.OvnkubeCommonArgs("/kc", "4"), "--egress-ip-enable --gateway-mode shared --kubeconfig /kc " +
			"--cluster-subnets 10.244.0.0/16 --join-subnet 100.64.0.0/16 --loglevel 4"},
		{"ic leader", ic.OvnkubeLeaderArgs(), "--init-cluster-manager " + fast},
		{"ic node", ic.OvnkubeNodeArgs("node2"), "--init-node node2 --egressip-node-resync-interval 2s " +
			"--init-ovnkube-controller node2 --nb-address unix:/s/run/node2/ovnnb_db.sock"},
	} {
		if got := strings.Join(tc.got, " "); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
	full := central.Ovnkube("/kc", "2", "--init-node", "node1")
	full.Metrics, full.Extra = "127.0.0.1:9", []string{"--x"}
	if got, want := strings.Join(full.Args(), " "), strings.Join(central.OvnkubeCommonArgs("/kc", "2"), " ")+
		" --init-node node1 --metrics-bind-address 127.0.0.1:9 --x"; got != want {
		t.Errorf("Ovnkube.Args:\n got %s\nwant %s", got, want)
	}
	if got, want := strings.Join(Ovnkube{Kubeconfig: "/kc", GatewayMode: gwmode.Shared, LogLevel: "2"}.Args(), " "),
		"--egress-ip-enable --gateway-mode shared --kubeconfig /kc --cluster-subnets 10.244.0.0/16 --join-subnet 100.64.0.0/16 --loglevel 2"; got != want {
		t.Errorf("Ovnkube.Args without families:\n got %s\nwant %s", got, want)
	}
	if slices.Contains(ic.OvnkubeLeaderArgs(), "--nb-address") {
		t.Error("the cluster manager takes no NB")
	}
}
