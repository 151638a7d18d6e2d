package cluster

// The interconnect layout's chassis, one Open vSwitch per node as on real nodes. Each node has its own
// Open_vSwitch database (an ovsdb-server on db/<node>/conf.db, socket run/<node>/db.sock) and its own userspace
// ovs-vswitchd, which runs in the node's chassis network namespace oeip-ovs-<node>: the userspace datapath creates
// its tap devices (ovs-netdev and one per bridge) in the namespace it runs in, so two in one namespace would clash.
// Each ovs-vswitchd has its own datapath, hence its own conntrack table: the conntrack zones its ovn-controller
// numbers from 1 never meet another chassis' (with one ovs-vswitchd for every chassis, they did). Its bridges:
//
//	br-int-<node>  the integration bridge (ovn-controller's): the management port, the pods and, in node1's chassis,
//	               the root namespace's port (the OVS ends of their veths live in the chassis namespace);
//	br-ex          the physical network (ovn-bridge-mappings physnet:br-ex, the GR's localnet port), uplinked by
//	               ext0, a veth whose other end oeip-u<index> is a port of the root namespace's br-ex (the machine's
//	               external network: the root namespace's ovs-vswitchd, NORMAL forwarding only, no chassis);
//	br-tun         the tunnel endpoint: its local port (a tap) carries the Geneve endpoint 100.89.0.<id>/16 and its
//	               uplink tun0 is a veth whose other end oeip-t<index> is a port of the kernel bridge oeip-tunnel in
//	               the root namespace (the underlay; MTU 9000 so that an encapsulated 1500-byte packet fits).
//
// OVS' userspace tunnelling looks the remote endpoint up in the chassis namespace's routing table (the connected
// route of br-tun), resolves its MAC with ARP (the remote chassis namespace's kernel answers for the address on its
// br-tun; OVS learns the reply as it passes br-tun) and sends the encapsulated packet out of tun0; the receiving
// br-tun's NORMAL flow hands it to its local port, where the datapath decapsulates it (tnl_pop). Nothing of this
// lives in ovs-vswitchd's memory only: a restarted ovs-vswitchd (its --monitor, after a crash) reads its bridges
// from its database and ARPs again.

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	// TunnelBridge is the kernel bridge in the root namespace joining the chassis' tunnel uplinks (interconnect).
	TunnelBridge = NetnsPrefix + "tunnel"
	// chassisUplink and chassisTunnelLink are the chassis namespace's ends of a node's uplink veth (a port of the
	// chassis' br-ex) and tunnel veth (a port of its br-tun).
	chassisUplink     = "ext0"
	chassisTunnelLink = "tun0"
	tunnelMTU         = 9000
)

// ChassisNetnsName is the network namespace of node's ovs-vswitchd in the interconnect layout (the OVS ends of its
// management port's, pods' and uplinks' veths are there too).
func ChassisNetnsName(node string) string { return NetnsPrefix + "ovs-" + node }

func uplinkLink(index int) string { return NetnsPrefix + "u" + strconv.Itoa(index) }
func tunnelLink(index int) string { return NetnsPrefix + "t" + strconv.Itoa(index) }

// zoneOVSSock is the socket of node's Open_vSwitch database (interconnect layout).
func (p paths) zoneOVSSock(node string) string { return filepath.Join(p.zoneRun(node), "db.sock") }

// ZoneVswitchdCtl is the control socket of node's ovs-vswitchd (interconnect layout; ovs-appctl -t).
func (c *Cluster) ZoneVswitchdCtl(node string) string { return zoneVswitchdCtl(c.p, node) }

// ZoneVswitchdPidfile is the pidfile of node's ovs-vswitchd (interconnect layout).
func (c *Cluster) ZoneVswitchdPidfile(node string) string {
	return c.p.pidfile(zonePidName(node, "ovs-vswitchd"))
}

func zoneVswitchdCtl(p paths, node string) string {
	return filepath.Join(p.run(), zonePidName(node, "ovs-vswitchd")+".ctl")
}

// zoneOVSEnv points the OVS/OVN tools at node's run directory (bridge management sockets, ovn-controller's control
// socket) and database directory.
func zoneOVSEnv(p paths, node string) []string {
	return []string{"OVS_RUNDIR=" + p.zoneRun(node), "OVN_RUNDIR=" + p.zoneRun(node), "OVS_DBDIR=" + p.zoneDB(node),
		"OVS_LOGDIR=" + p.log()}
}

// zoneVsctl runs ovs-vsctl against node's Open_vSwitch database.
func zoneVsctl(ctx context.Context, p paths, node string, args ...string) (string, error) {
	return run(ctx, "ovs-vsctl", append([]string{"--db=unix:" + p.zoneOVSSock(node), "--timeout=20"}, args...)...)
}

// vsctlOf runs ovs-vsctl against the Open_vSwitch database holding the bridges of node ("" = the root namespace's).
func vsctlOf(ctx context.Context, p paths, node string, args ...string) (string, error) {
	if node == "" {
		return vsctl(ctx, p, args...)
	}
	return zoneVsctl(ctx, p, node, args...)
}

// startChassisOVS creates n's chassis namespace, starts its Open_vSwitch database and ovs-vswitchd, and creates
// br-ex and br-tun with the chassis configuration ovn-controller reads (standard keys: one chassis per database).
func startChassisOVS(ctx context.Context, p paths, n NodeAddrs) error {
	if err := addNetns(ctx, ChassisNetnsName(n.Name)); err != nil {
		return err
	}
	conf := filepath.Join(p.zoneDB(n.Name), "conf.db")
	if _, err := run(ctx, "ovsdb-tool", "create", conf, "/usr/share/openvswitch/vswitch.ovsschema"); err != nil {
		return err
	}
	name := zonePidName(n.Name, "ovsdb-server")
	if _, err := runWith(ctx, zoneOVSEnv(p, n.Name), "", "ovsdb-server", conf, "--detach", "--no-chdir",
		"--pidfile="+p.pidfile(name), "--log-file="+filepath.Join(p.log(), n.Name+"-ovsdb-server.log"),
		"--remote=punix:"+p.zoneOVSSock(n.Name), "--unixctl="+filepath.Join(p.run(), name+".ctl")); err != nil {
		return err
	}
	if _, err := zoneVsctl(ctx, p, n.Name, "--no-wait", "init"); err != nil {
		return err
	}
	if err := startZoneVswitchd(ctx, p, n.Name); err != nil {
		return err
	}
	ch := ChassisName(n.Name)
	_, err := zoneVsctl(ctx, p, n.Name,
		"add-br", BrEx, "--", "set", "bridge", BrEx, "datapath_type=netdev",
		"--", "add-br", BrTun, "--", "set", "bridge", BrTun, "datapath_type=netdev",
		"--", "set", "open_vswitch", ".",
		"external_ids:system-id="+ch,
		"external_ids:hostname="+n.Name,
		"external_ids:ovn-remote=unix:"+p.zoneSBSock(n.Name),
		"external_ids:ovn-encap-type=geneve",
		"external_ids:ovn-encap-ip="+n.EncapIP.String(),
		"external_ids:ovn-is-interconn=true",
		"external_ids:ovn-bridge="+ZoneIntegrationBridge(n.Name),
		"external_ids:ovn-bridge-datapath-type=netdev",
		"external_ids:ovn-bridge-mappings="+PhysNet+":"+BrEx)
	return err
}

// startZoneVswitchd starts node's ovs-vswitchd inside its chassis namespace, under --monitor (a monitor process
// restarts it if it crashes, as startVswitchd's).
func startZoneVswitchd(ctx context.Context, p paths, node string) error {
	name := zonePidName(node, "ovs-vswitchd")
	_, err := runWith(ctx, zoneOVSEnv(p, node), "", "ip", "netns", "exec", ChassisNetnsName(node),
		"ovs-vswitchd", "unix:"+p.zoneOVSSock(node), "--detach", "--monitor", "--no-chdir",
		"--pidfile="+p.pidfile(name), "--log-file="+filepath.Join(p.log(), node+"-ovs-vswitchd.log"),
		"--unixctl="+zoneVswitchdCtl(p, node))
	return err
}

// plumbChassisLinks creates the kernel bridge oeip-tunnel and, per node, the uplink veth (oeip-u<index> on the root
// namespace's br-ex, ext0 on the chassis' br-ex) and the tunnel veth (oeip-t<index> on oeip-tunnel, tun0 on the
// chassis' br-tun), and puts the Geneve endpoint on br-tun's local port.
func plumbChassisLinks(ctx context.Context, p paths, nodes []NodeAddrs) error {
	var root strings.Builder
	// nf_call_*: the underlay's packets are bridged without the root namespace's netfilter (br_netfilter may be on).
	fmt.Fprintf(&root, "link add %s type bridge nf_call_iptables 0 nf_call_ip6tables 0 nf_call_arptables 0\n", TunnelBridge)
	var ends []string
	for _, n := range nodes {
		u, t := uplinkLink(n.Index), tunnelLink(n.Index)
		fmt.Fprintf(&root, "link add %s type veth peer name %s_\nlink add %s mtu %d type veth peer name %s_ mtu %d\n",
			u, u, t, tunnelMTU, t, tunnelMTU)
		ends = append(ends, u, u+"_", t, t+"_")
	}
	if err := runBatch(ctx, "", root.String()); err != nil {
		return err
	}
	var jobs []func(context.Context) error
	for _, l := range ends { // no TX checksum offload: the userspace datapath forwards what it reads as it is
		jobs = append(jobs, func(ctx context.Context) error {
			_, err := run(ctx, "ethtool", "-K", l, "tx", "off")
			return err
		})
	}
	if err := parallel(ctx, jobs); err != nil {
		return err
	}
	root.Reset()
	for _, n := range nodes {
		u, t, ns := uplinkLink(n.Index), tunnelLink(n.Index), ChassisNetnsName(n.Name)
		fmt.Fprintf(&root, "link set %s_ netns %s\nlink set %s_ netns %s\nlink set %s up\nlink set %s master %s up\n",
			u, ns, t, ns, u, t, TunnelBridge)
	}
	fmt.Fprintf(&root, "link set %s mtu %d up\n", TunnelBridge, tunnelMTU)
	if err := runBatch(ctx, "", root.String()); err != nil {
		return err
	}
	rootArgs := []string{}
	jobs = nil
	for _, n := range nodes {
		rootArgs = append(rootArgs, "--", "add-port", BrEx, uplinkLink(n.Index))
		jobs = append(jobs, func(ctx context.Context) error {
			ns := ChassisNetnsName(n.Name)
			if err := runBatch(ctx, ns, fmt.Sprintf("link set lo up\nlink set %s_ name %s\nlink set %s up\nlink set %s_ name %s\nlink set %s up\n",
				uplinkLink(n.Index), chassisUplink, chassisUplink, tunnelLink(n.Index), chassisTunnelLink, chassisTunnelLink)); err != nil {
				return fmt.Errorf("chassis %s links: %w", n.Name, err)
			}
			if _, err := zoneVsctl(ctx, p, n.Name, "add-port", BrEx, chassisUplink, "--", "add-port", BrTun, chassisTunnelLink); err != nil {
				return fmt.Errorf("chassis %s ports: %w", n.Name, err)
			}
			// br-tun's tap exists once ovs-vsctl add-br returned (it waits for ovs-vswitchd)
			if err := runBatch(ctx, ns, fmt.Sprintf("addr add %s/%d dev %s\nlink set %s up\n", n.EncapIP, encapBits, BrTun, BrTun)); err != nil {
				return fmt.Errorf("chassis %s tunnel endpoint: %w", n.Name, err)
			}
			return nil
		})
	}
	if _, err := vsctl(ctx, p, rootArgs[1:]...); err != nil {
		return fmt.Errorf("uplinks on the root namespace's %s: %w", BrEx, err)
	}
	return parallel(ctx, jobs)
}

// encapBits is the prefix length of the tunnel endpoints' network (EncapCIDR).
const encapBits = 16

// startZoneChassis starts node's ovn-controller on its own Open_vSwitch database; it creates br-int-<node>.
func startZoneChassis(ctx context.Context, p paths, n NodeAddrs) error {
	if _, err := runWith(ctx, zoneOVSEnv(p, n.Name), "", "ovn-controller", "unix:"+p.zoneOVSSock(n.Name), "--detach", "--no-chdir",
		"--pidfile="+p.pidfile(zonePidName(n.Name, "ovn-controller")),
		"--log-file="+filepath.Join(p.log(), n.Name+"-ovn-controller.log")); err != nil {
		return err
	}
	return poll(ctx, 50*time.Millisecond, func() (bool, error) {
		_, err := zoneVsctl(ctx, p, n.Name, "br-exists", ZoneIntegrationBridge(n.Name))
		return err == nil, nil
	})
}

// stopZoneOVS stops zone's ovn-controller, deletes its bridges (while its ovs-vswitchd runs) and stops its
// ovs-vswitchd and Open_vSwitch database. It returns the pids it signalled.
func stopZoneOVS(ctx context.Context, p paths, zone string) []int {
	var pids []int
	if pid, err := readPid(p.pidfile(zonePidName(zone, "ovn-controller"))); err == nil && alive(pid) {
		ctl := filepath.Join(p.zoneRun(zone), fmt.Sprintf("ovn-controller.%d.ctl", pid))
		if _, err := run(ctx, "ovn-appctl", "-t", ctl, "exit"); err != nil {
			_ = syscall.Kill(pid, syscall.SIGTERM)
		}
		pids = append(pids, pid)
	}
	if pid, err := readPid(p.pidfile(zonePidName(zone, "ovs-vswitchd"))); err == nil && alive(pid) {
		_, _ = zoneVsctl(ctx, p, zone, "--timeout=5", "--if-exists", "del-br", ZoneIntegrationBridge(zone),
			"--", "--if-exists", "del-br", BrEx, "--", "--if-exists", "del-br", BrTun)
	}
	pids = append(pids, appctlExit(ctx, p, zonePidName(zone, "ovs-vswitchd"), "ovs-appctl"))
	return append(pids, appctlExit(ctx, p, zonePidName(zone, "ovsdb-server"), "ovs-appctl"))
}
