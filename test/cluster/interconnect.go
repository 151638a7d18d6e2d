package cluster

// The interconnect layout (Config.Layout = LayoutInterconnect): every node is its own OVN zone, as upstream
// OVN-Kubernetes runs (/work/shared/INTERCONNECT.md): per node an NB and an SB ovsdb-server and an ovn-northd
// (sockets under run/<node>/), and a chassis of its own, as on a real node: an ovn-controller on the node's own
// Open_vSwitch database and userspace ovs-vswitchd (in the chassis namespace oeip-ovs-<node>, with its own datapath
// and conntrack), integration bridge br-int-<node> (chassis.go). The zones are joined by the transit switch, whose
// remote ports send packets over Geneve between the chassis' br-tun endpoints, through the kernel bridge
// oeip-tunnel of the root namespace.

import (
	"context"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-org/libovsdb/model"
)

// OVN names and keys of the interconnect layout (upstream's).
const (
	// TransitSwitch is the logical switch joining the zones.
	TransitSwitch = "transit_switch"
	// TransitSwitchTunnelKey is the transit switch's requested-tnl-key (upstream's base key for the default network).
	TransitSwitchTunnelKey = 16711683
	// BrTun is the bridge holding the chassis' tunnel endpoints (interconnect layout).
	BrTun = "br-tun"
	// ZoneNBTCPBase: zone <node>'s NB listens on tcp:<APIServerIP>:ZoneNBTCPBase+<index> (16641 for node1).
	ZoneNBTCPBase = 16640
)

// ChassisName is the chassis name of node's zone in the interconnect layout (ovn-controller -n; it is the
// node's k8s.ovn.org/node-chassis-id and the remote transit port's requested-chassis in the other zones).
func ChassisName(node string) string { return "chassis-" + node }

// ZoneIntegrationBridge is the integration bridge of node's chassis in the interconnect layout.
func ZoneIntegrationBridge(node string) string { return "br-int-" + node }

// RouterToTransitPort and TransitToRouterPort name node's ports on the transit switch (rtots-<node> on
// ovn_cluster_router, tstor-<node> on transit_switch).
func RouterToTransitPort(node string) string { return "rtots-" + node }
func TransitToRouterPort(node string) string { return "tstor-" + node }

// zoneDaemons are the pidfile names (under run/<node>/) of one zone's daemons, in stop order: the chassis
// (ovn-controller, its ovs-vswitchd and Open_vSwitch database), then northd and the zone's NB and SB.
var zoneDaemons = []string{"ovn-controller", "ovs-vswitchd", "ovsdb-server", "ovn-northd", "ovnnb_db", "ovnsb_db"}

func zonePidName(node, daemon string) string { return node + "/" + daemon }

// brIntOf is the integration bridge a node's ports (management port, pods) are attached to.
func brIntOf(layout, node string) string {
	if layout == LayoutInterconnect {
		return ZoneIntegrationBridge(node)
	}
	return BrInt
}

// ovsNodeOf is the node whose own ovs-vswitchd holds node's integration bridge (interconnect layout), or "" for
// the root namespace's one (centralized layout).
func ovsNodeOf(layout, node string) string {
	if layout == LayoutInterconnect {
		return node
	}
	return ""
}

// startZoneCentral creates the zone's NB and SB databases and starts their ovsdb-servers (unix sockets; NB also on
// tcp ZoneNBTCPBase+index of the apiserver's address) and ovn-northd.
func startZoneCentral(ctx context.Context, p paths, n NodeAddrs, listen netip.Addr) error {
	for _, d := range []string{p.zoneRun(n.Name), p.zoneDB(n.Name)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, db := range []string{"nb", "sb"} {
		if _, err := run(ctx, "ovsdb-tool", "create", zoneDBFile(p, n.Name, db), "/usr/share/ovn/ovn-"+db+".ovsschema"); err != nil {
			return err
		}
		if _, err := run(ctx, "ovsdb-server", zoneDBServerArgs(p, n, db, listen)...); err != nil {
			return err
		}
	}
	_, err := run(ctx, "ovn-northd", zoneNorthdArgs(p, n.Name)...)
	return err
}

func zoneDBFile(p paths, node, db string) string {
	return filepath.Join(p.zoneDB(node), "ovn"+db+".db")
}

// zoneDBServerArgs are the arguments of the ovsdb-server of zone n's database db ("nb" or "sb").
func zoneDBServerArgs(p paths, n NodeAddrs, db string, listen netip.Addr) []string {
	name := zonePidName(n.Name, "ovn"+db+"_db")
	args := []string{zoneDBFile(p, n.Name, db), "--detach", "--no-chdir",
		"--pidfile=" + p.pidfile(name), "--log-file=" + filepath.Join(p.log(), n.Name+"-ovsdb-server-"+db+".log"),
		"--remote=punix:" + filepath.Join(p.zoneRun(n.Name), "ovn"+db+"_db.sock"),
		"--unixctl=" + filepath.Join(p.run(), name+".ctl")}
	if db == "nb" {
		args = append(args, "--remote=ptcp:"+strconv.Itoa(ZoneNBTCPBase+n.Index)+":"+ovsdbHost(listen))
	}
	return args
}

// zoneNorthdArgs are the arguments of zone node's ovn-northd.
func zoneNorthdArgs(p paths, node string) []string {
	name := zonePidName(node, "ovn-northd")
	return []string{"--detach", "--no-chdir", "--pidfile=" + p.pidfile(name),
		"--log-file=" + filepath.Join(p.log(), node+"-ovn-northd.log"),
		"--ovnnb-db=unix:" + p.zoneNBSock(node), "--ovnsb-db=unix:" + p.zoneSBSock(node),
		"--unixctl=" + filepath.Join(p.run(), name+".ctl")}
}

// StopZoneDatabases (interconnect layout) kills zone node's NB and SB ovsdb-servers with SIGKILL (and, with northd,
// its ovn-northd) and waits until they are gone: the zone's controller, northd and ovn-controller lose their
// connections. StartZoneDatabases starts them again.
func (c *Cluster) StopZoneDatabases(ctx context.Context, node string, northd bool) error {
	if _, err := c.zoneNode(node); err != nil {
		return err
	}
	names := []string{"ovnnb_db", "ovnsb_db"}
	if northd {
		names = append(names, "ovn-northd")
	}
	for _, d := range names {
		pidFile := c.p.pidfile(zonePidName(node, d))
		pid, err := readPid(pidFile)
		if err != nil || !alive(pid) {
			return fmt.Errorf("zone %s: %s not running (%w)", node, d, err)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if err := poll(ctx, 10*time.Millisecond, func() (bool, error) { return !alive(pid), nil }); err != nil {
			return err
		}
		_ = os.Remove(pidFile)
	}
	return nil
}

// StartZoneDatabases starts zone node's NB and SB ovsdb-servers (and, with northd, its ovn-northd) again on the same
// database files, sockets and ports, after StopZoneDatabases: the rows committed before the kill are on disk and
// come back; the clients reconnect by themselves.
func (c *Cluster) StartZoneDatabases(ctx context.Context, node string, northd bool) error {
	n, err := c.zoneNode(node)
	if err != nil {
		return err
	}
	listen := plans[c.Families()[0]].apiServer
	for _, db := range []string{"nb", "sb"} {
		if _, err := run(ctx, "ovsdb-server", zoneDBServerArgs(c.p, n, db, listen)...); err != nil {
			return fmt.Errorf("zone %s: start %s ovsdb-server: %w", node, db, err)
		}
	}
	if northd {
		if _, err := run(ctx, "ovn-northd", zoneNorthdArgs(c.p, node)...); err != nil {
			return fmt.Errorf("zone %s: start ovn-northd: %w", node, err)
		}
	}
	return nil
}

func (c *Cluster) zoneNode(node string) (NodeAddrs, error) {
	if c.st.layout() != LayoutInterconnect {
		return NodeAddrs{}, fmt.Errorf("zone databases: the cluster is in the %s layout", c.st.layout())
	}
	return c.Node(node)
}

// ovsdbHost is an address as OVSDB remotes write it (IPv6 in brackets).
func ovsdbHost(a netip.Addr) string {
	if a.Is6() {
		return "[" + a.String() + "]"
	}
	return a.String()
}

// buildZoneTopology returns the NB rows of local's zone: the centralized layout's rows for the local node only
// (ovn_cluster_router, the node switch with k8s-<node>, join, GR_<node> on the zone's chassis, ext_<node>; the
// root namespace's switch ovn-eip-host only in node1's zone) plus the interconnect rows: transit_switch with
// tstor-<local> (type router, rtots-<local> on ovn_cluster_router, the transit IPs) and one type-remote port per
// other node, and on ovn_cluster_router per other node a route of its pod subnet and of its GR join IP to its
// transit IP (zones other than node1's also route the root namespace's subnet to node1's transit IP), and the
// catch-all src-ip route of the cluster CIDR to the local GR.
func buildZoneTopology(nodes []NodeAddrs, local NodeAddrs, mode gwmode.Mode) []model.Model {
	withHost := local.Index == 1
	t := &topology{rows: buildTopologyOn([]NodeAddrs{local}, mode, ChassisName(local.Name), withHost)}
	var cr *nbdb.LogicalRouter
	for _, r := range t.rows {
		if lr, ok := r.(*nbdb.LogicalRouter); ok && lr.Name == ClusterRouter {
			cr = lr
		}
	}
	var nets []netip.Prefix
	for _, f := range local.Families {
		nets = append(nets, netip.PrefixFrom(f.TransitIP, plans[f.Family].transit.Bits()))
	}
	cr.Ports = append(cr.Ports, t.lrp(RouterToTransitPort(local.Name), local.TransitMAC, nets...))
	tsPorts := []string{t.routerTypeLSP(TransitToRouterPort(local.Name), RouterToTransitPort(local.Name),
		map[string]string{"requested-tnl-key": strconv.Itoa(local.ID)})}
	for _, r := range nodes {
		if r.Name == local.Name {
			continue
		}
		addr := r.TransitMAC
		for _, f := range r.Families {
			pl := plans[f.Family]
			addr += " " + netip.PrefixFrom(f.TransitIP, pl.transit.Bits()).String()
			sfx := ""
			if f.Family == 6 {
				sfx = "6"
			}
			cr.StaticRoutes = append(cr.StaticRoutes,
				t.route("ic_"+r.Name+"_subnet"+sfx, f.Subnet.String(), f.TransitIP.String(), nil, nil),
				t.route("ic_"+r.Name+"_gr"+sfx, netip.PrefixFrom(f.JoinIP, f.JoinIP.BitLen()).String(), f.TransitIP.String(), nil, nil))
			if r.Index == 1 && !withHost {
				cr.StaticRoutes = append(cr.StaticRoutes,
					t.route("ic_"+r.Name+"_host"+sfx, pl.hostSubnet.String(), f.TransitIP.String(), nil, nil))
			}
		}
		u := uuidName("lsp", TransitToRouterPort(r.Name))
		t.add(&nbdb.LogicalSwitchPort{UUID: u, Name: TransitToRouterPort(r.Name), Type: "remote",
			Addresses: []string{addr},
			Options: map[string]string{"requested-tnl-key": strconv.Itoa(r.ID),
				"requested-chassis": ChassisName(r.Name)},
			ExternalIDs: harnessIDs("node", r.Name)})
		tsPorts = append(tsPorts, u)
	}
	// Traffic of other zones' pods arriving from the transit switch (an egress IP this node holds) is routed to the
	// local GR by one catch-all src-ip route per cluster CIDR (upstream's; the more specific routes above and the
	// node's own src-ip route win for every other path); the reroute policies then pick the actual next hop.
	srcIP := nbdb.LogicalRouterStaticRoutePolicySrcIP
	for _, f := range local.Families {
		sfx := ""
		if f.Family == 6 {
			sfx = "6"
		}
		cr.StaticRoutes = append(cr.StaticRoutes,
			t.route("ic_cluster"+sfx, plans[f.Family].cluster.String(), f.JoinIP.String(), &srcIP, nil))
	}
	t.add(&nbdb.LogicalSwitch{UUID: uuidName("ls", TransitSwitch), Name: TransitSwitch,
		OtherConfig: map[string]string{"interconn-ts": TransitSwitch,
			"requested-tnl-key": strconv.Itoa(TransitSwitchTunnelKey)},
		ExternalIDs: harnessIDs(), Ports: tsPorts})
	return t.rows
}

// addRemoteChassis writes into local's SB one Chassis row per other node (other_config:is-remote=true, a Geneve
// Encap with its endpoint), as an interconnect zone controller does.
func addRemoteChassis(ctx context.Context, p paths, nodes []NodeAddrs, local NodeAddrs) error {
	args := []string{"--db=unix:" + p.zoneSBSock(local.Name), "--timeout=20"}
	for _, r := range nodes {
		if r.Name == local.Name {
			continue
		}
		ch := ChassisName(r.Name)
		args = append(args, "--", "chassis-add", ch, "geneve", r.EncapIP.String(),
			"--", "set", "chassis", ch, "other_config:is-remote=true", "hostname="+r.Name)
	}
	if len(args) == 2 {
		return nil
	}
	_, err := run(ctx, "ovn-sbctl", args...)
	return err
}

// bindRemotePorts binds, in local's SB, each other node's remote transit port to that node's (remote) chassis,
// once ovn-northd has created the port bindings. OVN 23.03's northd does not do it (23.09's does, from
// options:requested-chassis: "northd: support binding remote ports in ovn-northd"); without it ovn-controller
// installs no tunnel output for the port. ovn-ic does the same in an OVN-IC deployment.
func bindRemotePorts(ctx context.Context, p paths, nodes []NodeAddrs, local NodeAddrs) error {
	if len(nodes) < 2 {
		return nil
	}
	if _, err := run(ctx, "ovn-nbctl", "--db=unix:"+p.zoneNBSock(local.Name), "--timeout=20", "--wait=sb", "sync"); err != nil {
		return err
	}
	args := []string{"--db=unix:" + p.zoneSBSock(local.Name), "--timeout=20"}
	for _, r := range nodes {
		if r.Name != local.Name {
			args = append(args, "--", "lsp-bind", TransitToRouterPort(r.Name), ChassisName(r.Name))
		}
	}
	_, err := run(ctx, "ovn-sbctl", args...)
	return err
}

// upInterconnectOVN brings up the zones (databases, northd, NB topology (nbRows: with the kubernetes Service's load
// balancer in the kubelet mode), remote chassis), each node's chassis (its own Open_vSwitch database and
// ovs-vswitchd in its chassis namespace, br-ex and br-tun: chassis.go), the root namespace's ovs-vswitchd with br-ex
// (the external network), the underlay, and one ovn-controller per zone.
func upInterconnectOVN(ctx context.Context, p paths, mode gwmode.Mode, nodes []NodeAddrs, fams []int, kubelets bool,
	logf func(string, ...any)) error {
	listen := plans[fams[0]].apiServer
	jobs := []func(context.Context) error{func(ctx context.Context) error {
		if err := startVswitchd(ctx, p); err != nil {
			return fmt.Errorf("OVS of the root namespace: %w", err)
		}
		if _, err := vsctl(ctx, p, "add-br", BrEx, "--", "set", "bridge", BrEx, "datapath_type=netdev"); err != nil {
			return fmt.Errorf("OVS of the root namespace: %w", err)
		}
		return nil
	}}
	for _, n := range nodes {
		jobs = append(jobs, func(ctx context.Context) error {
			if err := startZoneCentral(ctx, p, n, listen); err != nil {
				return fmt.Errorf("zone %s NB/SB/northd: %w", n.Name, err)
			}
			if err := startChassisOVS(ctx, p, n); err != nil {
				return fmt.Errorf("chassis %s OVS: %w", n.Name, err)
			}
			if err := createRowsAt(ctx, "unix:"+p.zoneNBSock(n.Name), nbRows(LayoutInterconnect, nodes, n, mode, kubelets, listen.String())); err != nil {
				return fmt.Errorf("zone %s NB topology: %w", n.Name, err)
			}
			if err := addRemoteChassis(ctx, p, nodes, n); err != nil {
				return fmt.Errorf("zone %s remote chassis: %w", n.Name, err)
			}
			if err := bindRemotePorts(ctx, p, nodes, n); err != nil {
				return fmt.Errorf("zone %s remote transit ports: %w", n.Name, err)
			}
			return nil
		})
	}
	if err := parallel(ctx, jobs); err != nil {
		return err
	}
	logf("%d zones up (NB, SB, northd, Open_vSwitch database and ovs-vswitchd each; NB topology with transit switch, remote chassis in SB; %s gateway mode)", len(nodes), mode)
	if err := plumbChassisLinks(ctx, p, nodes); err != nil {
		return fmt.Errorf("chassis uplinks and underlay: %w", err)
	}
	jobs = nil
	for _, n := range nodes {
		jobs = append(jobs, func(ctx context.Context) error {
			if err := startZoneChassis(ctx, p, n); err != nil {
				return fmt.Errorf("zone %s ovn-controller: %w", n.Name, err)
			}
			return nil
		})
	}
	if err := parallel(ctx, jobs); err != nil {
		return err
	}
	logf("%d chassis up (ovs-vswitchd each in %s, ovn-controller, br-int-<node>; Geneve endpoints %s.. on %s over %s)",
		len(nodes), ChassisNetnsName("<node>"), nodes[0].EncapIP, BrTun, TunnelBridge)
	return nil
}

// zoneNodes lists the zones whose run directory exists under p (the nodes of an interconnect cluster, also when
// its state file is gone).
func zoneNodes(p paths) ([]string, error) {
	return dirNames(p.run(), func(e fs.DirEntry) bool { return e.IsDir() && strings.HasPrefix(e.Name(), "node") })
}

// stopZones stops every zone's chassis (stopZoneOVS), ovn-northd and NB and SB ovsdb-servers. It returns the pids it
// signalled.
func stopZones(ctx context.Context, p paths) ([]int, error) {
	zones, err := zoneNodes(p)
	if err != nil {
		return nil, err
	}
	if len(zones) == 0 {
		return nil, nil
	}
	var pids []int
	for _, z := range zones {
		pids = append(pids, stopZoneOVS(ctx, p, z)...)
	}
	for _, z := range zones {
		for _, d := range []string{"ovn-northd", "ovnnb_db", "ovnsb_db"} {
			tool := "ovs-appctl"
			if d == "ovn-northd" {
				tool = "ovn-appctl"
			}
			pids = append(pids, appctlExit(ctx, p, zonePidName(z, d), tool))
		}
	}
	return pids, nil
}

// interconnectTaps are persistent tap devices of an interconnect layout's ovs-vswitchd in the root namespace (the
// layout before each chassis had its own ovs-vswitchd in its chassis namespace, whose taps go with the namespace).
func interconnectTaps() ([]string, error) {
	out := []string{}
	if linkExists(BrTun) {
		out = append(out, BrTun)
	}
	brInts, err := dirNames("/sys/class/net", func(e fs.DirEntry) bool { return strings.HasPrefix(e.Name(), "br-int-node") })
	return append(out, brInts...), err
}

// Layout is LayoutCentralized or LayoutInterconnect.
func (c *Cluster) Layout() string { return c.st.layout() }

// ZoneNBAddress is the NB database of node's zone in the interconnect layout ("unix:$STATE/run/<node>/ovnnb_db.sock";
// also on ZoneNBTCPAddress), and NBAddress in the centralized layout (one NB holds every node).
func (c *Cluster) ZoneNBAddress(node string) string {
	if c.st.layout() != LayoutInterconnect {
		return c.st.NBAddress
	}
	return "unix:" + c.p.zoneNBSock(node)
}

// ZoneSBAddress is the SB database of node's zone (SBAddress in the centralized layout).
func (c *Cluster) ZoneSBAddress(node string) string {
	if c.st.layout() != LayoutInterconnect {
		return c.st.SBAddress
	}
	return "unix:" + c.p.zoneSBSock(node)
}

// ZoneNBTCPAddress is the TCP address of node's zone NB (interconnect layout; NBTCPAddress in the centralized one).
func (c *Cluster) ZoneNBTCPAddress(node string) string {
	n, err := c.Node(node)
	if c.st.layout() != LayoutInterconnect || err != nil {
		return c.NBTCPAddress()
	}
	return "tcp:" + ovsdbHost(plans[c.Families()[0]].apiServer) + ":" + strconv.Itoa(ZoneNBTCPBase+n.Index)
}

// ZoneChassis is the chassis hosting node's gateway router and ports: ChassisName(node) in the interconnect layout,
// Chassis in the centralized one.
func (c *Cluster) ZoneChassis(node string) string {
	if c.st.layout() != LayoutInterconnect {
		return Chassis
	}
	return ChassisName(node)
}
