package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
)

// Interface and namespace names. Root-namespace interface names are at most 14 characters (15 is the kernel's limit
// and one more is needed for the temporary peer name).
const (
	apiLink    = NetnsPrefix + "api"  // root ns end on br-ex carrying APIServerIP
	hostLink   = NetnsPrefix + "host" // root ns port into OVN carrying HostPortIP
	bridgeSide = "br"                 // suffix of the OVS side of a root-namespace veth
	extLink    = NetnsPrefix + "x"    // OVS side of the external host's eth0
	podNetnsPf = NetnsPrefix + "pod-" // pod netns: oeip-pod-<namespace>_<name>
	nodeNetnsP = NetnsPrefix + "node" // node netns: oeip-node<index> = oeip-<node name>
)

// NodeNetnsName is the network namespace of a node (ip netns exec <name> ...).
func NodeNetnsName(node string) string { return NetnsPrefix + node }

// PodNetnsName is the network namespace of a pod.
func PodNetnsName(namespace, name string) string { return podNetnsPf + namespace + "_" + name }

func mgmtLink(index int) string { return NetnsPrefix + "m" + strconv.Itoa(index) }
func ethLink(index int) string  { return NetnsPrefix + "e" + strconv.Itoa(index) }

// podLink is the root-namespace end of a pod's veth: oeip-p + 8 hex digits of a hash of namespace/name.
func podLink(namespace, name string) string {
	h := sha256.Sum256([]byte(namespace + "/" + name))
	return NetnsPrefix + "p" + hex.EncodeToString(h[:4])
}

// veth describes one veth pair: Host stays in the root namespace (attached to an OVS bridge unless Bridge is empty),
// the peer becomes Ifname in Netns ("" = root namespace, then the peer is named Host+"br").
type veth struct {
	Host  string
	Netns string
	// NetnsExists: Netns was made by someone else (a container runtime's sandbox): it is not created here.
	NetnsExists bool
	Ifname      string
	MAC         string
	CIDRs       []string // one per family; IPv6 ones are added with nodad (no tentative period)
	Bridge      string
	// OVSNode: Bridge is a bridge of that node's own ovs-vswitchd (the interconnect layout's chassis): the OVS side
	// moves into the node's chassis namespace when it is attached. "" = the root namespace's ovs-vswitchd.
	OVSNode string
	IfaceID string   // OVN logical port bound to the OVS port (external_ids:iface-id), "" for br-ex ports
	Routes  []string // "ip route add" arguments inside Netns (or the root ns)
}

func (v veth) peerTmp() string { return v.Host + "_" }

func (v veth) ovsPort() string {
	if v.Netns == "" {
		return v.Host + bridgeSide
	}
	return v.Host
}

// plumb creates the veth pairs and network namespaces in a few batched commands: one `ip -batch` in the root
// namespace, ethtool per end (TX checksum offload off on both ends, or the userspace datapath forwards TCP/UDP with
// unfilled checksums), one `ip -batch` per namespace, one ovs-vsctl for every bridge port.
func plumb(ctx context.Context, p paths, vs []veth, attach bool) error {
	var root strings.Builder
	nsSet := map[string]bool{}
	var jobs []func(context.Context) error
	for _, v := range vs {
		if v.Netns != "" && !v.NetnsExists && !nsSet[v.Netns] {
			nsSet[v.Netns] = true
			jobs = append(jobs, func(ctx context.Context) error { return addNetns(ctx, v.Netns) })
		}
		fmt.Fprintf(&root, "link add %s type veth peer name %s\n", v.Host, v.peerTmp())
	}
	if err := parallel(ctx, jobs); err != nil {
		return err
	}
	if err := runBatch(ctx, "", root.String()); err != nil {
		return err
	}
	var ends []string
	for _, v := range vs {
		ends = append(ends, v.Host, v.peerTmp())
	}
	if err := txOff(ctx, ends); err != nil {
		return err
	}
	root.Reset()
	perNS := map[string]*strings.Builder{}
	for _, v := range vs {
		if v.Netns == "" {
			// both ends stay here: the peer (renamed Host+"br") goes to OVS, Host carries the address
			fmt.Fprintf(&root, "link set %s name %s\nlink set %s up\n", v.peerTmp(), v.ovsPort(), v.ovsPort())
			fmt.Fprintf(&root, "link set %s address %s\n%slink set %s up\n", v.Host, v.MAC, addrCmds(v.CIDRs, v.Host), v.Host)
			for _, r := range v.Routes {
				fmt.Fprintf(&root, "route add %s\n", r)
			}
			continue
		}
		fmt.Fprintf(&root, "link set %s netns %s\nlink set %s up\n", v.peerTmp(), v.Netns, v.Host)
		b := perNS[v.Netns]
		if b == nil {
			b = &strings.Builder{}
			perNS[v.Netns] = b
			b.WriteString("link set lo up\n")
		}
		fmt.Fprintf(b, "link set %s name %s\nlink set %s address %s\n%slink set %s up\n",
			v.peerTmp(), v.Ifname, v.Ifname, v.MAC, addrCmds(v.CIDRs, v.Ifname), v.Ifname)
	}
	if err := runBatch(ctx, "", root.String()); err != nil {
		return err
	}
	for _, v := range vs { // routes after every interface of the namespace is up
		if v.Netns == "" {
			continue
		}
		for _, r := range v.Routes {
			fmt.Fprintf(perNS[v.Netns], "route add %s\n", r)
		}
	}
	jobs = nil
	for ns, b := range perNS {
		jobs = append(jobs, func(ctx context.Context) error { return runBatch(ctx, ns, b.String()) })
	}
	if err := parallel(ctx, jobs); err != nil {
		return err
	}
	if !attach {
		return nil
	}
	return attachPorts(ctx, p, vs)
}

// addrCmds are the `ip -batch` lines adding cidrs to dev (IPv6 with nodad: usable at once, no DAD).
func addrCmds(cidrs []string, dev string) string {
	var b strings.Builder
	for _, c := range cidrs {
		fmt.Fprintf(&b, "addr add %s dev %s", c, dev)
		if strings.Contains(c, ":") {
			b.WriteString(" nodad")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// attachPorts adds the OVS sides of vs to their bridges (with external_ids:iface-id) in one ovs-vsctl call per
// ovs-vswitchd, first moving those of a chassis' bridges into its namespace.
func attachPorts(ctx context.Context, p paths, vs []veth) error {
	var move strings.Builder
	up := map[string]*strings.Builder{}
	args := map[string][]string{}
	var order []string
	for _, v := range vs {
		if v.Bridge == "" {
			continue
		}
		if v.OVSNode != "" {
			ns := ChassisNetnsName(v.OVSNode)
			fmt.Fprintf(&move, "link set %s netns %s\n", v.ovsPort(), ns)
			if up[ns] == nil {
				up[ns] = &strings.Builder{}
			}
			fmt.Fprintf(up[ns], "link set %s up\n", v.ovsPort())
		}
		if _, ok := args[v.OVSNode]; !ok {
			order = append(order, v.OVSNode)
		}
		args[v.OVSNode] = append(args[v.OVSNode], "--", "add-port", v.Bridge, v.ovsPort())
		if v.IfaceID != "" {
			args[v.OVSNode] = append(args[v.OVSNode], "--", "set", "interface", v.ovsPort(), "external_ids:iface-id="+v.IfaceID)
		}
	}
	if err := runBatch(ctx, "", move.String()); err != nil {
		return err
	}
	for ns, b := range up {
		if err := runBatch(ctx, ns, b.String()); err != nil {
			return err
		}
	}
	for _, node := range order {
		if _, err := vsctlOf(ctx, p, node, args[node][1:]...); err != nil {
			return err
		}
	}
	return nil
}

// parallel runs jobs a few at a time (they are mostly forks of ip/ethtool/sh waiting on the kernel) and returns the
// first error.
func parallel(ctx context.Context, jobs []func(context.Context) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(6)
	for _, j := range jobs {
		g.Go(func() error { return j(gctx) })
	}
	return g.Wait()
}

func addNetns(ctx context.Context, name string) error {
	if _, err := os.Stat("/run/netns/" + name); err == nil {
		return fmt.Errorf("network namespace %s already exists (left over? run make cluster-down)", name)
	}
	if _, err := run(ctx, "ip", "netns", "add", name); err != nil {
		return err
	}
	// IPv6 on, and no duplicate address detection for the interfaces moved in later (their link-local addresses
	// would stay tentative for a second or two; every address of the layout is unique by construction). IPv6
	// addresses survive a link going down, as IPv4 ones do (a host's configured addresses do not vanish when a test
	// cuts its links).
	_, err := run(ctx, "ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=0",
		"net.ipv6.conf.default.disable_ipv6=0", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0",
		"net.ipv6.conf.all.keep_addr_on_down=1", "net.ipv6.conf.default.keep_addr_on_down=1")
	return err
}

func runBatch(ctx context.Context, netns, script string) error {
	if strings.TrimSpace(script) == "" {
		return nil
	}
	args := []string{"-batch", "-"}
	if netns != "" {
		args = append([]string{"-n", netns}, args...)
	}
	_, err := runWith(ctx, nil, script, "ip", args...)
	return err
}

// inNetns runs a shell script inside netns.
func inNetns(ctx context.Context, netns, script string) error {
	_, err := run(ctx, "ip", "netns", "exec", netns, "sh", "-ec", script)
	return err
}

// ourNetns lists the network namespaces whose name starts with NetnsPrefix.
func ourNetns() ([]string, error) { return ours("/run/netns") }

// deleteNetns ends every process inside netns (SIGTERM, then SIGKILL) and deletes it; its veths go with it.
// The calling process is spared: `ip netns pids` goes by each process's main thread, which may be inside netns
// for a moment when this process dials from there (dialInNetns) and happens to run on its main thread.
func deleteNetns(ctx context.Context, name string) error {
	var gone error
	if out, err := run(ctx, "ip", "netns", "pids", name); err == nil {
		var pids []int
		for _, f := range strings.Fields(out) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGTERM)
				pids = append(pids, pid)
			}
		}
		if err := waitGone(pids, 3*time.Second); err != nil {
			gone = fmt.Errorf("network namespace %s: %w", name, err)
		}
	}
	_, err := run(ctx, "ip", "netns", "del", name)
	return errors.Join(gone, err)
}

// linkExists reports whether a root-namespace interface exists.
func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// ourLinks lists the root-namespace interfaces whose name starts with NetnsPrefix.
func ourLinks() ([]string, error) { return ours("/sys/class/net") }

// ours lists the entries of dir whose name starts with NetnsPrefix (none when dir does not exist).
func ours(dir string) ([]string, error) {
	return dirNames(dir, func(e fs.DirEntry) bool { return strings.HasPrefix(e.Name(), NetnsPrefix) })
}

// dirNames lists the names of the entries of dir that keep accepts (none when dir does not exist).
func dirNames(dir string, keep func(fs.DirEntry) bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if keep(e) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// txOff turns TX checksum offload off on every link of links, in parallel: the userspace datapath forwards what it
// reads as it is.
func txOff(ctx context.Context, links []string) error {
	var jobs []func(context.Context) error
	for _, l := range links {
		jobs = append(jobs, func(ctx context.Context) error {
			_, err := run(ctx, "ethtool", "-K", l, "tx", "off")
			return err
		})
	}
	return parallel(ctx, jobs)
}
