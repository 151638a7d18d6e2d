// Package cluster is the ovn-egressip local cluster: a real etcd + kube-apiserver, real OVN (NB/SB, northd, one
// ovn-controller on the OVS userspace datapath), nodes, pods and an external host as network namespaces. It is what
// `make cluster-up`/`make cluster-down` run (through test/cluster/cmd/clusterctl) and what e2e tests call.
// The layout is documented in docs/local-cluster.md; the address plan is in layout.go.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/model"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/ovn-egressip/ovn-egressip/test/apiserver"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

// Cluster is a running local cluster.
type Cluster struct {
	p     paths
	st    State
	nodes []NodeAddrs
	cs    *kubernetes.Clientset

	nbMu sync.Mutex
	nb   *nbConn
	// zoneNB are the connections to the zones' NB databases (interconnect layout), by node.
	zoneNB map[string]*nbConn
}

// Up brings the cluster described by cfg up and returns it. It is idempotent: when StateDir already holds a running
// cluster with the same nodes and gateway mode, Up returns it unchanged; a different or broken one is taken down
// first. On failure everything Up started is stopped again (logs are kept in StateDir/log) and the error is one line
// naming the cause.
func Up(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errNotRoot
	}
	p := paths{dir: cfg.StateDir}
	if st, err := readState(p); err == nil {
		// A cluster made before ovnkube's identities existed has no access/ directory: it is recreated.
		if st.Nodes == cfg.Nodes && st.GatewayMode == cfg.GatewayMode && st.IPFamily == cfg.IPFamily && st.nbLayout() == cfg.NB &&
			st.Kubelets == cfg.Kubelets && st.layout() == cfg.Layout && healthy(p, st) && hasAccess(p) {
			cfg.Logf("cluster already up (%d nodes, %s gateway mode, %s, %s NB) in %s", st.Nodes, st.GatewayMode, st.IPFamily, st.nbLayout(), p.dir)
			return Open(cfg.StateDir)
		}
		cfg.Logf("recreating the cluster in %s (was %d nodes, %s gateway mode, %s, %s NB, healthy=%v, ovnkube identities=%v)", p.dir, st.Nodes,
			st.GatewayMode, st.IPFamily, st.nbLayout(), healthy(p, st), hasAccess(p))
	}
	if err := Down(ctx, cfg.StateDir); err != nil {
		return nil, fmt.Errorf("cleaning up before bring-up: %w", err)
	}
	c, err := up(ctx, cfg, p)
	if err != nil {
		return nil, errors.Join(err, cleanupAfterFailure(p))
	}
	return c, nil
}

func cleanupAfterFailure(p paths) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := teardown(ctx, p, true); err != nil {
		return fmt.Errorf("clean-up after the failure: %w", err)
	}
	return nil
}

func up(ctx context.Context, cfg Config, p paths) (*Cluster, error) {
	t0 := time.Now()
	logf := func(format string, args ...any) {
		cfg.Logf("[%5dms] "+format, append([]any{time.Since(t0).Milliseconds()}, args...)...)
	}
	if err := preflight(); err != nil {
		return nil, err
	}
	t := ovsTools()
	logf("Open vSwitch: %s, %s", ovsVersion(t), t.Origin)
	root := cfg.RepoRoot
	if root == "" {
		r, err := apiserver.RepoRoot()
		if err != nil {
			return nil, err
		}
		root = r
	}
	bins, err := apiserver.ResolveBinaries(root)
	if err != nil {
		return nil, err
	}
	images := cfg.Images
	if images == "" {
		images = filepath.Join(root, "_output", "images")
	}
	if cfg.Kubelets {
		if err := kubeletPreflight(bins.APIServer, images); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{p.run(), p.db(), p.log(), p.bin(), p.etcdData()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// The helper (clusterctl: agent + echo server daemons) is needed only late; build it meanwhile.
	helper := cfg.Helper
	helperc := make(chan error, 1)
	if helper == "" {
		helper = filepath.Join(root, "_output", "bin", "clusterctl")
		go func() {
			_, err := run(ctx, "go", "-C", root, "build", "-o", helper, "./test/cluster/cmd/clusterctl")
			helperc <- err
		}()
	} else {
		helperc <- nil
	}
	var helperErr error
	var helperOnce sync.Once
	waitHelper := func() error {
		helperOnce.Do(func() { helperErr = <-helperc })
		if helperErr != nil {
			return fmt.Errorf("build clusterctl: %w", helperErr)
		}
		return nil
	}
	// Never leave the build running; its error is waitHelper's to report, on the path that needs the helper.
	defer helperOnce.Do(func() { helperErr = <-helperc })
	k, err := generatePKI(p.pki())
	if err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	nodes := make([]NodeAddrs, cfg.Nodes)
	for i := range nodes {
		if nodes[i], err = AddrsForFamily(i+1, cfg.IPFamily); err != nil {
			return nil, err
		}
	}
	fams := Families(cfg.IPFamily)
	apiIP := plans[fams[0]].apiServer
	st := State{
		Nodes: cfg.Nodes, GatewayMode: cfg.GatewayMode, IPFamily: cfg.IPFamily, NB: cfg.NB, Kubeconfig: p.kubeconfig(),
		NBAddress: p.nbAddress(cfg.NB), SBAddress: "unix:" + p.sbSock(), OVSDB: "unix:" + p.ovsSock(),
		APIServer: "https://" + netip.AddrPortFrom(apiIP, APIServerPort).String(), Kubectl: bins.Kubectl,
		Kubelets: cfg.Kubelets,
	}
	if cfg.Layout == LayoutInterconnect {
		// no cluster-wide NB or SB: each zone has its own (ZoneNBAddress)
		st.Layout, st.NBAddress, st.SBAddress = cfg.Layout, "", ""
	}

	// The root namespace's two ports come first: kube-apiserver binds its address on oeip-api.
	rootLinks := rootVeths(fams, cfg.Layout)
	if err := plumb(ctx, p, rootLinks, false); err != nil {
		return nil, fmt.Errorf("root namespace ports: %w", err)
	}
	logf("root namespace ports %s (%v) and %s (%v) created", apiLink, rootLinks[0].CIDRs, hostLink, rootLinks[1].CIDRs)

	// Control plane and OVN come up side by side; the first failure cancels the other.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return upControlPlane(gctx, p, k, bins, root, helper, waitHelper, nodes, &st, apiIP, logf)
	})
	g.Go(func() error {
		return upOVN(gctx, p, cfg.GatewayMode, cfg.NB, cfg.Layout, helper, waitHelper, nodes, rootLinks, fams, cfg.Kubelets, logf)
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if cfg.Kubelets {
		cs, err := newClient(p.kubeconfig())
		if err != nil {
			return nil, err
		}
		if err := upKubelets(ctx, p, k, bins.APIServer, helper, images, st.APIServer, cs, nodes, logf); err != nil {
			return nil, err
		}
	}
	if err := writeState(p, st); err != nil {
		return nil, err
	}
	if cfg.Layout == LayoutInterconnect {
		logf("cluster up: %d nodes, %s gateway mode, %s, %s layout (one zone per node, NB of zone <node> unix:%s), KUBECONFIG=%s",
			cfg.Nodes, cfg.GatewayMode, cfg.IPFamily, cfg.Layout, p.zoneNBSock("<node>"), st.Kubeconfig)
	} else {
		logf("cluster up: %d nodes, %s gateway mode, %s, %s NB, KUBECONFIG=%s, NB %s", cfg.Nodes, cfg.GatewayMode, cfg.IPFamily,
			cfg.NB, st.Kubeconfig, st.NBAddress)
	}
	return Open(cfg.StateDir)
}

func upControlPlane(ctx context.Context, p paths, k pki, bins apiserver.Binaries, root, helper string,
	waitHelper func() error, nodes []NodeAddrs, st *State, apiIP netip.Addr, logf func(string, ...any)) error {
	etcdURL, err := startEtcd(p, bins.Etcd)
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	st.EtcdURL = etcdURL
	if err := startAPIServer(p, k, bins.APIServer, etcdURL, apiIP, st.Kubelets); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := waitAPIServerReady(rctx, p, k, st.APIServer); err != nil {
		return err
	}
	logf("kube-apiserver ready on %s", st.APIServer)
	kc, err := k.kubeconfig(st.APIServer)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.kubeconfig(), kc, 0o600); err != nil {
		return err
	}
	crds := filepath.Join(root, "dist", "crds")
	restCfg, err := clientcmd.BuildConfigFromFlags("", p.kubeconfig())
	if err != nil {
		return err
	}
	// controller-runtime's envtest installs the CRDs and waits until they are served
	if _, err := envtest.InstallCRDs(restCfg, envtest.CRDInstallOptions{Paths: []string{crds},
		ErrorIfPathMissing: true, PollInterval: 20 * time.Millisecond, MaxTime: 30 * time.Second}); err != nil {
		return fmt.Errorf("install CRDs from %s: %w", crds, err)
	}
	cs, err := newClient(p.kubeconfig())
	if err != nil {
		return err
	}
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		if err := ensureServiceAccount(ctx, cs, ns); err != nil {
			return fmt.Errorf("service account in %s: %w", ns, err)
		}
	}
	if err := registerNodes(ctx, cs, nodes, st.Kubelets, st.layout()); err != nil {
		return err
	}
	if err := installAccess(ctx, p, bins.Kubectl, root, st.APIServer, cs, nodes); err != nil {
		return fmt.Errorf("ovnkube's ServiceAccounts, roles and admission policy: %w", err)
	}
	if err := waitHelper(); err != nil {
		return err
	}
	agentArgs := []string{helper, "agent", "--kubeconfig", p.kubeconfig(), "--state", p.dir}
	if st.Kubelets {
		agentArgs = append(agentArgs, "--no-heartbeat")
	}
	if _, err := startDaemon(p.pidfile("agent"), filepath.Join(p.log(), "agent.log"), nil, agentArgs...); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	logf("CRDs from %s established, %d nodes registered, ovnkube's access from dist/manifests applied (node-bound tokens, policy %s enforced), agent (heartbeat, service accounts, tokens) started",
		crds, len(nodes), nodeWritesPolicy)
	return nil
}

func upOVN(ctx context.Context, p paths, mode gwmode.Mode, nbLayout, layout, helper string, waitHelper func() error, nodes []NodeAddrs, rootLinks []veth,
	fams []int, kubelets bool, logf func(string, ...any)) error {
	if layout == LayoutInterconnect {
		if err := upInterconnectOVN(ctx, p, mode, nodes, fams, kubelets, logf); err != nil {
			return err
		}
	} else {
		if err := startOVNCentral(ctx, p, nbLayout); err != nil {
			return fmt.Errorf("OVN central: %w", err)
		}
		rows := nbRows(layout, nodes, NodeAddrs{}, mode, kubelets, plans[fams[0]].apiServer.String())
		if err := createRowsAt(ctx, p.nbAddress(nbLayout), rows); err != nil {
			return fmt.Errorf("NB topology: %w", err)
		}
		logf("NB/SB/northd up, NB topology written (%s gateway mode)", mode)
		if err := startOVS(ctx, p); err != nil {
			return fmt.Errorf("OVS/ovn-controller: %w", err)
		}
		logf("ovs-vswitchd (userspace datapath) and ovn-controller up")
	}
	vs := append(nodeVeths(nodes, layout), extVeth(fams))
	if err := plumb(ctx, p, vs, true); err != nil {
		return fmt.Errorf("node namespaces: %w", err)
	}
	if err := attachPorts(ctx, p, rootLinks); err != nil {
		return err
	}
	logf("%d node namespaces and the external host plumbed", len(nodes))
	var jobs []func(context.Context) error
	for _, n := range nodes {
		jobs = append(jobs, func(ctx context.Context) error {
			script := nodeHostScript(n, mode, fams)
			if kubelets {
				script += nodeServiceDNAT(plans[fams[0]].apiServer.String())
			}
			if err := inNetns(ctx, NodeNetnsName(n.Name), script); err != nil {
				return fmt.Errorf("node %s host setup: %w", n.Name, err)
			}
			return nil
		})
	}
	if err := parallel(ctx, jobs); err != nil {
		return err
	}
	if err := waitHelper(); err != nil {
		return err
	}
	if _, err := startDaemon(p.pidfile("echo"), filepath.Join(p.log(), "echo.log"), nil,
		"ip", "netns", "exec", ExternalNetns, helper, "echo-server", "--port", strconv.Itoa(EchoPort)); err != nil {
		return fmt.Errorf("echo server: %w", err)
	}
	logf("node hosts configured, echo server started")
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if layout == LayoutInterconnect {
		jobs = nil
		for _, n := range nodes {
			ports := []string{MgmtPort(n.Name)}
			if n.Index == 1 {
				ports = append(ports, MgmtPort(hostPortSwitch))
			}
			jobs = append(jobs, func(ctx context.Context) error {
				if err := waitPortsUpAt(ctx, "unix:"+p.zoneNBSock(n.Name), ports...); err != nil {
					return fmt.Errorf("zone %s: %w", n.Name, err)
				}
				return nil
			})
		}
		if err := parallel(wctx, jobs); err != nil {
			return err
		}
	} else {
		ports := []string{MgmtPort(hostPortSwitch)}
		for _, n := range nodes {
			ports = append(ports, MgmtPort(n.Name))
		}
		if err := waitPortsUpAt(wctx, p.nbAddress(nbLayout), ports...); err != nil {
			return err
		}
	}
	logf("node namespaces, management ports and external host up; echo server on %v port %d", extVeth(fams).CIDRs, EchoPort)
	return nil
}

// nbRows are the NB rows bring-up writes into one NB: in the centralized layout the one NB's (every node; zone is
// ignored), in the interconnect layout zone's own NB's (buildZoneTopology). In the kubelet mode they carry the
// kubernetes Service's load balancer on the node switches of that NB (withServiceLB), so that a pod reaches the
// apiserver in-cluster in either layout.
func nbRows(layout string, nodes []NodeAddrs, zone NodeAddrs, mode gwmode.Mode, kubelets bool, apiserver string) []model.Model {
	var rows []model.Model
	if layout == LayoutInterconnect {
		rows = buildZoneTopology(nodes, zone, mode)
	} else {
		rows = buildTopology(nodes, mode)
	}
	if kubelets {
		rows = withServiceLB(rows, nodes, apiserver)
	}
	return rows
}

// rootVeths are the root namespace's ports: oeip-api on br-ex (APIServerIP, APIServerIP6) and oeip-host into OVN
// (HostPortIP, HostPortIP6), with the routes to the cluster CIDR of each family.
func rootVeths(fams []int, layout string) []veth {
	api := veth{Host: apiLink, MAC: macFor(0x02, 0x00, plans[fams[0]].apiServer), Bridge: BrEx}
	// the interconnect layout has the root namespace's port in node1's zone
	host := veth{Host: hostLink, MAC: ovnMAC(plans[fams[0]].hostIP), Bridge: brIntOf(layout, NodeName(1)),
		OVSNode: ovsNodeOf(layout, NodeName(1)), IfaceID: MgmtPort(hostPortSwitch)}
	for _, f := range fams {
		pl := plans[f]
		api.CIDRs = append(api.CIDRs, netip.PrefixFrom(pl.apiServer, pl.external.Bits()).String())
		host.CIDRs = append(host.CIDRs, netip.PrefixFrom(pl.hostIP, pl.hostSubnet.Bits()).String())
		host.Routes = append(host.Routes, pl.cluster.String()+" via "+pl.hostRouterIP.String()+" dev "+hostLink)
	}
	return []veth{api, host}
}

func nodeVeths(nodes []NodeAddrs, layout string) []veth {
	var vs []veth
	for _, n := range nodes {
		ns := NodeNetnsName(n.Name)
		mp := veth{Host: mgmtLink(n.Index), Netns: ns, Ifname: MgmtPort(n.Name), MAC: n.MgmtMAC, Bridge: brIntOf(layout, n.Name),
			OVSNode: ovsNodeOf(layout, n.Name), IfaceID: MgmtPort(n.Name)}
		eth := veth{Host: ethLink(n.Index), Netns: ns, Ifname: "eth0", MAC: n.NodeMAC, Bridge: BrEx}
		for _, f := range n.Families {
			pl := plans[f.Family]
			mp.CIDRs = append(mp.CIDRs, netip.PrefixFrom(f.MgmtIP, f.Subnet.Bits()).String())
			mp.Routes = append(mp.Routes, pl.cluster.String()+" via "+f.RouterIP.String()+" dev "+MgmtPort(n.Name))
			eth.CIDRs = append(eth.CIDRs, netip.PrefixFrom(f.NodeIP, pl.external.Bits()).String())
			eth.Routes = append(eth.Routes, pl.defaultRoute+" via "+pl.extHost.String()+" dev eth0")
		}
		vs = append(vs, mp, eth)
	}
	return vs
}

func extVeth(fams []int) veth {
	v := veth{Host: extLink, Netns: ExternalNetns, Ifname: "eth0", MAC: macFor(0x02, 0x00, plans[fams[0]].extHost), Bridge: BrEx}
	for _, f := range fams {
		v.CIDRs = append(v.CIDRs, netip.PrefixFrom(plans[f].extHost, plans[f].external.Bits()).String())
	}
	return v
}

// nodeHostScript is the node host's configuration (gateway-modes recipe): strict rp_filter in both modes (the
// cluster CIDR route on the management port keeps the return path symmetric); in local mode IP forwarding and the
// node's MASQUERADE of pod egress out of eth0, per family (iptables, ip6tables). The node daemon's egress IP SNAT
// chain must be jumped to from POSTROUTING before this rule (insert it at the top).
func nodeHostScript(n NodeAddrs, mode gwmode.Mode, fams []int) string {
	mp := MgmtPort(n.Name)
	s := fmt.Sprintf("sysctl -qw net.ipv4.conf.all.rp_filter=1 net.ipv4.conf.default.rp_filter=1 "+
		"net.ipv4.conf.eth0.rp_filter=1 net.ipv4.conf.%s.rp_filter=1\n", mp)
	if mode == gwmode.Local {
		for _, f := range fams {
			if f == 4 {
				s += "sysctl -qw net.ipv4.ip_forward=1\n"
				s += fmt.Sprintf("iptables -t nat -A POSTROUTING -s %s -o eth0 -m comment --comment %s -j MASQUERADE\n",
					ClusterCIDR, HarnessKey)
			} else {
				s += "sysctl -qw net.ipv6.conf.all.forwarding=1\n"
				s += fmt.Sprintf("ip6tables -t nat -A POSTROUTING -s %s -o eth0 -m comment --comment %s -j MASQUERADE\n",
					ClusterCIDR6, HarnessKey)
			}
		}
	}
	return s
}

// preflight checks the tools and that no other OVS userspace data plane runs on this machine.
func preflight() error {
	if err := checkOVSTools(ovsTools()); err != nil {
		return err
	}
	// OVN's programs, and Debian's ovsdb-tool, ovsdb-server and ovs-appctl for its NB and SB databases
	for _, tool := range []string{"ovsdb-tool", "ovsdb-server", "ovs-appctl",
		"ovn-northd", "ovn-controller", "ovn-appctl", "ip", "ethtool", "arping", "iptables", "ip6tables", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: run make install-deps", tool)
		}
	}
	if err := removeOrphanTaps(); err != nil {
		return err
	}
	taps, err := interconnectTaps()
	if err != nil {
		return err
	}
	for _, l := range append([]string{BrInt, BrEx, "ovs-netdev"}, taps...) {
		if linkExists(l) {
			return fmt.Errorf("interface %s exists: another OVS userspace data plane runs on this machine (only one can); stop it first", l)
		}
	}
	ns, err := ourNetns()
	if err != nil {
		return err
	}
	if len(ns) > 0 {
		return fmt.Errorf("network namespaces %s are left over from another cluster: run make cluster-down with its CLUSTER_STATE", strings.Join(ns, " "))
	}
	return nil
}

// removeOrphanTaps deletes the persistent tap devices of the userspace datapath (br-int, br-ex, ovs-netdev) when
// no ovs-vswitchd runs on this machine: an ovs-vswitchd that crashed (or was SIGKILLed) leaves them behind, and
// they would make every later cluster refuse to start.
func removeOrphanTaps() error {
	if processRunning("ovs-vswitchd") {
		return nil
	}
	taps, err := interconnectTaps()
	if err != nil {
		return err
	}
	for _, l := range append([]string{BrInt, BrEx, "ovs-netdev"}, taps...) {
		if !linkExists(l) {
			continue
		}
		if _, err := run(context.Background(), "ip", "link", "del", l); err != nil && linkExists(l) {
			return fmt.Errorf("interface %s is left over from an ovs-vswitchd that is gone, and cannot be removed: %w", l, err)
		}
	}
	return nil
}

// daemons are the pidfile names of the long-running processes, in stop order.
var daemons = []string{"agent", "echo", "ovn-controller", "ovn-northd", "ovs-vswitchd", "ovsdb-server", "ovnnb_db",
	"ovnsb_db", "kube-apiserver", "etcd"}

// interconnectDaemons are the machine-wide daemons of the interconnect layout (the zones' are zoneDaemons).
var interconnectDaemons = []string{"agent", "echo", "ovs-vswitchd", "ovsdb-server", "kube-apiserver", "etcd"}

// healthy reports whether every daemon of the cluster in p (state st) runs.
func healthy(p paths, st State) bool {
	ds := daemons
	if st.layout() == LayoutInterconnect {
		ds = slices.Clone(interconnectDaemons)
		for i := 1; i <= st.Nodes; i++ {
			for _, d := range zoneDaemons {
				ds = append(ds, zonePidName(NodeName(i), d))
			}
		}
	}
	if st.nbLayout() == NBRaft {
		for i := 1; i < NBRaftMembers; i++ {
			ds = append(slices.Clone(ds), nbMemberName(i))
		}
	}
	if st.Kubelets {
		ds = append(slices.Clone(ds), kubeletDaemons(st.Nodes)...)
	}
	for _, d := range ds {
		pid, err := readPid(p.pidfile(d))
		if err != nil || !alive(pid) {
			return false
		}
	}
	return true
}

// Open attaches to the cluster running in stateDir.
func Open(stateDir string) (*Cluster, error) {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, err
	}
	p := paths{dir: abs}
	st, err := readState(p)
	if err != nil {
		return nil, fmt.Errorf("no cluster in %s (%w): run make cluster-up", abs, err)
	}
	c := &Cluster{p: p, st: st}
	for i := 1; i <= st.Nodes; i++ {
		n, err := AddrsForFamily(i, st.IPFamily)
		if err != nil {
			return nil, fmt.Errorf("cluster in %s: %w", abs, err)
		}
		c.nodes = append(c.nodes, n)
	}
	if c.cs, err = newClient(st.Kubeconfig); err != nil {
		return nil, err
	}
	return c, nil
}

// Close releases the Cluster's connections; the cluster keeps running.
func (c *Cluster) Close() {
	c.nbMu.Lock()
	defer c.nbMu.Unlock()
	if c.nb != nil {
		c.nb.close()
		c.nb = nil
	}
	for node, nb := range c.zoneNB {
		nb.close()
		delete(c.zoneNB, node)
	}
}

// Down stops the cluster in stateDir and removes everything it made: processes (by pidfile), every process inside
// its network namespaces, the namespaces, the root-namespace veths, the OVS bridges, and its files in stateDir.
// It is idempotent, and does nothing when no cluster was brought up from stateDir.
func Down(ctx context.Context, stateDir string) error {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		return err
	}
	return teardown(ctx, paths{dir: abs}, false)
}

func teardown(ctx context.Context, p paths, keepLogs bool) error {
	if _, err := os.Stat(p.run()); err != nil {
		return nil // no cluster was brought up from this state directory: touch nothing
	}
	// The kubelet mode's processes, containers, mounts and sandboxes first (nothing when it did not run).
	errs := stopKubelets(ctx, p)
	var pids []int
	// kube-apiserver first: it shuts down in about a second while etcd runs, but hangs if etcd goes first.
	for _, d := range []string{"agent", "echo", "kube-apiserver"} {
		pids = append(pids, signalPidfile(p.pidfile(d), syscall.SIGTERM))
	}
	nss, err := ourNetns()
	if err != nil {
		errs = append(errs, err)
	}
	for _, ns := range nss {
		if err := deleteNetns(ctx, ns); err != nil {
			errs = append(errs, err)
		}
	}
	links, err := ourLinks()
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range links {
		if _, err := run(ctx, "ip", "link", "del", l); err != nil && linkExists(l) {
			errs = append(errs, err)
		}
	}
	ovnPids, err := stopOVN(ctx, p)
	if err != nil {
		errs = append(errs, err)
	}
	pids = append(pids, ovnPids...)
	if err := waitGone(pids, 15*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := waitGone([]int{signalPidfile(p.pidfile("etcd"), syscall.SIGTERM)}, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	remove := []string{p.run(), p.db(), p.pki(), p.bin(), p.etcdData(), p.kubeconfig(), p.access(), p.stateFile()}
	if !keepLogs {
		remove = append(remove, p.log())
	}
	for _, f := range remove {
		if err := os.RemoveAll(f); err != nil {
			errs = append(errs, err)
		}
	}
	if !keepLogs {
		_ = os.Remove(p.dir) // only if empty: never remove what we did not make
	}
	return errors.Join(errs...)
}

// Kubeconfig is the path of the admin kubeconfig ($STATE/kubeconfig; server https://172.18.0.1:6443, reachable from
// the root namespace and from every node namespace).
func (c *Cluster) Kubeconfig() string { return c.st.Kubeconfig }

// Kubectl is the path of kubectl v1.37.2.
func (c *Cluster) Kubectl() string { return c.st.Kubectl }

// RESTConfig is an admin client config for the apiserver.
func (c *Cluster) RESTConfig() (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", c.st.Kubeconfig)
}

// Client is an admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.cs }

// NBAddress is the NB database address for ovnkube --nb-address ("unix:$STATE/run/ovnnb_db.sock") in the centralized
// layout; "" in the interconnect layout, which has no cluster-wide NB (ZoneNBAddress is each node's zone's).
func (c *Cluster) NBAddress() string { return c.st.NBAddress }

// SBAddress is the SB database address ("" in the interconnect layout: ZoneSBAddress).
func (c *Cluster) SBAddress() string { return c.st.SBAddress }

// NBTCPAddress is the NB database's TCP address (tcp:172.18.0.1:6641), reachable from the host and every node.
func (c *Cluster) NBTCPAddress() string { return fmt.Sprintf("tcp:%s:%d", APIServerIP, NBTCPPort) }

// CACert is the PEM of the cluster's CA (it signed the API server's serving certificate).
func (c *Cluster) CACert() ([]byte, error) { return os.ReadFile(pki{dir: c.p.pki()}.path("ca.crt")) }

// GatewayMode is the cluster's gateway mode.
func (c *Cluster) GatewayMode() gwmode.Mode { return c.st.GatewayMode }

// StateDir is the cluster's state directory.
func (c *Cluster) StateDir() string { return c.p.dir }

// Nodes returns the nodes' addresses, node1 first.
func (c *Cluster) Nodes() []NodeAddrs { return append([]NodeAddrs(nil), c.nodes...) }

// Node returns the addresses of the named node.
func (c *Cluster) Node(name string) (NodeAddrs, error) {
	for _, n := range c.nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return NodeAddrs{}, fmt.Errorf("no node %q in the cluster", name)
}

// NodeNetns returns the network namespace of a node (for `ip netns exec NAME ovnkube --init-node NODE ...`; its path
// is /run/netns/NAME). It holds the management port k8s-<node> and eth0 on the external network.
func (c *Cluster) NodeNetns(node string) (string, error) {
	if _, err := c.Node(node); err != nil {
		return "", err
	}
	return NodeNetnsName(node), nil
}

// EgressSource is the source address the echo server sees for a pod of node when no egress IP serves it, in the
// cluster's primary family: the GR's external IP in shared gateway mode, the node IP in local gateway mode.
func (c *Cluster) EgressSource(node string) (netip.Addr, error) {
	return c.EgressSourceFamily(node, Families(c.st.IPFamily)[0])
}

// EgressSourceFamily is EgressSource for family 4 or 6.
func (c *Cluster) EgressSourceFamily(node string, family int) (netip.Addr, error) {
	n, err := c.Node(node)
	if err != nil {
		return netip.Addr{}, err
	}
	f, ok := n.Family(family)
	if !ok {
		return netip.Addr{}, fmt.Errorf("the cluster (%s) has no IPv%d", c.st.IPFamily, family)
	}
	if c.st.GatewayMode == gwmode.Local {
		return f.NodeIP, nil
	}
	return f.GatewayIP, nil
}

// IPFamily is FamilyIPv4, FamilyIPv6 or FamilyDual.
func (c *Cluster) IPFamily() string { return c.st.IPFamily }

// Families are the address families of the cluster (4, 6), primary first.
func (c *Cluster) Families() []int { return Families(c.st.IPFamily) }

// SetNodeReady sets the node's Ready condition; the heartbeat keeps refreshing it with the status set here.
func (c *Cluster) SetNodeReady(ctx context.Context, node string, ready bool) error {
	return setNodeReady(ctx, c.cs, node, ready)
}

// nbConnFor returns the connection to the NB holding node's switch: the NB (centralized layout) or node's zone NB.
func (c *Cluster) nbConnFor(ctx context.Context, node string) (*nbConn, error) {
	if c.st.layout() != LayoutInterconnect {
		return c.nbConn(ctx)
	}
	c.nbMu.Lock()
	defer c.nbMu.Unlock()
	if nb := c.zoneNB[node]; nb != nil && nb.lost.Load() {
		nb.close()
		delete(c.zoneNB, node)
	}
	if nb := c.zoneNB[node]; nb != nil {
		return nb, nil
	}
	nb, err := dialNB(ctx, c.ZoneNBAddress(node))
	if err != nil {
		return nil, err
	}
	if c.zoneNB == nil {
		c.zoneNB = map[string]*nbConn{}
	}
	c.zoneNB[node] = nb
	return nb, nil
}

// nbConn returns the (lazily dialled) NB connection, dialled again when it was lost (see dialNB).
func (c *Cluster) nbConn(ctx context.Context) (*nbConn, error) {
	c.nbMu.Lock()
	defer c.nbMu.Unlock()
	if c.nb != nil && c.nb.lost.Load() {
		c.nb.close()
		c.nb = nil
	}
	if c.nb == nil {
		nb, err := dialNB(ctx, c.st.NBAddress)
		if err != nil {
			return nil, err
		}
		c.nb = nb
	}
	return c.nb, nil
}

// KeepLogs copies the log directory logDir to keep (replacing what is there) for a look after the test, and says so
// in t's log.
func KeepLogs(t testing.TB, logDir, keep string) {
	_ = os.RemoveAll(keep)
	if out, err := exec.Command("cp", "-a", logDir, keep).CombinedOutput(); err == nil {
		t.Logf("logs kept in %s", keep)
	} else {
		t.Logf("could not keep logs: %v %s", err, out)
	}
}

// CloseAndDown closes c and takes the cluster of state directory dir down (2 minutes at most); t fails when that
// fails.
func (c *Cluster) CloseAndDown(t testing.TB, dir string) {
	c.Close()
	dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer dcancel()
	if err := Down(dctx, dir); err != nil {
		t.Errorf("cluster down: %v", err)
	}
}
