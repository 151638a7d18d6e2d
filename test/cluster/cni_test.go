package cluster

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-org/libovsdb/model"
	corev1 "k8s.io/api/core/v1"
)

func TestSandboxNetnsName(t *testing.T) {
	for _, tc := range []struct {
		path, want string
		ok         bool
	}{
		{"/var/run/netns/cni-1234", "cni-1234", true},
		{"/run/netns/cni-1234", "cni-1234", true},
		{"/run/netns/cni-1234/", "cni-1234", true},
		{"/proc/42/ns/net", "", false},
		{"", "", false},
	} {
		got, err := sandboxNetnsName(tc.path)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("sandboxNetnsName(%q) = %q, %v; want %q ok=%v", tc.path, got, err, tc.want, tc.ok)
		}
	}
}

func TestParseCNI(t *testing.T) {
	conf, err := cniConfList("/state", "node2")
	if err != nil {
		t.Fatal(err)
	}
	// The plugin's configuration is the conflist's plugin entry with name and cniVersion, as libcni passes it.
	var list struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(conf, &list); err != nil || len(list.Plugins) != 1 || list.Plugins[0]["type"] != CNIType {
		t.Fatalf("conflist %s: %v", conf, err)
	}
	p := list.Plugins[0]
	p["name"], p["cniVersion"] = list.Name, list.CNIVersion
	stdin, _ := json.Marshal(p)
	args := &skel.CmdArgs{StdinData: stdin,
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=prod;K8S_POD_NAME=web-prober;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u1"}
	c, pns, pname, err := parseCNI(args)
	if err != nil || c.StateDir != "/state" || c.Node != "node2" || pns != "prod" || pname != "web-prober" || c.CNIVersion != "1.0.0" {
		t.Fatalf("parseCNI = %+v %q %q %v", c, pns, pname, err)
	}
	for _, bad := range []*skel.CmdArgs{
		{StdinData: stdin, Args: "K8S_POD_NAMESPACE=prod"},                                          // no pod name
		{StdinData: []byte(`{"cniVersion":"1.0.0","name":"x","type":"oeip-cni"}`), Args: args.Args}, // no stateDir/node
		{StdinData: []byte(`{`), Args: args.Args},
	} {
		if _, _, _, err := parseCNI(bad); err == nil {
			t.Errorf("parseCNI(%s, %q) accepted", bad.StdinData, bad.Args)
		}
	}
}

func TestKubeletReady(t *testing.T) {
	node := func(c ...corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: c}}
	}
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message: "kubelet is posting ready status"}
	harness := ready
	harness.Message = "ovn-egressip local cluster heartbeat"
	notReady := ready
	notReady.Status, notReady.Reason = corev1.ConditionFalse, "KubeletNotReady"
	for _, tc := range []struct {
		n    *corev1.Node
		want bool
	}{
		{node(ready), true},
		{node(harness), false}, // written by the harness, not by a kubelet
		{node(notReady), false},
		{node(), false},
	} {
		if got := kubeletReady(tc.n); got != tc.want {
			t.Errorf("kubeletReady(%+v) = %v, want %v", tc.n.Status.Conditions, got, tc.want)
		}
	}
}

func TestNodeServiceDNAT(t *testing.T) {
	got := nodeServiceDNAT("172.18.0.1")
	for _, want := range []string{"-t nat -A OUTPUT", "-d 10.96.0.1/32", "--dport 443", "--to-destination 172.18.0.1:6443"} {
		if !strings.Contains(got, want) {
			t.Errorf("nodeServiceDNAT = %q, lacks %q", got, want)
		}
	}
}

func TestWithServiceLB(t *testing.T) {
	nodes := testNodes(t, 2)
	rows := withServiceLB(buildTopology(nodes, gwmode.Shared), nodes, "172.18.0.1")
	var lbUUID string
	withLB := map[string]bool{}
	for _, r := range rows {
		switch m := r.(type) {
		case *nbdb.LoadBalancer:
			if m.Vips["10.96.0.1:443"] != "172.18.0.1:6443" || m.Protocol == nil || *m.Protocol != nbdb.LoadBalancerProtocolTCP {
				t.Errorf("load balancer %+v", m)
			}
			lbUUID = m.UUID
		case *nbdb.LogicalSwitch:
			if len(m.LoadBalancer) > 0 {
				withLB[m.Name] = true
			}
		}
	}
	if lbUUID == "" {
		t.Fatal("no load balancer row")
	}
	if len(withLB) != 2 || !withLB["node1"] || !withLB["node2"] {
		t.Errorf("switches with the load balancer: %v, want node1 and node2 only", withLB)
	}
}

// In the kubelet mode every NB that holds a node switch has the kubernetes Service's load balancer on it: the one
// NB of the centralized layout on every node switch, each zone's NB of the interconnect layout on its node's switch.
func TestNBRowsServiceLBPerLayout(t *testing.T) {
	nodes := testNodes(t, 3)
	lbSwitches := func(rows []model.Model) []string {
		lbs := map[string]bool{}
		for _, r := range rows {
			if lb, ok := r.(*nbdb.LoadBalancer); ok && lb.Vips["10.96.0.1:443"] == "172.18.0.1:6443" {
				lbs[lb.UUID] = true
			}
		}
		var out []string
		for _, r := range rows {
			if sw, ok := r.(*nbdb.LogicalSwitch); ok && slices.ContainsFunc(sw.LoadBalancer, func(u string) bool { return lbs[u] }) {
				out = append(out, sw.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		layout   string
		zone     NodeAddrs
		kubelets bool
		want     []string
	}{
		{LayoutCentralized, NodeAddrs{}, true, []string{"node1", "node2", "node3"}},
		{LayoutCentralized, NodeAddrs{}, false, nil},
		{LayoutInterconnect, nodes[1], true, []string{"node2"}},
		{LayoutInterconnect, nodes[0], true, []string{"node1"}},
		{LayoutInterconnect, nodes[1], false, nil},
	} {
		rows := nbRows(tc.layout, nodes, tc.zone, gwmode.Local, tc.kubelets, "172.18.0.1")
		if got := lbSwitches(rows); !slices.Equal(got, tc.want) {
			t.Errorf("%s layout, zone %q, kubelets %v: switches with the kubernetes Service's load balancer %v, want %v",
				tc.layout, tc.zone.Name, tc.kubelets, got, tc.want)
		}
	}
}
