// Package e2e drives ovnkube on the local cluster (test/cluster) the way a cluster
// admin does (kubectl label, kubectl apply) and checks the source IP the external
// echo server sees, in both gateway modes. It needs root; it skips otherwise.
package e2e

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/repo"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

var ovnkubeBin string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Println("e2e: skipped: needs root (network namespaces, OVS, iptables); CI runs it as root")
		os.Exit(0)
	}
	repo.RunWithOvnkube(m, "e2e", "oeip-e2e-bin", true, &ovnkubeBin)
}

// env is one local cluster with ovnkube running on it.
type env struct {
	t    *testing.T
	c    *cluster.Cluster
	mode gwmode.Mode
	// layout is cluster.LayoutCentralized (a master, one NB) or cluster.LayoutInterconnect (a cluster manager, and
	// per node one process running its zone controller and node daemon, one NB per zone).
	layout string
	eip    egressipclientset.Interface
	dir    string
	// fams are the cluster's address families (4, 6), primary first; assignable are the nodes the tests label
	// egress-assignable (two per family: an EgressIP puts at most one of its IPs on a node).
	fams       []int
	assignable []string

	mu      sync.Mutex
	masters map[string]daemon
	nodes   map[string]daemon
	metrics map[string]string
	// images is set when ovnkube runs from the images (OVNKUBE_FROM=image, images_test.go).
	images *imageRun
	// leaseNamespace holds the masters' Lease.
	leaseNamespace string
}

// newEnv brings up a cluster in gateway mode and IP family (cluster.FamilyIPv4, FamilyIPv6, FamilyDual) and starts
// one master and one node daemon per node: node1 plus two egress-capable nodes per family (3 nodes, 5 in dual-stack).
// Everything is torn down at the end of the test.
func newEnv(t *testing.T, mode gwmode.Mode, family string) *env {
	t.Helper()
	return newEnvIn(t, cluster.LayoutCentralized, mode, family)
}

// newEnvIn is newEnv in a layout: in the interconnect layout every node is its own OVN zone, the cluster manager
// runs where the master does, and each node's process is --init-ovnkube-controller NODE --init-node NODE.
func newEnvIn(t *testing.T, layout string, mode gwmode.Mode, family string) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := filepath.Join(repo.Root(), "_output", "e2e-"+string(mode))
	if err := cluster.Down(ctx, dir); err != nil {
		t.Logf("tearing down what an earlier run left in %s: %v", dir, err)
	}
	nodes := 1 + 2*len(cluster.Families(family))
	c, err := cluster.Up(ctx, cluster.Config{StateDir: dir, Nodes: nodes, GatewayMode: mode, IPFamily: family,
		Layout: layout, RepoRoot: repo.Root(), Logf: t.Logf})
	if err != nil {
		t.Fatalf("cluster up (%s, %s): %v", mode, family, err)
	}
	rc, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, c: c, mode: mode, layout: layout, dir: dir, eip: egressipclientset.NewForConfigOrDie(rc), fams: c.Families(),
		masters: map[string]daemon{}, nodes: map[string]daemon{}, metrics: map[string]string{}, leaseNamespace: cluster.AccessNamespace}
	for i := 2; i <= nodes; i++ {
		e.assignable = append(e.assignable, cluster.NodeName(i))
	}
	t.Cleanup(func() {
		if err := e.stopAll(); err != nil {
			t.Errorf("stop the ovnkube daemons: %v", err)
		}
		e.checkNoDenial()
		if t.Failed() {
			cluster.KeepLogs(t, filepath.Join(dir, "log"), dir+"-logs")
		}
		c.CloseAndDown(t, dir)
	})
	if fromImage() {
		e.images = newImageRun(t, e)
	}
	start := time.Now()
	for _, n := range c.Nodes() {
		e.startNode(n.Name)
	}
	e.startMaster("master-a", "127.0.0.1:29101")
	if e.images != nil {
		e.images.waitReady(t, start)
	}
	return e
}

func (e *env) logFile(name string) *os.File {
	f, err := os.OpenFile(filepath.Join(e.dir, "log", "ovnkube-"+name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		if err := os.MkdirAll(filepath.Join(e.dir, "log"), 0o755); err != nil {
			e.t.Fatal(err)
		}
		f, err = os.OpenFile(filepath.Join(e.dir, "log", "ovnkube-"+name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			e.t.Fatal(err)
		}
	}
	return f
}

// checkNoDenial fails the test when an ovnkube process logged a request the apiserver refused (RBAC or the
// node-writes admission policy): the master and node daemons run as the ServiceAccounts of dist/manifests, the node
// daemons with tokens bound to their Node, and must never need more.
func (e *env) checkNoDenial() {
	// Processes log to ovnkube-<name>.log; containers run from the images (OVNKUBE_FROM=image) to
	// <namespace>_<pod>_<container>.log, their containers being ovnkube-master and ovnkube-node.
	logs, err := filepath.Glob(filepath.Join(e.dir, "log", "ovnkube-*.log"))
	if err != nil {
		e.t.Fatal(err)
	}
	podLogs, err := filepath.Glob(filepath.Join(e.dir, "log", "*_ovnkube-*.log"))
	if err != nil {
		e.t.Fatal(err)
	}
	logs = append(logs, podLogs...)
	if len(logs) == 0 {
		e.t.Errorf("no ovnkube logs in %s to check for denied requests", filepath.Join(e.dir, "log"))
	}
	for _, l := range logs {
		data, err := os.ReadFile(l)
		if err != nil {
			e.t.Errorf("read %s: %v", l, err)
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, "is forbidden") || strings.Contains(line, "denied request") || strings.Contains(line, "Unauthorized") {
				e.t.Errorf("%s: request denied: %s", filepath.Base(l), line)
			}
		}
	}
}

// commonArgs are the flags of every ovnkube process (cluster.OvnkubeCommonArgs); kubeconfig is the identity it
// runs as (the master's ServiceAccount, or a node daemon's token bound to its Node, as the local cluster issues them).
func (e *env) commonArgs(kubeconfig string) []string {
	return e.c.OvnkubeCommonArgs(kubeconfig, logLevel)
}

// logLevel is the e2e ovnkube processes' --loglevel.
const logLevel = "4"

// daemon is one running ovnkube: a process, or a pod run from the images.
type daemon interface {
	// signal sends sig to it (SIGSTOP freezes it).
	signal(sig syscall.Signal) error
	// stop sends sig and waits until it is gone (SIGKILL after 10 s).
	stop(sig syscall.Signal) error
	// holds says whether a Lease holder identity (hostname_pid) is this daemon's.
	holds(identity string) bool
}

type procDaemon struct{ cmd *exec.Cmd }

func (d procDaemon) signal(sig syscall.Signal) error { return syscall.Kill(-d.cmd.Process.Pid, sig) }
func (d procDaemon) stop(sig syscall.Signal) error   { kill(d.cmd, sig); return nil }
func (d procDaemon) holds(identity string) bool {
	return strings.HasSuffix(identity, "_"+strconv.Itoa(d.cmd.Process.Pid))
}

// startMaster starts an ovnkube master named name (its Lease identity differs per
// process) with metrics on metricsAddr. From the images, the manifests' master listens on 127.0.0.1:9412
// (0.0.0.0:9412): only one master can run there at a time.
func (e *env) startMaster(name, metricsAddr string) {
	var d daemon
	if e.images != nil {
		d, metricsAddr = e.images.startMaster(e.t, name), "127.0.0.1:9412"
	} else {
		o := e.c.Ovnkube(e.c.MasterKubeconfig(), logLevel, e.c.OvnkubeLeaderArgs()...)
		o.Metrics, o.Extra = metricsAddr, []string{"--leader-elect-namespace", cluster.AccessNamespace}
		cmd := exec.Command(ovnkubeBin, o.Args()...)
		e.startProc(name, cmd)
		d = procDaemon{cmd}
	}
	e.mu.Lock()
	e.masters[name] = d
	e.metrics[name] = metricsAddr
	e.mu.Unlock()
}

// startNode starts ovnkube --init-node inside the node's network namespace.
func (e *env) startNode(node string) {
	var d daemon
	if e.images != nil {
		d = e.images.startNode(e.t, node)
	} else {
		ns, err := e.c.NodeNetns(node)
		if err != nil {
			e.t.Fatal(err)
		}
		kc, err := e.c.NodeKubeconfig(node)
		if err != nil {
			e.t.Fatal(err)
		}
		args := append([]string{"netns", "exec", ns, ovnkubeBin}, e.c.Ovnkube(kc, logLevel, e.c.OvnkubeNodeArgs(node)...).Args()...)
		cmd := exec.Command("ip", args...)
		e.startProc("node-"+node, cmd)
		d = procDaemon{cmd}
	}

	e.mu.Lock()
	e.nodes[node] = d
	e.mu.Unlock()
}

func (e *env) startProc(name string, cmd *exec.Cmd) {
	f := e.logFile(name)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		// Processes end when the test kills them: how they ended goes to their log.
		fmt.Fprintf(f, "harness: %s ended: %v\n", name, cmd.Wait())
		f.Close()
	}()
}

// kill stops a process group with sig and waits until it is gone.
func kill(cmd *exec.Cmd, sig syscall.Signal) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	if waitfor.Until(context.Background(), 10*time.Second, 20*time.Millisecond, func() (bool, error) {
		return syscall.Kill(cmd.Process.Pid, 0) != nil, nil // gone
	}) == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}

func (e *env) stopMaster(name string, sig syscall.Signal) {
	e.stopDaemon(func() map[string]daemon { return e.masters }, name, sig)
}

func (e *env) stopNode(node string, sig syscall.Signal) {
	e.stopDaemon(func() map[string]daemon { return e.nodes }, node, sig)
}

// stopDaemon takes the daemon of key out of the map daemons returns (e.masters or e.nodes, read under e.mu: stopAll
// replaces them) and stops it with sig.
func (e *env) stopDaemon(daemons func() map[string]daemon, key string, sig syscall.Signal) {
	e.mu.Lock()
	m := daemons()
	d := m[key]
	delete(m, key)
	e.mu.Unlock()
	if d != nil {
		if err := d.stop(sig); err != nil {
			e.t.Errorf("stop %s: %v", key, err)
		}
	}
}

func (e *env) stopAll() error {
	e.mu.Lock()
	var all []daemon
	for _, d := range e.masters {
		all = append(all, d)
	}
	for _, d := range e.nodes {
		all = append(all, d)
	}
	e.masters, e.nodes = map[string]daemon{}, map[string]daemon{}
	e.mu.Unlock()
	var errs []error
	for _, d := range all {
		errs = append(errs, d.stop(syscall.SIGTERM))
	}
	return errors.Join(errs...)
}

// kubectl runs kubectl against the cluster, with stdin.
func (e *env) kubectl(stdin string, args ...string) string {
	e.t.Helper()
	cmd := exec.Command(e.c.Kubectl(), append([]string{"--kubeconfig", e.c.Kubeconfig()}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		e.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// nodeKubectl runs kubectl as node's daemon (its ServiceAccount, token bound to its Node).
func (e *env) nodeKubectl(node string, args ...string) string {
	e.t.Helper()
	kc, err := e.c.NodeKubeconfig(node)
	if err != nil {
		e.t.Fatal(err)
	}
	out, err := exec.Command(e.c.Kubectl(), append([]string{"--kubeconfig", kc}, args...)...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("kubectl as %s's daemon %s: %v\n%s", node, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// waitNodeAnnotation waits until node carries annotation key with value want.
func (e *env) waitNodeAnnotation(node, key, want string) {
	e.t.Helper()
	var err error
	if waitfor.Until(context.Background(), 20*time.Second, 100*time.Millisecond, func() (bool, error) {
		n, gerr := e.c.Client().CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		err = gerr
		return err == nil && n.Annotations[key] == want, nil
	}) != nil {
		e.t.Fatalf("node %s: annotation %s is not %s (%v)", node, key, want, err)
	}
}

// labelAllAssignable labels every node of e.assignable egress-assignable.
func (e *env) labelAllAssignable() {
	for _, n := range e.assignable {
		e.labelAssignable(n, true)
	}
}

// prodWithWeb1 creates namespace prod (env=prod) and in it the pod web1 (labels web) on node1, and returns the pod.
func (e *env) prodWithWeb1() *cluster.Pod {
	e.kubectl("", "create", "namespace", "prod")
	e.kubectl("", "label", "namespace", "prod", "env=prod")
	return e.createPod("prod", "web1", "node1", web)
}

func (e *env) labelAssignable(node string, on bool) {
	if on {
		e.kubectl("", "label", "node", node, "k8s.ovn.org/egress-assignable=", "--overwrite")
	} else {
		e.kubectl("", "label", "node", node, "k8s.ovn.org/egress-assignable-")
	}
}

// applyEgressIP applies an EgressIP with kubectl.
func (e *env) applyEgressIP(name string, ips []string, nsLabels, podLabels map[string]string) {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: k8s.ovn.org/v1\nkind: EgressIP\nmetadata:\n  name: %s\nspec:\n  egressIPs:\n", name)
	for _, ip := range ips {
		fmt.Fprintf(&b, "  - %q\n", ip)
	}
	b.WriteString("  namespaceSelector:\n    matchLabels:\n")
	for k, v := range nsLabels {
		fmt.Fprintf(&b, "      %s: %q\n", k, v)
	}
	if len(podLabels) > 0 {
		b.WriteString("  podSelector:\n    matchLabels:\n")
		for k, v := range podLabels {
			fmt.Fprintf(&b, "      %s: %q\n", k, v)
		}
	}
	e.kubectl(b.String(), "apply", "-f", "-")
}

func (e *env) getEgressIP(name string) *egressipv1.EgressIP {
	e.t.Helper()
	eip, err := e.eip.K8sV1().EgressIPs().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("get EgressIP %s: %v", name, err)
	}
	return eip
}

// waitStatus waits until the EgressIP's status satisfies ok, and returns it.
func (e *env) waitStatus(name string, what string, ok func([]egressipv1.EgressIPStatusItem) bool) []egressipv1.EgressIPStatusItem {
	e.t.Helper()
	var items []egressipv1.EgressIPStatusItem
	if waitfor.Until(context.Background(), 30*time.Second, 100*time.Millisecond, func() (bool, error) {
		eip, err := e.eip.K8sV1().EgressIPs().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		items = eip.Status.Items
		return ok(items), nil
	}) == nil {
		return items
	}
	e.t.Fatalf("EgressIP %s: status never became %s; last %+v", name, what, items)
	return nil
}

// waitMovedOff waits until prod's EgressIP (eipA's IPs) has ip on a node other than from, and returns that node.
func (e *env) waitMovedOff(ip, from string) string {
	items := e.waitStatus("prod", ip+" moved off "+from, func(it []egressipv1.EgressIPStatusItem) bool {
		h := holder(it, ip)
		return h != "" && h != from && hasExactly(it, e.ips(eipA))
	})
	return holder(items, ip)
}

// holder returns the node holding ip in the status items ("" if none).
func holder(items []egressipv1.EgressIPStatusItem, ip string) string {
	for _, it := range items {
		if it.EgressIP == ip {
			return it.Node
		}
	}
	return ""
}

// sourceFamily asks the echo server, from the pod, over family 4 or 6, which source address it sees.
func (e *env) sourceFamily(ns, pod string, fam int) (netip.Addr, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return e.c.RequestFamily(ctx, ns, pod, fam, "tcp", 2*time.Second)
}

// eventually waits until the pod's traffic reaches the echo server with a source in want; want's family (all of
// want are of one family) chooses the echo server's address.
func (e *env) eventually(ns, pod string, want ...netip.Addr) netip.Addr {
	e.t.Helper()
	fam := cluster.FamilyOf(want[0])
	var got netip.Addr
	var err error
	if waitfor.Until(context.Background(), 20*time.Second, 100*time.Millisecond, func() (bool, error) {
		got, err = e.sourceFamily(ns, pod, fam)
		return err == nil && slices.Contains(want, got), nil
	}) == nil {
		return got
	}
	e.t.Fatalf("pod %s/%s: echo server saw %v over IPv%d (err %v), want one of %v", ns, pod, got, fam, err, want)
	return got
}

// eventuallyAll waits, for each address of want (one per family), until the pod's requests of that family reach
// the echo server with it as source.
func (e *env) eventuallyAll(ns, pod string, want []netip.Addr) {
	e.t.Helper()
	for _, w := range want {
		e.eventually(ns, pod, w)
	}
}

// nodeSources is what the echo server sees from a pod of node with no egress IP, for every family of the cluster,
// primary first.
func (e *env) nodeSources(node string) []netip.Addr {
	var out []netip.Addr
	for _, f := range e.fams {
		a, err := e.c.EgressSourceFamily(node, f)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// expectSources checks, for each family, one request of the pod against want (one address per family).
func (e *env) expectSources(ns, pod string, want []netip.Addr) {
	e.t.Helper()
	for _, w := range want {
		if got, err := e.sourceFamily(ns, pod, cluster.FamilyOf(w)); err != nil || got != w {
			e.t.Errorf("%s/%s: echo saw %v (%v) over IPv%d, want %v", ns, pod, got, err, cluster.FamilyOf(w), w)
		}
	}
}

func (e *env) createPod(ns, name, node string, labels map[string]string) *cluster.Pod {
	e.t.Helper()
	return e.createPodAt(ns, name, node, labels, netip.Addr{})
}

// createPodAt is createPod with the pod's primary address ip (cluster.PodSpec.IP: a free one, e.g. a deleted pod's);
// an invalid ip takes the next free address.
func (e *env) createPodAt(ns, name, node string, labels map[string]string, ip netip.Addr) *cluster.Pod {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := e.c.CreatePod(ctx, cluster.PodSpec{Namespace: ns, Name: name, Node: node, Labels: labels, IP: ip})
	if err != nil {
		e.t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	return p
}

func (e *env) deletePod(ns, name string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.c.DeletePod(ctx, ns, name); err != nil {
		e.t.Fatalf("delete pod %s/%s: %v", ns, name, err)
	}
}

// interconnect reports whether the cluster runs one OVN zone per node.
func (e *env) interconnect() bool { return e.layout == cluster.LayoutInterconnect }

// nbAddresses are the NB databases of the cluster: the NB, or every zone's.
func (e *env) nbAddresses() []string {
	if !e.interconnect() {
		return []string{e.c.NBAddress()}
	}
	var out []string
	for _, n := range e.c.Nodes() {
		out = append(out, e.c.ZoneNBAddress(n.Name))
	}
	return out
}

// nbOwned lists the external_ids of our NB rows of a table, via ovn-nbctl, in every NB of the cluster.
func (e *env) nbOwned(table string) []map[string]string {
	e.t.Helper()
	return e.nbFind(table, `external_ids:"k8s.ovn.org/owner-controller"=egressip`)
}

// nbFind lists the external_ids of the rows of table that match the ovn-nbctl find conditions, in every NB of the
// cluster.
func (e *env) nbFind(table string, conditions ...string) []map[string]string {
	e.t.Helper()
	var rows []map[string]string
	for _, db := range e.nbAddresses() {
		rows = append(rows, e.nbFindIn(db, table, conditions...)...)
	}
	return rows
}

// nbFindIn is nbFind in the one NB at db.
func (e *env) nbFindIn(db, table string, conditions ...string) []map[string]string {
	e.t.Helper()
	args := append([]string{"--db=" + db, "--no-leader-only", "--format=csv", "--no-headings",
		"--columns=external_ids", "find", table}, conditions...)
	out, err := exec.Command("ovn-nbctl", args...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("ovn-nbctl --db=%s find %s: %v\n%s", db, table, err, out)
	}
	rows, err := externalIDsFromCSV(string(out))
	if err != nil {
		e.t.Fatalf("ovn-nbctl --db=%s find %s: %v\n%s", db, table, err, out)
	}
	return rows
}

// externalIDsFromCSV reads ovn-nbctl's --format=csv --columns=external_ids output: one CSV record per row, whose
// one field is an OVSDB map as ovn-nbctl prints it ({key=value, ...}, a key or value in JSON quotes unless it is a
// bare word of letters, '_', '-' and '.'; CSV doubles the quotes).
func externalIDsFromCSV(out string) ([]map[string]string, error) {
	r := csv.NewReader(strings.NewReader(out))
	r.FieldsPerRecord = 1
	records, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("CSV: %w", err)
	}
	var rows []map[string]string
	for _, rec := range records {
		m, err := parseNBMap(rec[0])
		if err != nil {
			return nil, err
		}
		rows = append(rows, m)
	}
	return rows, nil
}

// parseNBMap parses an OVSDB map of strings as ovn-nbctl prints it: {} or {k=v, "k"="v", ...}.
func parseNBMap(s string) (map[string]string, error) {
	body, open := strings.CutPrefix(strings.TrimSpace(s), "{")
	body, closed := strings.CutSuffix(body, "}")
	if !open || !closed {
		return nil, fmt.Errorf("not a map: %q", s)
	}
	m := map[string]string{}
	// atom reads a string atom at the start of rest: JSON-quoted, or bare up to '=', ',' or the end.
	atom := func(rest string) (string, string, error) {
		rest = strings.TrimLeft(rest, " ")
		if !strings.HasPrefix(rest, `"`) {
			i := strings.IndexAny(rest, "=,")
			if i < 0 {
				i = len(rest)
			}
			if strings.TrimSpace(rest[:i]) == "" {
				return "", "", fmt.Errorf("empty atom in %q", s)
			}
			return strings.TrimSpace(rest[:i]), rest[i:], nil
		}
		for i := 1; i < len(rest); i++ {
			switch rest[i] {
			case '\\':
				i++
			case '"':
				var v string
				if err := json.Unmarshal([]byte(rest[:i+1]), &v); err != nil {
					return "", "", fmt.Errorf("string %s: %w", rest[:i+1], err)
				}
				return v, rest[i+1:], nil
			}
		}
		return "", "", fmt.Errorf("unterminated string in %q", s)
	}
	for rest := strings.TrimSpace(body); rest != ""; {
		k, after, err := atom(rest)
		if err != nil {
			return nil, err
		}
		after, ok := strings.CutPrefix(strings.TrimLeft(after, " "), "=")
		if !ok {
			return nil, fmt.Errorf("no '=' after key %q in %q", k, s)
		}
		v, after, err := atom(after)
		if err != nil {
			return nil, err
		}
		m[k] = v
		after = strings.TrimLeft(after, " ")
		if after != "" {
			if after, ok = strings.CutPrefix(after, ","); !ok {
				return nil, fmt.Errorf("no ',' after %q=%q in %q", k, v, s)
			}
		}
		rest = strings.TrimSpace(after)
	}
	return m, nil
}

// nbRowsOfEgressIP counts our reroute and SNAT rows that belong to EgressIP name.
func (e *env) nbRowsOfEgressIP(name string) int {
	n := 0
	for _, table := range []string{"Logical_Router_Policy", "NAT"} {
		for _, r := range e.nbOwned(table) {
			if r["k8s.ovn.org/name"] == name {
				n++
			}
		}
	}
	return n
}

// inNode runs a command in a node's network namespace and returns its output.
func (e *env) inNode(node string, argv ...string) string {
	e.t.Helper()
	out, err := e.tryInNode(node, argv...)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) tryInNode(node string, argv ...string) (string, error) {
	ns, err := e.c.NodeNetns(node)
	if err != nil {
		return "", err
	}
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%v in %s: %w: %s", argv, node, err, out)
	}
	return string(out), nil
}

// hostEgressState returns, for a node, our SNAT rules and the addresses in ips
// found on its interfaces. A missing chain means no rules; other failures are
// returned for the caller to retry.
func (e *env) hostEgressState(node string, ips ...string) (snatRules []string, addrs []string, err error) {
	for _, ipt := range []string{"iptables", "ip6tables"} {
		rules, err := e.tryInNode(node, ipt, "-t", "nat", "-S", "OVN-KUBE-EGRESSIP")
		// iptables-nft 1.8.9 calls a missing chain "incompatible".
		if err != nil && !strings.Contains(rules, "No chain/target/match") && !strings.Contains(rules, "does not exist") && !strings.Contains(rules, "is incompatible") {
			return nil, nil, err
		}
		for _, l := range strings.Split(rules, "\n") {
			if strings.Contains(l, "-j SNAT") {
				snatRules = append(snatRules, l)
			}
		}
	}
	a, err := e.tryInNode(node, "ip", "-o", "addr", "show")
	if err != nil {
		return nil, nil, err
	}
	for _, ip := range ips {
		if strings.Contains(a, " "+ip+"/") {
			addrs = append(addrs, ip)
		}
	}
	return snatRules, addrs, nil
}

// logSize is the current size of an ovnkube process's log file (see logFile).
func (e *env) logSize(name string) int64 {
	st, err := os.Stat(filepath.Join(e.dir, "log", "ovnkube-"+name+".log"))
	if err != nil {
		return 0
	}
	return st.Size()
}

// waitNodeSynced waits until node's daemon logged a completed sync after offset off of its log, and fails if it
// logged a failed one.
func (e *env) waitNodeSynced(node string, off int64) {
	e.t.Helper()
	path := filepath.Join(e.dir, "log", "ovnkube-node-"+node+".log")
	if waitfor.Until(context.Background(), 20*time.Second, 100*time.Millisecond, func() (bool, error) {
		b, err := os.ReadFile(path)
		if err != nil || int64(len(b)) < off {
			return false, nil
		}
		text := string(b[off:])
		lines := strings.Split(text, "\n")
		for i, l := range lines {
			if strings.Contains(l, "sync failed") || strings.Contains(l, "file exists") {
				// klog writes a multi-line error as err=< ... >: show it whole.
				e.t.Fatalf("node %s daemon after restart: %s", node, strings.Join(lines[i:min(i+8, len(lines))], "\n"))
			}
		}
		return strings.Contains(text, "Egress IP node sync done"), nil
	}) != nil {
		e.t.Fatalf("node %s daemon: no completed sync 20s after restart", node)
	}
}

// hostSnapshot is what a node holds of ours, for comparison: the copies of the egress address ip, our nat and
// filter chains and their jumps (iptables and ip6tables), the ip rules and the routes of our protocol. It fails the
// test on a duplicate line.
func (e *env) hostSnapshot(node, ip string) string {
	e.t.Helper()
	var b strings.Builder
	addrs := e.inNode(node, "ip", "-o", "addr", "show")
	fmt.Fprintf(&b, "copies of %s: %d\n", ip, strings.Count(addrs, " "+ip+"/"))
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, args := range [][]string{{"-t", "nat", "-S", "POSTROUTING"}, {"-t", "nat", "-S", "OVN-KUBE-EGRESSIP"},
			{"-S", "INPUT"}, {"-S", "OVN-KUBE-EGRESSIP-GUARD"}} {
			out, err := e.tryInNode(node, append([]string{bin}, args...)...)
			if err != nil {
				fmt.Fprintf(&b, "%s %v: %v\n", bin, args, err)
			}
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "OVN-KUBE-EGRESSIP") || strings.Contains(l, "ovn-egressip") {
					fmt.Fprintf(&b, "%s %s\n", bin, l)
				}
			}
		}
	}
	for _, fam := range []string{"-4", "-6"} {
		for _, l := range strings.Split(e.inNode(node, "ip", fam, "rule", "show"), "\n") {
			if strings.TrimSpace(l) != "" {
				fmt.Fprintf(&b, "rule%s %s\n", fam, l)
			}
		}
		out, err := e.tryInNode(node, "ip", fam, "route", "show", "table", "all", "proto", "201")
		if err != nil {
			fmt.Fprintf(&b, "route%s: %v\n", fam, err)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.TrimSpace(l) != "" {
				fmt.Fprintf(&b, "route%s %s\n", fam, l)
			}
		}
	}
	seen := map[string]bool{}
	for _, l := range strings.Split(b.String(), "\n") {
		if l != "" && seen[l] {
			e.t.Fatalf("node %s has a duplicate: %s\n%s", node, l, b.String())
		}
		seen[l] = true
	}
	if !strings.Contains(b.String(), "copies of "+ip+": 1\n") {
		e.t.Fatalf("node %s holding %s:\n%s", node, ip, b.String())
	}
	return b.String()
}

// extNeighbour is the external host's neighbour entry's MAC for ip ("" when it has none).
func (e *env) extNeighbour(ip string) string {
	e.t.Helper()
	out, err := exec.Command("ip", "netns", "exec", cluster.ExternalNetns, "ip", "neigh", "show", ip, "dev", "eth0").CombinedOutput()
	if err != nil {
		e.t.Fatalf("ip neigh in the external host: %v: %s", err, out)
	}
	f := strings.Fields(string(out))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "lladdr" {
			return f[i+1]
		}
	}
	return ""
}

// holderMAC is the MAC the external host must reach an egress IP held by node at: the node's eth0 in local
// gateway mode, its gateway router's external port in shared gateway mode.
func (e *env) holderMAC(node string) string {
	e.t.Helper()
	n, err := e.c.Node(node)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.mode == gwmode.Local {
		return n.NodeMAC
	}
	return n.GatewayMAC
}
