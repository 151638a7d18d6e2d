package master

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	eipfake "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/fake"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// nbServers runs a scenario against a real ovsdb-server. Not libovsdb's in-memory
// server: it answers concurrent requests of one connection from concurrent
// goroutines that write to the connection without a lock (cenkalti/rpc2's JSON
// codec), and the master always has two in flight at times (its liveness echo
// beside a sync's transaction), so the race detector fails the test in the test
// server's own code (seen in TestNodeLost). nbstate's tests, with one request at a
// time, still run against both.
var nbServers = []struct {
	name  string
	start func(testing.TB) *nbserver.Server
}{
	{"ovsdb-server", nbserver.Start},
}

func forEachNB(t *testing.T, f func(t *testing.T, start func(testing.TB) *nbserver.Server)) {
	for _, s := range nbServers {
		t.Run(s.name, func(t *testing.T) { f(t, s.start) })
	}
}

// forEachNBAndRaft is forEachNB plus a 3-member RAFT cluster of ovsdb-servers (the
// master given every member, talking to the leader only), as deployed.
func forEachNBAndRaft(t *testing.T, f func(t *testing.T, start func(testing.TB) *nbserver.Server)) {
	forEachNB(t, f)
	t.Run("raft", func(t *testing.T) { f(t, nbserver.StartClusterServer) })
}

const harnessKey = "ovn-egressip-harness"

// env is a fake cluster (client-go fake clientsets) plus an NB database with the
// OVN-Kubernetes topology of three nodes, and a master that can be started and
// stopped.
type env struct {
	t        testing.TB
	kube     kubernetes.Interface
	eip      egressipclientset.Interface
	nb       *nbserver.Server
	api      *apiserver.Env // nil with fake clientsets
	nbc      client.Client  // the test's own view of NB
	reg      *prometheus.Registry
	recorder *record.FakeRecorder // nil with a real apiserver: Events are read back from it
	reach    *fakeReach
	mode     gwmode.Mode
	patience time.Duration // how long eventually waits (0: 15 s)

	mu        sync.Mutex
	events    []string
	syncStart time.Time
	syncLog   []syncRecord // every completed sync

	started atomic.Int64 // syncs started
	syncs   atomic.Int64 // syncs completed
	cancel  context.CancelFunc
	done    chan error
	running bool
}

type syncRecord struct {
	start, end time.Time
	err        error
}

// syncsSince returns the syncs that started at or after t.
func (e *env) syncsSince(t time.Time) []syncRecord {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []syncRecord
	for _, r := range e.syncLog {
		if !r.start.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

// newEnv uses client-go fake clientsets and a fake event recorder.
func newEnv(t testing.TB, start func(testing.TB) *nbserver.Server, mode gwmode.Mode) *env {
	t.Helper()
	eip := eipfake.NewSimpleClientset()
	statusSubresource(eip)
	e := &env{
		t:        t,
		kube:     kubefake.NewSimpleClientset(), // NewClientset's field-managed tracker is ~100x slower per write
		eip:      eip,
		recorder: record.NewFakeRecorder(10000),
	}
	go func() {
		for ev := range e.recorder.Events {
			e.mu.Lock()
			e.events = append(e.events, ev)
			e.mu.Unlock()
		}
	}()
	e.init(start, mode)
	return e
}

// newAPIServerEnv uses a private kube-apiserver (test/apiserver) with our CRD, and
// the master's own events broadcaster.
func newAPIServerEnv(t testing.TB, start func(testing.TB) *nbserver.Server, mode gwmode.Mode) *env {
	t.Helper()
	api := apiserver.Start(t)
	e := &env{t: t, api: api, kube: kubernetes.NewForConfigOrDie(api.Config), eip: egressipclientset.NewForConfigOrDie(api.Config)}
	e.init(start, mode)
	return e
}

func (e *env) init(start func(testing.TB) *nbserver.Server, mode gwmode.Mode) {
	e.nb = start(e.t)
	e.reach = newFakeReach()
	e.mode = mode
	e.nbc = e.nb.Client(e.t)
	e.topology(3)
	e.t.Cleanup(e.stop)
}

// statusSubresource makes the fake EgressIP client honour the status subresource:
// UpdateStatus changes status only, as the real apiserver does.
func statusSubresource(c *eipfake.Clientset) {
	gvr := egressipv1.SchemeGroupVersion.WithResource("egressips")
	c.PrependReactor("update", "egressips", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.UpdateAction)
		if u.GetSubresource() != "status" {
			return false, nil, nil
		}
		obj := u.GetObject().(*egressipv1.EgressIP)
		existing, err := c.Tracker().Get(gvr, "", obj.Name)
		if err != nil {
			return true, nil, err
		}
		cp := existing.(*egressipv1.EgressIP).DeepCopy()
		cp.Status = *obj.Status.DeepCopy()
		return true, cp, c.Tracker().Update(gvr, cp, "")
	})
}

// params are the master's Params for this env.
func (e *env) params() Params {
	e.reg = prometheus.NewRegistry()
	return Params{
		Kube:            e.kube,
		EgressIP:        e.eip,
		NBAddress:       e.nb.Addr,
		GatewayMode:     e.mode,
		ClusterSubnets:  []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		JoinSubnets:     []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16")},
		Reachability:    e.reach,
		Metrics:         e.reg,
		Recorder:        e.eventRecorder(),
		MinSyncInterval: 10 * time.Millisecond,
		ResyncPeriod:    -1,
		NBTimeout:       30 * time.Second,
		beforeSync: func() {
			e.mu.Lock()
			e.syncStart = time.Now()
			e.mu.Unlock()
			e.started.Add(1)
		},
		afterSync: func(err error) {
			e.mu.Lock()
			e.syncLog = append(e.syncLog, syncRecord{start: e.syncStart, end: time.Now(), err: err})
			e.mu.Unlock()
			e.syncs.Add(1)
		},
	}
}

func (e *env) eventRecorder() record.EventRecorder {
	if e.recorder == nil {
		return nil // Run makes its own broadcaster
	}
	return e.recorder
}

// start runs the master in the background with e.params().
func (e *env) start() {
	e.t.Helper()
	e.startWith(e.params())
}

// startWith runs the master with p (from e.params(), possibly edited) and waits
// for its start-up sync.
func (e *env) startWith(p Params) {
	e.t.Helper()
	if e.running {
		e.t.Fatal("master already running")
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done, e.running = cancel, make(chan error, 1), true
	e.started.Store(0)
	e.syncs.Store(0)
	go func() { e.done <- Run(ctx, p) }()
	e.waitSyncs(1)
}

// stop stops the master and waits for Run to return.
func (e *env) stop() {
	if !e.running {
		return
	}
	e.cancel()
	select {
	case err := <-e.done:
		if err != nil {
			e.t.Errorf("Run returned %v", err)
		}
	case <-time.After(20 * time.Second):
		e.t.Error("Run did not return 20 s after its context ended")
	}
	e.running = false
}

// waitSyncs waits until at least n syncs completed since the master started.
func (e *env) waitSyncs(n int64) {
	e.t.Helper()
	e.eventually("syncs", func() error {
		if got := e.syncs.Load(); got < n {
			return fmt.Errorf("%d syncs done, want %d", got, n)
		}
		return nil
	})
}

// settle waits until every sync started so far has completed.
func (e *env) settle() {
	e.t.Helper()
	e.waitSyncs(e.started.Load())
}

// eventually retries f for up to 15 s (e.patience when set).
func (e *env) eventually(what string, f func() error) {
	e.t.Helper()
	patience := 15 * time.Second
	if e.patience > 0 {
		patience = e.patience
	}
	if err := waitfor.Retry(context.Background(), patience, 10*time.Millisecond, f); err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
}

// transact commits ops through the test's NB client.
func (e *env) transact(ops ...ovsdb.Operation) {
	e.t.Helper()
	res, err := e.nbc.Transact(context.Background(), ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		e.t.Fatalf("transact: %v", err)
	}
}

// addRouter creates a logical router.
func (e *env) addRouter(name string) {
	e.t.Helper()
	ops, err := e.nbc.Create(&nbdb.LogicalRouter{Name: name})
	if err != nil {
		e.t.Fatal(err)
	}
	e.transact(ops...)
}

// topology creates ovn_cluster_router, GR_node1..n and harness rows that must
// survive everything: a no-reroute policy, a node SNAT per GR, an address set.
func (e *env) topology(n int) {
	e.t.Helper()
	h := map[string]string{harnessKey: "true"}
	var ms []model.Model
	ms = append(ms, &nbdb.LogicalRouterPolicy{UUID: "hpol", Priority: 102, Action: "allow",
		Match: "ip4.src == 10.244.0.0/16 && ip4.dst == 10.244.0.0/16", ExternalIDs: h})
	ms = append(ms, &nbdb.LogicalRouter{UUID: "cr", Name: nbstate.ClusterRouter, Policies: []string{"hpol"}})
	for i := 1; i <= n; i++ {
		nat := fmt.Sprintf("hnat%d", i)
		ms = append(ms, &nbdb.NAT{UUID: nat, Type: "snat", ExternalIP: fmt.Sprintf("172.18.0.2%d", i), LogicalIP: "10.244.0.0/16", ExternalIDs: h})
		ms = append(ms, &nbdb.LogicalRouter{UUID: fmt.Sprintf("gr%d", i), Name: nbstate.GatewayRouter(fmt.Sprintf("node%d", i)), Nat: []string{nat}})
	}
	ms = append(ms, &nbdb.AddressSet{Name: "harness_set", Addresses: []string{"10.0.0.1"}, ExternalIDs: h})
	ops, err := e.nbc.Create(ms...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.transact(ops...)
}

// foreignRows dumps the rows we do not own, to check nothing touched them.
func (e *env) foreignRows() []string {
	e.t.Helper()
	ctx := context.Background()
	var pols []nbdb.LogicalRouterPolicy
	var nats []nbdb.NAT
	var sets []nbdb.AddressSet
	var routers []nbdb.LogicalRouter
	for _, l := range []any{&pols, &nats, &sets, &routers} {
		if err := e.nbc.List(ctx, l); err != nil {
			e.t.Fatal(err)
		}
	}
	parent := map[string]string{}
	for _, r := range routers {
		for _, u := range append(slices.Clone(r.Policies), r.Nat...) {
			parent[u] = r.Name
		}
	}
	var out []string
	for _, p := range pols {
		if !nbstate.Owned(p.ExternalIDs) {
			out = append(out, fmt.Sprintf("%s policy %d %s", parent[p.UUID], p.Priority, p.Match))
		}
	}
	for _, n := range nats {
		if !nbstate.Owned(n.ExternalIDs) {
			out = append(out, fmt.Sprintf("%s nat %s %s", parent[n.UUID], n.ExternalIP, n.LogicalIP))
		}
	}
	for _, s := range sets {
		if !nbstate.Owned(s.ExternalIDs) {
			out = append(out, "set "+s.Name)
		}
	}
	sort.Strings(out)
	return out
}

// ours returns the NB rows we own, read back through nbstate (Dump lines), and
// fails on stale rows (duplicates, unparsable ids).
func (e *env) ours() []string {
	e.t.Helper()
	cur := e.current()
	if len(cur.Stale) > 0 {
		e.t.Errorf("stale rows in NB: %+v", cur.Stale)
	}
	return nbstate.Dump(cur.Rows)
}

// reroutes maps "pod -> egressip nexthops" for every reroute policy.
func (e *env) reroutes() map[string]string {
	e.t.Helper()
	cur := e.current()
	out := map[string]string{}
	for k, p := range cur.Rows.Policies {
		if k.IDs.Rule == nbstate.RuleReroute {
			nh := slices.Clone(p.Nexthops)
			slices.Sort(nh)
			out[k.IDs.Pod] = fmt.Sprintf("%s %s [%s]", k.IDs.Name, p.Match, strings.Join(nh, " "))
		}
	}
	return out
}

// policyNexthopsInDB lists the next hops of every Logical_Router_Policy row as the database holds them now (a
// select transaction, not the test client's cache), sorted.
func (e *env) policyNexthopsInDB() []string {
	e.t.Helper()
	op := ovsdb.Operation{Op: ovsdb.OperationSelect, Table: "Logical_Router_Policy", Where: []ovsdb.Condition{}, Columns: []string{"nexthops"}}
	res, err := e.nbc.Transact(context.Background(), op)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, []ovsdb.Operation{op})
	}
	if err != nil {
		e.t.Fatalf("select Logical_Router_Policy: %v", err)
	}
	var out []string
	for _, row := range res[0].Rows {
		switch v := row["nexthops"].(type) {
		case string:
			out = append(out, v)
		case ovsdb.OvsSet:
			for _, x := range v.GoSet {
				out = append(out, fmt.Sprint(x))
			}
		default:
			e.t.Fatalf("Logical_Router_Policy nexthops: unexpected %T %v", v, v)
		}
	}
	slices.Sort(out)
	return out
}

// snats lists "router external <- logical (egressip)" for our SNAT rows, sorted.
func (e *env) snats() []string {
	e.t.Helper()
	cur := e.current()
	var out []string
	for k, n := range cur.Rows.NATs {
		out = append(out, fmt.Sprintf("%s %s <- %s (%s)", k.Router, n.ExternalIP, n.LogicalIP, k.IDs.Name))
	}
	sort.Strings(out)
	return out
}

func (e *env) expectRows(what string, want map[string]string, wantSNAT []string) {
	e.t.Helper()
	sort.Strings(wantSNAT)
	e.eventually(what, func() error {
		got := e.reroutes()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("reroutes:\n got  %v\n want %v", got, want)
		}
		if gs := e.snats(); !slices.Equal(gs, wantSNAT) {
			return fmt.Errorf("SNAT rows:\n got  %v\n want %v", gs, wantSNAT)
		}
		return nil
	})
}

func (e *env) expectStatus(name string, want ...string) {
	e.t.Helper()
	e.eventually("status of "+name, func() error {
		got, err := e.status(name)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("status.items = %v, want %v", got, want)
		}
		return nil
	})
}

// status returns "ip@node" items.
func (e *env) status(name string) ([]string, error) {
	eip, err := e.eip.K8sV1().EgressIPs().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, it := range eip.Status.Items {
		out = append(out, it.EgressIP+"@"+it.Node)
	}
	return out, nil
}

// eventLines returns the Events seen, as "<type> <reason> <message>".
func (e *env) eventLines() []string {
	e.t.Helper()
	if e.recorder != nil {
		e.mu.Lock()
		defer e.mu.Unlock()
		return slices.Clone(e.events)
	}
	list, err := e.kube.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		out = append(out, ev.Type+" "+ev.Reason+" "+ev.Message)
	}
	return out
}

// expectEvent waits for a Warning event with reason whose message contains every part.
func (e *env) expectEvent(reason string, parts ...string) {
	e.t.Helper()
	e.eventually("event "+reason, func() error {
		events := e.eventLines()
		for _, ev := range events {
			if !strings.HasPrefix(ev, "Warning "+reason+" ") {
				continue
			}
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(ev, p)
			}
			if ok {
				return nil
			}
		}
		return fmt.Errorf("no such event among %q", events)
	})
}

// metric returns the value of a counter or gauge (with label values for a vec).
func (e *env) metric(name string, labelValues ...string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var lv []string
			for _, l := range m.GetLabel() {
				lv = append(lv, l.GetValue())
			}
			if !slices.Equal(lv, labelValues) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// expectMetric waits until a metric has the wanted value.
func (e *env) expectMetric(want float64, name string, labelValues ...string) {
	e.t.Helper()
	e.eventually(name, func() error {
		if got := e.metric(name, labelValues...); got != want {
			return fmt.Errorf("%s%v = %v, want %v", name, labelValues, got, want)
		}
		return nil
	})
}

// --- objects ---

func (e *env) create(obj runtime.Object) {
	e.t.Helper()
	ctx := context.Background()
	var err error
	switch o := obj.(type) {
	case *corev1.Node:
		var created *corev1.Node
		if created, err = e.kube.CoreV1().Nodes().Create(ctx, o, metav1.CreateOptions{}); err == nil {
			created.Status = o.Status // a real apiserver ignores status on create
			_, err = e.kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		}
	case *corev1.Namespace:
		if _, err = e.kube.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{}); err == nil {
			// Pods need the namespace's default ServiceAccount (no controller-manager here).
			sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: o.Name}}
			_, err = e.kube.CoreV1().ServiceAccounts(o.Name).Create(ctx, sa, metav1.CreateOptions{})
		}
	case *corev1.Pod:
		if len(o.Spec.Containers) == 0 {
			o.Spec.Containers = []corev1.Container{{Name: "c", Image: "none"}}
		}
		var created *corev1.Pod
		if created, err = e.kube.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{}); err == nil {
			created.Status = o.Status
			_, err = e.kube.CoreV1().Pods(o.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		}
	case *egressipv1.EgressIP:
		_, err = e.eip.K8sV1().EgressIPs().Create(ctx, o, metav1.CreateOptions{})
	default:
		err = fmt.Errorf("unexpected %T", obj)
	}
	if err != nil {
		e.t.Fatalf("create: %v", err)
	}
}

// updateNode applies fs to the node in one update (one watch event), again on a
// conflict (a zone controller patches its node's annotations meanwhile).
func (e *env) updateNode(name string, fs ...func(*corev1.Node)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.kube.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, f := range fs {
			f(n)
		}
		updated, err := e.kube.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		if equality.Semantic.DeepEqual(updated.Status, n.Status) {
			return nil
		}
		updated.Status = n.Status
		_, err = e.kube.CoreV1().Nodes().UpdateStatus(context.Background(), updated, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) updateNamespace(name string, f func(*corev1.Namespace)) {
	e.t.Helper()
	n, err := e.kube.CoreV1().Namespaces().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	f(n)
	if _, err := e.kube.CoreV1().Namespaces().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) updatePod(ns, name string, f func(*corev1.Pod)) {
	e.t.Helper()
	p, err := e.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	f(p)
	updated, err := e.kube.CoreV1().Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{})
	if err == nil {
		updated.Status = p.Status
		_, err = e.kube.CoreV1().Pods(ns).UpdateStatus(context.Background(), updated, metav1.UpdateOptions{})
	}
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) updateEgressIP(name string, f func(*egressipv1.EgressIP)) {
	e.t.Helper()
	o, err := e.eip.K8sV1().EgressIPs().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	f(o)
	if _, err := e.eip.K8sV1().EgressIPs().Update(context.Background(), o, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// updateEgressIPStatus writes the status subresource as another client would.
func (e *env) updateEgressIPStatus(name string, f func(*egressipv1.EgressIP)) {
	e.t.Helper()
	o, err := e.eip.K8sV1().EgressIPs().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	f(o)
	if _, err := e.eip.K8sV1().EgressIPs().UpdateStatus(context.Background(), o, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) deletePod(ns, name string) {
	e.t.Helper()
	if err := e.kube.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) deleteNode(name string) {
	e.t.Helper()
	if err := e.kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) deleteEgressIP(name string) {
	e.t.Helper()
	if err := e.eip.K8sV1().EgressIPs().Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// node i: InternalIP 172.18.0.1i on 172.18.0.0/16, join IP 100.64.0.(i+1),
// subnet 10.244.i.0/24 (management IP 10.244.i.2), Ready; labelled if assignable.
func node(i int, assignable bool) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   fmt.Sprintf("node%d", i),
			Labels: map[string]string{},
			Annotations: map[string]string{
				annotations.PrimaryIfAddr:          fmt.Sprintf(`{"ipv4":"172.18.0.1%d/16"}`, i),
				annotations.GatewayRouterLRPIfAddr: fmt.Sprintf(`{"ipv4":"100.64.0.%d/16"}`, i+1),
				annotations.NodeSubnets:            fmt.Sprintf(`{"default":["10.244.%d.0/24"]}`, i),
			},
		},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("172.18.0.1%d", i)}},
		},
	}
	if assignable {
		n.Labels[annotations.EgressAssignableLabel] = ""
	}
	return n
}

func labelAssignable(n *corev1.Node) {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[annotations.EgressAssignableLabel] = ""
}

func unlabelAssignable(n *corev1.Node) { delete(n.Labels, annotations.EgressAssignableLabel) }

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func pod(ns, name, ip string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

func egressIP(name string, age int, ips []string, nsLabels, podLabels map[string]string) *egressipv1.EgressIP {
	return &egressipv1.EgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(time.Date(2025, 1, 1, 0, 0, age, 0, time.UTC))},
		Spec: egressipv1.EgressIPSpec{
			EgressIPs:         ips,
			NamespaceSelector: metav1.LabelSelector{MatchLabels: nsLabels},
			PodSelector:       metav1.LabelSelector{MatchLabels: podLabels},
		},
	}
}

// fakeReach is a Reachability that tests flip; it notifies the master.
type fakeReach struct {
	mu          sync.Mutex
	unreachable map[string]bool
	daemon      map[string]string // DaemonIdentity: what the node's latest passed probe carried
	ch          chan struct{}
}

func newFakeReach() *fakeReach {
	return &fakeReach{unreachable: map[string]bool{}, daemon: map[string]string{}, ch: make(chan struct{}, 1)}
}

func (f *fakeReach) DaemonID(node string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.daemon[node]
}

// answer makes node reachable, its probes carrying daemon identity id, as one change.
func (f *fakeReach) answer(node, id string) {
	f.mu.Lock()
	f.unreachable[node] = false
	f.daemon[node] = id
	f.mu.Unlock()
	select {
	case f.ch <- struct{}{}:
	default:
	}
}

func (f *fakeReach) Reachable(node string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.unreachable[node]
}

func (f *fakeReach) Changes() <-chan struct{} { return f.ch }

func (f *fakeReach) set(node string, reachable bool) {
	f.mu.Lock()
	f.unreachable[node] = !reachable
	f.mu.Unlock()
	select {
	case f.ch <- struct{}{}:
	default:
	}
}
