// Command clusterctl drives the ovn-egressip local cluster (package test/cluster).
//
//	clusterctl up     [--state DIR] [--nodes N] [--gateway-mode shared|local] [--ip-family ipv4|ipv6|dual] [--nb standalone|raft] [--layout centralized|interconnect]
//	clusterctl down   [--state DIR]
//	clusterctl status [--state DIR]              # shell-sourceable KUBECONFIG, NB_ADDRESS, ... and the node table
//	clusterctl kubeconfig master|NODE [--state DIR]  # prints the kubeconfig ovnkube runs with: the master's ServiceAccount, or NODE's daemon (token bound to the Node)
//	clusterctl pod add NAMESPACE/NAME --node NODE [--labels k=v,...] [--state DIR]
//	clusterctl pod del NAMESPACE/NAME [--state DIR]
//	clusterctl pod request NAMESPACE/NAME [--proto tcp|udp] [--family 4|6] [--state DIR]   # prints the source IP the echo server saw
//	clusterctl agent --kubeconfig FILE [--state DIR]  # daemon: node heartbeats, default ServiceAccounts, ovnkube token refresh, interconnect tunnel neighbours after a chassis ovs-vswitchd restart (started by up)
//	clusterctl echo-server [--port 9000]         # daemon: run inside the external host netns (started by up)
//
// Defaults come from the environment: CLUSTER_STATE (_output/cluster), CLUSTER_NODES (3), GATEWAY_MODE (shared),
// CLUSTER_IP_FAMILY (ipv4), CLUSTER_NB (standalone; raft: NB as a 3-member RAFT cluster), CLUSTER_LAYOUT
// (centralized; interconnect: one OVN zone per node).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

func main() {
	if cluster.IsCNIInvocation() { // the kubelets' CNI plugin (a link named oeip-cni to this binary)
		cluster.RunCNI()
		return
	}
	if len(os.Args) < 2 {
		usage()
	}
	// envtest (used to install the CRDs) logs through controller-runtime's logger; nothing to show from it here.
	ctrllog.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "up":
		err = cmdUp(ctx, os.Args[2:])
	case "down":
		err = cmdDown(ctx, os.Args[2:])
	case "status":
		err = cmdStatus(os.Args[2:])
	case "kubeconfig":
		err = cmdKubeconfig(os.Args[2:])
	case "pod":
		err = cmdPod(ctx, os.Args[2:])
	case "agent":
		err = cmdAgent(ctx, os.Args[2:])
	case "echo-server":
		err = cmdEcho(ctx, os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "clusterctl %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: clusterctl up|down|status|pod add|pod del|pod request|agent|echo-server [flags]")
	os.Exit(2)
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func stateFlag(fs *flag.FlagSet) *string {
	return fs.String("state", env("CLUSTER_STATE", "_output/cluster"), "state directory ($CLUSTER_STATE)")
}

func cmdUp(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	state := stateFlag(fs)
	defNodes, err := strconv.Atoi(env("CLUSTER_NODES", "3"))
	if err != nil {
		return fmt.Errorf("$CLUSTER_NODES: %w", err)
	}
	nodes := fs.Int("nodes", defNodes, "number of nodes ($CLUSTER_NODES)")
	mode := fs.String("gateway-mode", env("GATEWAY_MODE", string(gwmode.Shared)), "shared or local ($GATEWAY_MODE)")
	family := fs.String("ip-family", env("CLUSTER_IP_FAMILY", cluster.FamilyIPv4), "ipv4, ipv6 or dual ($CLUSTER_IP_FAMILY)")
	nb := fs.String("nb", env("CLUSTER_NB", cluster.NBStandalone), "NB database: standalone or raft (3-member RAFT cluster) ($CLUSTER_NB)")
	layout := fs.String("layout", env("CLUSTER_LAYOUT", cluster.LayoutCentralized),
		"OVN layout: centralized (one NB/SB/northd/chassis) or interconnect (one zone per node) ($CLUSTER_LAYOUT)")
	kubelets := fs.Bool("kubelets", env("CLUSTER_KUBELETS", "") == "1",
		"also run kube-controller-manager, kube-scheduler, and containerd + a kubelet per node (docs/images.md) ($CLUSTER_KUBELETS=1)")
	quiet := fs.Bool("quiet", false, "no progress lines")
	_ = fs.Parse(args)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cfg := cluster.Config{StateDir: *state, Nodes: *nodes, GatewayMode: gwmode.Mode(*mode), IPFamily: *family, NB: *nb, Helper: self,
		Kubelets: *kubelets, Layout: *layout}
	if !*quiet {
		cfg.Logf = func(f string, a ...any) { fmt.Printf(f+"\n", a...) }
	}
	t0 := time.Now()
	c, err := cluster.Up(ctx, cfg)
	if err != nil {
		logs, aerr := filepath.Abs(filepath.Join(*state, "log"))
		if aerr != nil {
			return errors.Join(err, aerr)
		}
		if dirExists(logs) {
			return fmt.Errorf("%w (logs: %s)", err, logs)
		}
		return err
	}
	defer c.Close()
	if c.Layout() == cluster.LayoutInterconnect {
		fmt.Printf("cluster-up done in %.1fs\nexport KUBECONFIG=%s\n", time.Since(t0).Seconds(), c.Kubeconfig())
		for _, n := range c.Nodes() {
			fmt.Printf("# zone %s: ovn-nbctl --db=%s (or %s)\n", n.Name, c.ZoneNBAddress(n.Name), c.ZoneNBTCPAddress(n.Name))
		}
		return nil
	}
	fmt.Printf("cluster-up done in %.1fs\nexport KUBECONFIG=%s\n# ovnkube --nb-address %s\n",
		time.Since(t0).Seconds(), c.Kubeconfig(), c.NBAddress())
	return nil
}

func cmdDown(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	state := stateFlag(fs)
	_ = fs.Parse(args)
	return cluster.Down(ctx, *state)
}

func cmdStatus(args []string) error {
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	state := stateFlag(fs)
	_ = fs.Parse(args)
	c, err := cluster.Open(*state)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("KUBECONFIG=%s\nKUBECTL=%s\nGATEWAY_MODE=%s\nCLUSTER_IP_FAMILY=%s\n",
		c.Kubeconfig(), c.Kubectl(), c.GatewayMode(), c.IPFamily())
	if c.Layout() != cluster.LayoutInterconnect {
		fmt.Printf("NB_ADDRESS=%s\nSB_ADDRESS=%s\n", c.NBAddress(), c.SBAddress())
	} else {
		// no cluster-wide NB or SB: printing NB_ADDRESS= empty would send ovn-nbctl --db=$NB_ADDRESS to its default
		fmt.Println("# NB_ADDRESS, SB_ADDRESS: none in the interconnect layout; each zone's are ZONE_NB_<node>, ZONE_SB_<node>")
		// one zone per node: its NB (unix socket and TCP) and SB; shell variable names use _ for nothing else
		fmt.Printf("CLUSTER_LAYOUT=%s\n", c.Layout())
		for _, n := range c.Nodes() {
			fmt.Printf("ZONE_NB_%s=%s\nZONE_NB_TCP_%s=%s\nZONE_SB_%s=%s\n", n.Name, c.ZoneNBAddress(n.Name),
				n.Name, c.ZoneNBTCPAddress(n.Name), n.Name, c.ZoneSBAddress(n.Name))
		}
	}
	fmt.Printf("# %-8s %-14s %-22s %-26s %-12s %-26s %s\n", "node", "netns", "subnet", "node IP", "GR join", "GR external", "echo sees")
	for _, n := range c.Nodes() {
		ns, err := c.NodeNetns(n.Name)
		if err != nil {
			return err
		}
		for _, f := range n.Families {
			src, err := c.EgressSourceFamily(n.Name, f.Family)
			if err != nil {
				return err
			}
			fmt.Printf("# %-8s %-14s %-22s %-26s %-12s %-26s %s\n", n.Name, ns, f.Subnet, f.NodeIP, f.JoinIP, f.GatewayIP, src)
		}
	}
	return nil
}

func cmdKubeconfig(args []string) error {
	if len(args) < 1 || strings.HasPrefix(args[0], "-") {
		return fmt.Errorf("usage: kubeconfig master|NODE [--state DIR]")
	}
	fs := flag.NewFlagSet("kubeconfig", flag.ExitOnError)
	state := stateFlag(fs)
	_ = fs.Parse(args[1:])
	c, err := cluster.Open(*state)
	if err != nil {
		return err
	}
	defer c.Close()
	path := c.MasterKubeconfig()
	if args[0] != "master" {
		if path, err = c.NodeKubeconfig(args[0]); err != nil {
			return err
		}
	}
	fmt.Println(path)
	return nil
}

func cmdPod(ctx context.Context, args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: pod add|del|request NAMESPACE/NAME [flags]")
	}
	verb, ref := args[0], args[1]
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("pod reference %q is not NAMESPACE/NAME", ref)
	}
	fs := flag.NewFlagSet("pod "+verb, flag.ExitOnError)
	state := stateFlag(fs)
	node := fs.String("node", "", "node of the pod (pod add)")
	labels := fs.String("labels", "", "pod labels k=v,k2=v2 (pod add)")
	proto := fs.String("proto", "tcp", "tcp or udp (pod request)")
	family := fs.Int("family", 0, "4 or 6: the external host address to request (pod request; default the cluster's primary family)")
	_ = fs.Parse(args[2:])
	c, err := cluster.Open(*state)
	if err != nil {
		return err
	}
	defer c.Close()
	switch verb {
	case "add":
		lbl, err := parseLabels(*labels)
		if err != nil {
			return err
		}
		p, err := c.CreatePod(ctx, cluster.PodSpec{Namespace: ns, Name: name, Node: *node, Labels: lbl})
		if err != nil {
			return err
		}
		fmt.Printf("pod %s/%s on %s: ip %v mac %s netns %s\n", p.Namespace, p.Name, p.Node, p.IPs, p.MAC, p.Netns)
	case "del":
		return c.DeletePod(ctx, ns, name)
	case "request":
		fam := *family
		if fam == 0 {
			fam = c.Families()[0]
		}
		ip, err := c.RequestFamily(ctx, ns, name, fam, *proto, 3*time.Second)
		if err != nil {
			return err
		}
		fmt.Println(ip)
	default:
		return fmt.Errorf("unknown pod verb %q", verb)
	}
	return nil
}

func parseLabels(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("label %q is not key=value", kv)
		}
		m[k] = v
	}
	return m, nil
}

func cmdAgent(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("agent", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "admin kubeconfig")
	interval := fs.Duration("interval", 10*time.Second, "node heartbeat interval")
	state := fs.String("state", "", "cluster state directory: also replace ovnkube's tokens before they expire")
	noHeartbeat := fs.Bool("no-heartbeat", false, "write no node heartbeat (kubelets run: they report their nodes)")
	_ = fs.Parse(args)
	if *noHeartbeat {
		*interval = 0
	}
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, time.Now().Format(time.RFC3339)+" "+f+"\n", a...) }
	if *state != "" {
		go func() {
			if err := cluster.RunTokenRefresher(ctx, *kubeconfig, *state, logf); err != nil {
				logf("token refresher: %v", err)
			}
		}()
		// the interconnect layout's tunnel neighbours after a chassis' ovs-vswitchd restart (nothing in the centralized layout)
		go func() {
			if err := cluster.RunTunnelKeeper(ctx, *state, logf); err != nil {
				logf("tunnel keeper: %v", err)
			}
		}()
	}
	return cluster.RunAgent(ctx, *kubeconfig, *interval, logf)
}

func cmdEcho(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("echo-server", flag.ExitOnError)
	port := fs.Int("port", cluster.EchoPort, "TCP and UDP port")
	_ = fs.Parse(args)
	return cluster.ServeEcho(ctx, *port)
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}
