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
// route of br-tun), takes its MAC (the remote chassis' br-tun's, fixed by other_config:hwaddr) from its neighbour
// cache, where the harness sets every other
// endpoint statically (tnl/neigh/set: OVS would ARP, but drops the packet that makes it ARP), and sends the
// encapsulated packet out of tun0; the receiving br-tun's NORMAL flow hands it to its local port, where the datapath
// decapsulates it (tnl_pop). The static neighbours live in ovs-vswitchd's memory only: after a restart (its
// --monitor, after a crash) the agent's RunTunnelKeeper sets them again.

import (
	"context"
	"fmt"
	"os"
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
	return run(ctx, ovs("ovs-vsctl"), append([]string{"--db=unix:" + p.zoneOVSSock(node), "--timeout=20"}, args...)...)
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
	// The namespace's kernel answers ARP only on the interface holding the address (br-tun), never on tun0, whose
	// packets it sees too (else a remote chassis may learn tun0's MAC for the endpoint).
	if _, err := run(ctx, "ip", "netns", "exec", ChassisNetnsName(n.Name), "sysctl", "-qw",
		"net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.default.arp_ignore=1"); err != nil {
		return err
	}
	conf := filepath.Join(p.zoneDB(n.Name), "conf.db")
	if _, err := run(ctx, ovs("ovsdb-tool"), "create", conf, ovsTools().Schema); err != nil {
		return err
	}
	name := zonePidName(n.Name, "ovsdb-server")
	if _, err := runWith(ctx, zoneOVSEnv(p, n.Name), "", ovs("ovsdb-server"), conf, "--detach", "--no-chdir",
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
		"--", "add-br", BrTun, "--", "set", "bridge", BrTun, "datapath_type=netdev", "other_config:hwaddr="+tunnelMAC(n),
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
		ovs("ovs-vswitchd"), "unix:"+p.zoneOVSSock(node), "--detach", "--monitor", "--no-chdir",
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
	if err := txOff(ctx, ends); err != nil {
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
	var jobs []func(context.Context) error
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
	if err := parallel(ctx, jobs); err != nil {
		return err
	}
	jobs = nil
	for _, n := range nodes {
		jobs = append(jobs, func(ctx context.Context) error { return setZoneTunnelNeighbours(ctx, p, n.Name, nodes) })
	}
	return parallel(ctx, jobs)
}

// tunnelMAC is the MAC of node id's br-tun (other_config:hwaddr): known to every chassis, so that the tunnel
// neighbours can be set statically.
func tunnelMAC(n NodeAddrs) string { return macFor(0x02, 0x00, n.EncapIP) }

// setZoneTunnelNeighbours sets, in node's ovs-vswitchd, the tunnel neighbour of every other chassis' endpoint (its
// br-tun's MAC) and records the ovs-vswitchd pid they were set for. OVS would ARP for them itself, but it drops the
// packet that makes it ARP (the first packet to a chassis, or to each after an ovs-vswitchd restart): a TCP SYN lost
// so costs a second.
func setZoneTunnelNeighbours(ctx context.Context, p paths, node string, nodes []NodeAddrs) error {
	pid, err := readPid(p.pidfile(zonePidName(node, "ovs-vswitchd")))
	if err != nil {
		return err
	}
	for _, r := range nodes {
		if r.Name == node {
			continue
		}
		if _, err := run(ctx, ovs("ovs-appctl"), "-t", zoneVswitchdCtl(p, node), "tnl/neigh/set", BrTun, r.EncapIP.String(), tunnelMAC(r)); err != nil {
			return err
		}
	}
	return os.WriteFile(tunnelsMark(p, node), []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

// tunnelsMark records the pid of node's ovs-vswitchd whose memory holds the static tunnel neighbours.
func tunnelsMark(p paths, node string) string {
	return filepath.Join(p.zoneRun(node), "tunnels.vswitchd-pid")
}

// RunTunnelKeeper sets the static tunnel neighbours of a chassis again (they live in ovs-vswitchd's memory only)
// whenever its ovs-vswitchd was restarted by its monitor (after a crash), until ctx ends: every second it compares
// the pid in each chassis' ovs-vswitchd pidfile with the one they were set for. It does nothing in the centralized
// layout. The agent runs it.
func RunTunnelKeeper(ctx context.Context, stateDir string, logf func(string, ...any)) error {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return err
	}
	p := paths{dir: abs}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var nodes []NodeAddrs
		zones, err := zoneNodes(p)
		if err != nil {
			logf("zones: %v", err)
			continue // again on the next tick
		}
		for _, z := range zones {
			if i, err := strconv.Atoi(strings.TrimPrefix(z, "node")); err == nil {
				if n, err := AddrsFor(i); err == nil {
					nodes = append(nodes, n)
				}
			}
		}
		for _, n := range nodes {
			data, err := os.ReadFile(tunnelsMark(p, n.Name))
			if err != nil {
				continue // centralized layout, or not configured yet
			}
			configured, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				configured = 0 // unparsable: configured for no process, so configured again
			}
			pid, err := readPid(p.pidfile(zonePidName(n.Name, "ovs-vswitchd")))
			if err != nil || !alive(pid) || pid == configured {
				continue
			}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err = setZoneTunnelNeighbours(sctx, p, n.Name, nodes)
			cancel()
			if err != nil {
				logf("chassis %s: ovs-vswitchd restarted (pid %d -> %d), tunnel neighbours not set yet: %v", n.Name, configured, pid, err)
				continue // again on the next tick
			}
			logf("chassis %s: ovs-vswitchd restarted (pid %d -> %d): tunnel neighbours set again", n.Name, configured, pid)
		}
	}
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
		// As stopOVN does: the bridges go first; what is left goes with the chassis namespace, whose removal teardown
		// checks.
		_, _ = zoneVsctl(ctx, p, zone, "--timeout=5", "--if-exists", "del-br", ZoneIntegrationBridge(zone), //nolint:errcheck // best effort: teardown checks what is left
			"--", "--if-exists", "del-br", BrEx, "--", "--if-exists", "del-br", BrTun)
	}
	pids = append(pids, appctlExit(ctx, p, zonePidName(zone, "ovs-vswitchd"), ovs("ovs-appctl")))
	return append(pids, appctlExit(ctx, p, zonePidName(zone, "ovsdb-server"), ovs("ovs-appctl")))
}
