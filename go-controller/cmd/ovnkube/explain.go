package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/urfave/cli/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/healthcheck"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/ovsdbaddr"
)

// egressIPCommand is `ovnkube egressip explain` and `ovnkube egressip migrate`.
func egressIPCommand() *cli.Command {
	return &cli.Command{
		Name:  "egressip",
		Usage: "inspect egress IPs",
		Subcommands: []*cli.Command{{
			Name:      "explain",
			Usage:     "explain an EgressIP (holders or why none, candidate nodes, pods, NB rows or host state) or, with --pod, a pod's egress",
			ArgsUsage: "NAME | --pod NAMESPACE/NAME",
			Flags: append(config.ClientFlags(),
				&cli.StringFlag{Name: "pod", Usage: "explain the egress of pod `NAMESPACE/NAME` instead"},
				&cli.StringSliceFlag{Name: "zone-nb-address", Usage: "interconnect layout: the NB of zone (node) `NODE=ADDRESS`, repeated or comma-separated, one per zone to read; each zone's rows are compared with what its zone controller computes (replaces --nb-address)"},
				&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "text", Usage: "text or json"},
				&cli.DurationFlag{Name: "timeout", Value: 10 * time.Second, Usage: "how long to wait for the API and NB"},
				&cli.BoolFlag{Name: "probe", Usage: "probe the labelled nodes' egress health check as the master does (from where explain runs: it must reach the nodes' management IPs); without it every labelled node is taken as reachable"},
				&cli.IntFlag{Name: config.FlagHealthCheckPort, Value: 9107, Usage: "with --probe: the nodes' gRPC health check port; 0 = legacy TCP check on port 9"},
				&cli.DurationFlag{Name: config.FlagReachabilityTimeout, Value: config.DefaultReachabilityTimeout, Usage: "with --probe: total timeout of one probe"},
			),
			Action: runExplain,
		}, migrateCommand()},
	}
}

func runExplain(c *cli.Context) error {
	out := c.String("output")
	if out != "text" && out != "json" {
		return fmt.Errorf("invalid --output %q: text or json", out)
	}
	pod := c.String("pod")
	if (pod == "") == (c.NArg() != 1) {
		return fmt.Errorf("give one EgressIP NAME, or --pod NAMESPACE/NAME")
	}
	cfg, err := config.LoadClient(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	rc, err := restConfig(cfg)
	if err != nil {
		return err
	}
	cs, err := newClients(rc, cfg)
	if err != nil {
		return err
	}
	in, err := readExplainInput(ctx, cfg, cs)
	if err != nil {
		return err
	}
	if zones := c.StringSlice("zone-nb-address"); len(zones) > 0 {
		if in.ZoneNB, in.GatewaySNAT, err = readZones(ctx, cfg, zones); err != nil {
			return err
		}
	} else {
		for zone := range in.ZoneNB {
			fmt.Fprintf(c.App.ErrWriter, "OVN Northbound %v is zone %s's (interconnect layout: it has the transit switch %q): its rows are compared with what zone %s's controller computes; give every zone's NB with --zone-nb-address NODE=ADDRESS to compare them all\n",
				cfg.NBAddresses, zone, transitSwitch, zone)
		}
	}
	if c.Bool("probe") {
		in.Reachable = probe(ctx, in.Nodes, c.Int(config.FlagHealthCheckPort), c.Duration(config.FlagReachabilityTimeout))
	}
	var report any
	if pod != "" {
		ns, name, ok := strings.Cut(pod, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("invalid --pod %q: want NAMESPACE/NAME", pod)
		}
		report, err = master.ExplainPod(in, ns, name)
	} else {
		report, err = master.ExplainEgressIP(in, c.Args().First())
	}
	if err != nil {
		return err
	}
	w := c.App.Writer
	if out == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	switch r := report.(type) {
	case *master.EgressIPReport:
		printEgressIPReport(w, r, cfg.GatewayMode)
	case *master.PodReport:
		printPodReport(w, r)
	}
	return nil
}

// readExplainInput lists the API objects and, when an NB address is given, reads
// our NB rows and the gateway routers' own SNAT rows. Read-only.
func readExplainInput(ctx context.Context, cfg *config.Config, cs *clients) (master.ExplainInput, error) {
	in := master.ExplainInput{Mode: cfg.GatewayMode, ClusterSubnets: cfg.ClusterSubnets, JoinSubnets: cfg.JoinSubnets}
	eips, err := cs.egressIP.K8sV1().EgressIPs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("list EgressIPs: %w", err)
	}
	for i := range eips.Items {
		in.EgressIPs = append(in.EgressIPs, &eips.Items[i])
	}
	nodes, err := cs.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodes.Items {
		in.Nodes = append(in.Nodes, &nodes.Items[i])
	}
	nss, err := cs.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("list namespaces: %w", err)
	}
	for i := range nss.Items {
		in.Namespaces = append(in.Namespaces, &nss.Items[i])
	}
	pods, err := cs.kube.CoreV1().Pods(corev1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("list pods: %w", err)
	}
	for i := range pods.Items {
		in.Pods = append(in.Pods, &pods.Items[i])
	}
	if len(cfg.NBAddresses) == 0 {
		return in, nil
	}
	nb, err := readNB(ctx, cfg.NBAddresses, cfg.NBTLS)
	if err != nil {
		return in, err
	}
	zone, err := zoneOf(nb.transit, nb.gateways)
	if err != nil {
		return in, fmt.Errorf("OVN Northbound %v: %w", cfg.NBAddresses, err)
	}
	if zone != "" {
		// One zone's NB given as the cluster's (a zone controller's own config, say):
		// compared as that zone's, not as the whole cluster's (explain says so).
		in.ZoneNB, in.GatewaySNAT = map[string]*nbstate.Current{zone: &nb.cur}, nb.snat
		return in, nil
	}
	in.NB, in.GatewaySNAT = &nb.cur, nb.snat
	return in, nil
}

// transitSwitch is the logical switch joining the zones of the interconnect layout
// (OVN-Kubernetes' name for the default network's): only a zone's NB has it.
const transitSwitch = "transit_switch"

// zoneOf tells a zone's NB from the centralized layout's: a zone's NB has the
// transit switch and one gateway router, GR_<node>, whose node is the zone's name.
// It returns "" for the centralized layout's NB.
func zoneOf(transit bool, gateways []string) (string, error) {
	if !transit {
		return "", nil
	}
	if len(gateways) != 1 {
		return "", fmt.Errorf("it has the interconnect layout's transit switch %q and %d gateway routers %v, want one (GR_<node>, the zone's node): give each zone's NB with --zone-nb-address NODE=ADDRESS",
			transitSwitch, len(gateways), gateways)
	}
	return strings.TrimPrefix(gateways[0], nbstate.GatewayRouterPrefix), nil
}

// readZones reads the NB of every zone given as NODE=ADDRESS.
func readZones(ctx context.Context, cfg *config.Config, zones []string) (map[string]*nbstate.Current, map[string][]master.NATRow, error) {
	out := map[string]*nbstate.Current{}
	snat := map[string][]master.NATRow{}
	for _, z := range zones {
		node, addr, ok := strings.Cut(z, "=")
		if !ok || node == "" || addr == "" {
			return nil, nil, fmt.Errorf("invalid --zone-nb-address %q: want NODE=ADDRESS", z)
		}
		eps, err := ovsdbaddr.ParseList(addr)
		if err != nil {
			return nil, nil, fmt.Errorf("invalid --zone-nb-address %q: %w", z, err)
		}
		tlsConf, err := cfg.NBTLSFor(eps)
		if err != nil {
			return nil, nil, fmt.Errorf("--zone-nb-address %q: %w", z, err)
		}
		nb, err := readNB(ctx, eps, tlsConf)
		if err != nil {
			return nil, nil, fmt.Errorf("zone %s: %w", node, err)
		}
		out[node] = &nb.cur
		for gr, rows := range nb.snat {
			snat[gr] = append(snat[gr], rows...)
		}
	}
	return out, snat, nil
}

// nbRead is what explain reads of an NB: our rows, the gateway routers' own SNAT
// rows, whether it has the transit switch and its gateway routers' names.
type nbRead struct {
	cur      nbstate.Current
	snat     map[string][]master.NATRow
	transit  bool
	gateways []string
}

// readNB reads the NB at addrs; tlsConf is required for ssl: addresses (Config.NBTLSFor).
func readNB(ctx context.Context, addrs []string, tlsConf *tls.Config) (nbRead, error) {
	var out nbRead
	dbModel, err := model.NewClientDBModel("OVN_Northbound", map[string]model.Model{
		nbdb.LogicalRouterTable:       &nbdb.LogicalRouter{},
		nbdb.LogicalRouterPolicyTable: &nbdb.LogicalRouterPolicy{},
		nbdb.NATTable:                 &nbdb.NAT{},
		nbdb.AddressSetTable:          &nbdb.AddressSet{},
		nbdb.LogicalSwitchTable:       &nbdb.LogicalSwitch{},
	})
	if err != nil {
		return out, err
	}
	logger := logr.Discard()
	// Not leader only: explain has always read from whichever member answers.
	c, err := client.NewOVSDBClient(dbModel, ovsdbaddr.ClientOptions(&logger, addrs, tlsConf, false)...)
	if err != nil {
		return out, err
	}
	if err := c.Connect(ctx); err != nil {
		return out, fmt.Errorf("connect to OVN Northbound %v: %w", addrs, err)
	}
	defer c.Close()
	if _, err := c.MonitorAll(ctx); err != nil {
		return out, fmt.Errorf("read OVN Northbound: %w", err)
	}
	cur, err := nbstate.ReadCurrent(ctx, c)
	if err != nil {
		return out, err
	}
	var routers []nbdb.LogicalRouter
	if err := c.List(ctx, &routers); err != nil {
		return out, err
	}
	var switches []nbdb.LogicalSwitch
	if err := c.List(ctx, &switches); err != nil {
		return out, err
	}
	for _, sw := range switches {
		out.transit = out.transit || sw.Name == transitSwitch
	}
	snat := map[string][]master.NATRow{}
	for _, r := range routers {
		if !strings.HasPrefix(r.Name, nbstate.GatewayRouterPrefix) {
			continue
		}
		out.gateways = append(out.gateways, r.Name)
		for _, uuid := range r.Nat {
			n := &nbdb.NAT{UUID: uuid}
			if err := c.Get(ctx, n); err != nil || n.Type != nbdb.NATTypeSNAT || nbstate.Owned(n.ExternalIDs) {
				continue
			}
			snat[r.Name] = append(snat[r.Name], master.NATRow{ExternalIP: n.ExternalIP, LogicalIP: n.LogicalIP})
		}
	}
	slices.Sort(out.gateways)
	out.cur, out.snat = cur, snat
	return out, nil
}

func condLine(c *metav1.Condition) string {
	if c == nil {
		return "(none written)"
	}
	return fmt.Sprintf("%s (%s: %s)", c.Status, c.Reason, c.Message)
}

func printEgressIPReport(w io.Writer, r *master.EgressIPReport, mode gwmode.Mode) {
	fmt.Fprintf(w, "EgressIP %s\n", r.Name)
	fmt.Fprintf(w, "  Ready in status:  %s\n", condLine(r.Ready))
	fmt.Fprintf(w, "  Ready computed:   %s\n", condLine(r.Computed))
	fmt.Fprintf(w, "  spec: egressIPs %v, strict %v, nodeSelector %s\n", r.Spec.EgressIPs, r.Spec.Strict, selectorString(r.Spec.NodeSelector))
	fmt.Fprintln(w, "Egress IPs:")
	for _, ip := range r.IPs {
		if ip.Holder != "" {
			fmt.Fprintf(w, "  %s  held by %s\n", ip.IP, ip.Holder)
		} else {
			fmt.Fprintf(w, "  %s  NOT ASSIGNED: %s: %s\n", ip.IP, ip.Reason, ip.Message)
		}
		for _, n := range ip.Nodes {
			fmt.Fprintf(w, "      %-10s %s\n", n.Node, n.Verdict)
		}
	}
	if r.SelectorErr != "" {
		fmt.Fprintf(w, "Selector error: %s (it serves no pod)\n", r.SelectorErr)
	}
	fmt.Fprintf(w, "Pods served (%d):\n", len(r.Served))
	for _, p := range r.Served {
		fmt.Fprintf(w, "  %-24s %-16s on %s\n", p.Pod, strings.Join(p.IPs, ","), p.Node)
	}
	if len(r.ServedOther) > 0 {
		fmt.Fprintf(w, "Pods selected but served by another EgressIP (%d):\n", len(r.ServedOther))
		for _, p := range r.ServedOther {
			fmt.Fprintf(w, "  %-24s %-16s served by %s\n", p.Pod, strings.Join(p.IPs, ","), p.ServedBy)
		}
	}
	if r.NB != nil {
		fmt.Fprintf(w, "OVN Northbound rows (%s gateway mode): %d as desired, %d missing, %d extra\n", mode, len(r.NB.Present), len(r.NB.Missing), len(r.NB.Extra))
		for _, l := range r.NB.Present {
			fmt.Fprintf(w, "  ok       %s\n", l)
		}
		for _, l := range r.NB.Missing {
			fmt.Fprintf(w, "  MISSING  %s\n", l)
		}
		for _, l := range r.NB.Extra {
			fmt.Fprintf(w, "  EXTRA    %s\n", l)
		}
	}
	if len(r.Hosts) > 0 {
		fmt.Fprintln(w, "Host state (local gateway mode, from each holder's k8s.ovn.org/egress-ips-ready):")
		for _, h := range r.Hosts {
			line := fmt.Sprintf("  %-10s ready %v", h.Node, h.Ready)
			if len(h.Missing) > 0 {
				line += fmt.Sprintf("  MISSING %v", h.Missing)
			}
			if h.Note != "" {
				line += "  (" + h.Note + ")"
			}
			fmt.Fprintln(w, line)
		}
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "Note: %s\n", n)
	}
}

func selectorString(s *metav1.LabelSelector) string {
	if s == nil {
		return "<none>"
	}
	return metav1.FormatLabelSelector(s)
}

func printPodReport(w io.Writer, r *master.PodReport) {
	fmt.Fprintf(w, "Pod %s (%s) on %s\n", r.Pod, strings.Join(r.IPs, ","), r.Node)
	served := r.ServedBy
	if served == "" {
		served = "none"
	}
	fmt.Fprintf(w, "  served by EgressIP: %s\n", served)
	if len(r.Via) > 0 {
		fmt.Fprintf(w, "  egress IPs (ip@holder): %s\n", strings.Join(r.Via, " "))
	}
	if len(r.Sources) == 0 {
		fmt.Fprintln(w, "  the outside world sees: nothing (traffic leaving the cluster is dropped)")
	} else {
		fmt.Fprintf(w, "  the outside world sees: %s\n", strings.Join(r.Sources, " or "))
	}
	for _, l := range r.Lingering {
		fmt.Fprintf(w, "  release linger: %s\n", l)
	}
	fmt.Fprintf(w, "  why: %s\n", r.Why)
}

// probed is the reachability explain measured with the master's checker.
type probed map[string]bool

func (p probed) Reachable(node string) bool { r, ok := p[node]; return !ok || r }

// probe runs the master's health checker (and so the master's rule: unreachable
// after two hard failures in a row, or ten failures of any kind, and for
// failures that are silence only if another node answered meanwhile; a node held
// because no node answered is logged on stderr and counts as reachable, as in the
// master) against the labelled nodes until each has passed two rounds in a row or
// been probed twelve times (at most 3 s, or four timeouts when longer), and returns the checker's verdicts.
func probe(ctx context.Context, nodes []*corev1.Node, port int, timeout time.Duration) probed {
	var targets []healthcheck.Target
	for _, n := range nodes {
		if !annotations.IsEgressAssignable(n) {
			continue
		}
		if t, ok := targetFor(n); ok {
			targets = append(targets, t)
		}
	}
	out := probed{}
	if len(targets) == 0 {
		return out
	}
	var mu sync.Mutex
	seen := map[string][]bool{}
	pctx, cancel := context.WithTimeout(ctx, max(3*time.Second, 4*timeout))
	defer cancel()
	checker := healthcheck.NewChecker(healthcheck.CheckerConfig{
		Port: port, Interval: 50 * time.Millisecond, Timeout: timeout,
		Targets: func() []healthcheck.Target { return targets },
		Observe: func(node string, ok bool, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			seen[node] = append(seen[node], ok)
			for _, t := range targets {
				obs := seen[t.Node]
				settled := len(obs) >= 12 || len(obs) >= 2 && obs[len(obs)-1] && obs[len(obs)-2]
				if !settled {
					return
				}
			}
			cancel()
		},
	})
	checker.Run(pctx)
	for _, t := range targets {
		out[t.Node] = checker.Reachable(t.Node)
	}
	return out
}
