package cluster

import (
	"net/netip"
	"strings"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-org/libovsdb/model"
)

// OVN names of the topology (the layout OVN-Kubernetes creates; DESIGN.md section 5).
const (
	ClusterRouter = "ovn_cluster_router"
	JoinSwitch    = "join"
)

// GatewayRouter is the name of a node's gateway router.
func GatewayRouter(node string) string { return "GR_" + node }

// ExternalSwitch is the name of a node's external switch.
func ExternalSwitch(node string) string { return "ext_" + node }

// MgmtPort is the name of a node's management port (LSP and the interface in the node netns).
func MgmtPort(node string) string { return "k8s-" + node }

// harnessIDs returns the external_ids of a harness row, plus extra key/value pairs.
func harnessIDs(kv ...string) map[string]string {
	m := map[string]string{HarnessKey: "true"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// uuidName turns a row name into an OVSDB named-uuid ([_a-zA-Z][_a-zA-Z0-9]*).
func uuidName(kind, name string) string {
	var b strings.Builder
	b.WriteString("u_" + kind + "_")
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// topology collects the rows of the cluster's NB topology with named-uuid references between them, so that the
// whole layout is inserted in one transaction.
type topology struct{ rows []model.Model }

func (t *topology) add(m model.Model) { t.rows = append(t.rows, m) }

// routerPort adds the switch side (type router) of a router port and returns its named uuid.
func (t *topology) routerTypeLSP(name, routerPort string, opts map[string]string) string {
	o := map[string]string{"router-port": routerPort}
	for k, v := range opts {
		o[k] = v
	}
	u := uuidName("lsp", name)
	t.add(&nbdb.LogicalSwitchPort{UUID: u, Name: name, Type: "router", Addresses: []string{"router"}, Options: o,
		ExternalIDs: harnessIDs()})
	return u
}

func (t *topology) lrp(name, mac string, networks ...netip.Prefix) string {
	u := uuidName("lrp", name)
	var nets []string
	for _, n := range networks {
		nets = append(nets, n.String())
	}
	t.add(&nbdb.LogicalRouterPort{UUID: u, Name: name, MAC: mac, Networks: nets, ExternalIDs: harnessIDs()})
	return u
}

func (t *topology) route(key, prefix, nexthop string, policy *nbdb.LogicalRouterStaticRoutePolicy, outPort *string) string {
	u := uuidName("route", key)
	t.add(&nbdb.LogicalRouterStaticRoute{UUID: u, IPPrefix: prefix, Nexthop: nexthop, Policy: policy,
		OutputPort: outPort, ExternalIDs: harnessIDs()})
	return u
}

// buildTopology returns the NB rows of the whole cluster, in every family the nodes have (ports carry one network per
// family, routes and SNAT rows exist per family):
//   - ovn_cluster_router with a port on the join switch (100.64.0.1/16, fd98::1/64) and one per node switch
//     (10.244.X.1/24, fd00:10:244:X::1/64);
//   - per node: switch <node> (other_config:subnet) with the management port k8s-<node>; GR_<node> bound to Chassis
//     with rtoj-GR_<node> (join IP) and rtoe-GR_<node> (its external IP) on ext_<node>, whose localnet port
//     breth0_<node> maps to br-ex; GR routes (cluster CIDR via the cluster router, default via the external host);
//     the node SNAT (cluster CIDR -> GR external IP); a src-ip route on ovn_cluster_router sending the node's pod
//     egress to its GR join IP (shared) or to its management port IP (local: through the node's host);
//   - switch ovn-eip-host (10.244.0.0/24, fd00:10:244::/64) with the root namespace's port k8s-ovn-eip-host.
//
// Every row carries external_ids ovn-egressip-harness=true.
func buildTopology(nodes []NodeAddrs, mode gwmode.Mode) []model.Model {
	return buildTopologyOn(nodes, mode, Chassis, true)
}

// buildTopologyOn is buildTopology with the gateway routers bound to chassis, and the switch ovn-eip-host (the root
// namespace's port) only when withHost (the interconnect layout has it in node1's zone only).
func buildTopologyOn(nodes []NodeAddrs, mode gwmode.Mode, chassis string, withHost bool) []model.Model {
	t := &topology{}
	srcIP := nbdb.LogicalRouterStaticRoutePolicySrcIP
	var fams []int
	if len(nodes) > 0 {
		for _, f := range nodes[0].Families {
			fams = append(fams, f.Family)
		}
	}
	if len(fams) == 0 {
		fams = []int{4}
	}
	var crJoin, hostNets []netip.Prefix
	hostAddrs := ovnMAC(plans[fams[0]].hostIP)
	hostCfg := map[string]string{}
	joinCfg := map[string]string{}
	for _, f := range fams {
		pl := plans[f]
		crJoin = append(crJoin, netip.PrefixFrom(pl.clusterRtrJIP, pl.join.Bits()))
		hostNets = append(hostNets, netip.PrefixFrom(pl.hostRouterIP, pl.hostSubnet.Bits()))
		hostAddrs += " " + pl.hostIP.String()
		if f == 4 {
			hostCfg["subnet"] = pl.hostSubnet.String()
			joinCfg["subnet"] = pl.join.String()
		}
	}

	crPorts := []string{t.lrp("rtoj-"+ClusterRouter, ovnMAC(plans[fams[0]].clusterRtrJIP), crJoin...)}
	joinPorts := []string{t.routerTypeLSP("jtor-"+ClusterRouter, "rtoj-"+ClusterRouter, nil)}
	var crRoutes []string

	// the root namespace's port into OVN
	if withHost {
		crPorts = append(crPorts, t.lrp("rtos-"+hostPortSwitch, ovnMAC(plans[fams[0]].hostRouterIP), hostNets...))
		hostMP := uuidName("lsp", MgmtPort(hostPortSwitch))
		t.add(&nbdb.LogicalSwitchPort{UUID: hostMP, Name: MgmtPort(hostPortSwitch),
			Addresses: []string{hostAddrs}, ExternalIDs: harnessIDs()})
		t.add(&nbdb.LogicalSwitch{UUID: uuidName("ls", hostPortSwitch), Name: hostPortSwitch,
			OtherConfig: hostCfg, ExternalIDs: harnessIDs(),
			Ports: []string{t.routerTypeLSP("stor-"+hostPortSwitch, "rtos-"+hostPortSwitch, nil), hostMP}})
	}

	for _, n := range nodes {
		gr := GatewayRouter(n.Name)
		ext := ExternalSwitch(n.Name)
		var rtosNets, rtojNets, rtoeNets []netip.Prefix
		mpAddrs := n.MgmtMAC
		swCfg := map[string]string{}
		var grRoutes, nats []string
		outPort := "rtoe-" + gr
		for _, f := range n.Families {
			pl := plans[f.Family]
			sfx := ""
			if f.Family == 6 {
				sfx = "6"
			} else {
				swCfg["subnet"] = f.Subnet.String()
			}
			rtosNets = append(rtosNets, netip.PrefixFrom(f.RouterIP, f.Subnet.Bits()))
			rtojNets = append(rtojNets, netip.PrefixFrom(f.JoinIP, pl.join.Bits()))
			rtoeNets = append(rtoeNets, netip.PrefixFrom(f.GatewayIP, pl.external.Bits()))
			mpAddrs += " " + f.MgmtIP.String()
			grRoutes = append(grRoutes,
				t.route(gr+"_cluster"+sfx, pl.cluster.String(), pl.clusterRtrJIP.String(), nil, nil),
				t.route(gr+"_default"+sfx, pl.defaultRoute, pl.extHost.String(), nil, &outPort))
			nat := uuidName("nat", gr+sfx)
			t.add(&nbdb.NAT{UUID: nat, Type: nbdb.NATTypeSNAT, ExternalIP: f.GatewayIP.String(), LogicalIP: pl.cluster.String(),
				ExternalIDs: harnessIDs("node", n.Name)})
			nats = append(nats, nat)
			// per-node pod egress: shared -> own GR, local -> own node host (management port)
			nh := f.JoinIP
			if mode == gwmode.Local {
				nh = f.MgmtIP
			}
			crRoutes = append(crRoutes, t.route(n.Name+"_egress"+sfx, f.Subnet.String(), nh.String(), &srcIP, nil))
		}
		// node switch + management port
		crPorts = append(crPorts, t.lrp("rtos-"+n.Name, n.RouterMAC, rtosNets...))
		mp := uuidName("lsp", MgmtPort(n.Name))
		t.add(&nbdb.LogicalSwitchPort{UUID: mp, Name: MgmtPort(n.Name),
			Addresses: []string{mpAddrs}, ExternalIDs: harnessIDs("node", n.Name)})
		t.add(&nbdb.LogicalSwitch{UUID: uuidName("ls", n.Name), Name: n.Name,
			OtherConfig: swCfg, ExternalIDs: harnessIDs("node", n.Name),
			Ports: []string{t.routerTypeLSP("stor-"+n.Name, "rtos-"+n.Name, nil), mp}})

		// gateway router
		rtoj := t.lrp("rtoj-"+gr, n.JoinMAC, rtojNets...)
		rtoe := t.lrp("rtoe-"+gr, n.GatewayMAC, rtoeNets...)
		joinPorts = append(joinPorts, t.routerTypeLSP("jtor-"+gr, "rtoj-"+gr, nil))
		t.add(&nbdb.LogicalRouter{UUID: uuidName("lr", gr), Name: gr, Ports: []string{rtoj, rtoe},
			StaticRoutes: grRoutes, Nat: nats,
			Options:     map[string]string{"chassis": chassis},
			ExternalIDs: harnessIDs("node", n.Name, "physical_ip", n.GatewayIP.String())})

		// external switch with the localnet port to br-ex; the GR's port announces its NAT addresses (GARP)
		localnet := uuidName("lsp", "breth0_"+n.Name)
		t.add(&nbdb.LogicalSwitchPort{UUID: localnet, Name: "breth0_" + n.Name, Type: "localnet",
			Addresses: []string{"unknown"}, Options: map[string]string{"network_name": PhysNet},
			ExternalIDs: harnessIDs("node", n.Name)})
		t.add(&nbdb.LogicalSwitch{UUID: uuidName("ls", ext), Name: ext, ExternalIDs: harnessIDs("node", n.Name),
			Ports: []string{t.routerTypeLSP("etor-"+gr, "rtoe-"+gr, map[string]string{"nat-addresses": "router"}), localnet}})
	}
	t.add(&nbdb.LogicalSwitch{UUID: uuidName("ls", JoinSwitch), Name: JoinSwitch,
		OtherConfig: joinCfg, ExternalIDs: harnessIDs(), Ports: joinPorts})
	t.add(&nbdb.LogicalRouter{UUID: uuidName("lr", ClusterRouter), Name: ClusterRouter, Ports: crPorts,
		StaticRoutes: crRoutes, ExternalIDs: harnessIDs()})
	return t.rows
}
