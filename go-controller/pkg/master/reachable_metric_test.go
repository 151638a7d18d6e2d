package master

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRegisterNodeReachable(t *testing.T) {
	reg := prometheus.NewRegistry()
	verdicts := map[string]bool{"node1": true, "node2": false}
	unregister := RegisterNodeReachable(reg, func() map[string]bool { return verdicts })
	want := `
# HELP ovnkube_master_egress_node_reachable Whether the health check finds an egress-assignable node reachable (1) or not (0).
# TYPE ovnkube_master_egress_node_reachable gauge
ovnkube_master_egress_node_reachable{node="node1"} 1
ovnkube_master_egress_node_reachable{node="node2"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metricNodeReachable); err != nil {
		t.Fatal(err)
	}
	// Read when scraped: a verdict that changes shows at the next scrape.
	verdicts = map[string]bool{"node2": true}
	want = `
# HELP ovnkube_master_egress_node_reachable Whether the health check finds an egress-assignable node reachable (1) or not (0).
# TYPE ovnkube_master_egress_node_reachable gauge
ovnkube_master_egress_node_reachable{node="node2"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), metricNodeReachable); err != nil {
		t.Fatal(err)
	}
	unregister()
	if n, err := testutil.GatherAndCount(reg, metricNodeReachable); err != nil || n != 0 {
		t.Fatalf("after unregister: %d series, err %v", n, err)
	}
}
