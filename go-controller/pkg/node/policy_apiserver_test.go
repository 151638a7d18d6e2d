package node

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// requestLog records, per identity, the write requests sent and every answer 401 or 403.
type requestLog struct {
	mu     sync.Mutex
	writes map[string][]string // identity -> "METHOD path"
	denied []string
}

func (l *requestLog) wrap(who string, cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			l.mu.Lock()
			defer l.mu.Unlock()
			if r.Method != http.MethodGet {
				l.writes[who] = append(l.writes[who], r.Method+" "+r.URL.Path)
			}
			if err == nil && (resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized) {
				l.denied = append(l.denied, fmt.Sprintf("%s: %s %s: %d", who, r.Method, r.URL.Path, resp.StatusCode))
			}
			return resp, err
		})
	})
	return cfg
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestDaemonsUnderNodeWritesPolicy runs the master and three node daemons (local gateway mode, fake hosts) on a real
// apiserver with dist/manifests applied: the master as its ServiceAccount, each node daemon with a token bound to its
// Node, as a kubelet issues them. An egress IP is assigned, its holder reports it ready, it moves to another node whose
// daemon reports it ready while the old holder takes it off its ready list. No request is denied, and each daemon
// writes to its own Node only; a daemon restarted in shared gateway mode removes its ready list.
func TestDaemonsUnderNodeWritesPolicy(t *testing.T) {
	env := apiserver.Start(t)
	nb := nbserver.Start(t)
	env.ApplyManifests(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	adminEIP := egressipclientset.NewForConfigOrDie(env.Config)

	nodes := []string{"node1", "node2", "node3"}
	for i, name := range nodes {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{},
			Annotations: map[string]string{
				annotations.NodeSubnets:            fmt.Sprintf(`{"default":["10.244.%d.0/24"]}`, i+1),
				annotations.GatewayRouterLRPIfAddr: fmt.Sprintf(`{"ipv4":"100.64.0.%d/16"}`, i+2),
			}}}
		if name != "node1" {
			n.Labels[annotations.EgressAssignableLabel] = ""
		}
		apiserver.CreateReadyNode(ctx, t, admin, n, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("172.18.0.1%d", i+1)})
	}

	log := &requestLog{writes: map[string][]string{}}
	// The policy is loaded asynchronously: wait until node1's token is refused a label on node1 (dry run).
	tok1, err := apiserver.ServiceAccountToken(ctx, admin, "ovn-egressip", "ovnkube-egressip-node", "node1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	probe := kubernetes.NewForConfigOrDie(apiserver.TokenConfig(env.Config, tok1))
	if _, err := apiserver.PolicyRefusal(ctx, "ovnkube-egressip-node-writes", func(ctx context.Context) error {
		_, err := probe.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}); err != nil {
		t.Fatalf("policy not enforced: %v", err)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	params := map[string]Params{}
	stops := map[string]func(){}
	startDaemon := func(p Params) {
		dctx, dcancel := context.WithCancel(ctx)
		done := make(chan struct{})
		stops[p.NodeName] = func() { dcancel(); <-done }
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			if err := Run(dctx, p); err != nil {
				t.Errorf("node %s: %v", p.NodeName, err)
			}
		}()
	}
	for i, name := range nodes {
		tok, err := apiserver.ServiceAccountToken(ctx, admin, "ovn-egressip", "ovnkube-egressip-node", name, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cfg := log.wrap(name, apiserver.TokenConfig(env.Config, tok))
		snap := hostSnap()
		snap.Links[0].Addrs = snap.Links[0].Addrs[:1]
		snap.Links[0].Addrs[0].Prefix = netip.MustParsePrefix(fmt.Sprintf("172.18.0.1%d/16", i+1))
		params[name] = Params{Kube: kubernetes.NewForConfigOrDie(cfg), EgressIP: egressipclientset.NewForConfigOrDie(cfg),
			NodeName: name, GatewayMode: gwmode.Local, ResyncInterval: time.Second, ReleaseLinger: -1, DaemonID: "daemon-" + name,
			host: &fakeHost{snap: snap}}
		startDaemon(params[name])
	}
	mtok, err := apiserver.ServiceAccountToken(ctx, admin, "ovn-egressip", "ovnkube-egressip-master", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mcfg := log.wrap("master", apiserver.TokenConfig(env.Config, mtok))
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := master.Run(ctx, master.Params{Kube: kubernetes.NewForConfigOrDie(mcfg), EgressIP: egressipclientset.NewForConfigOrDie(mcfg),
			NBAddress: nb.Addr, GatewayMode: gwmode.Local, ClusterSubnets: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
			JoinSubnets: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16")}})
		if err != nil {
			t.Errorf("master: %v", err)
		}
	}()

	readyOf := func(node string) string {
		n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return "error: " + err.Error()
		}
		return n.Annotations[annotations.EgressIPsReady]
	}
	waitUntil := func(what string, cond func() (bool, string)) {
		t.Helper()
		var detail string
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			var ok bool
			ok, detail = cond()
			return ok, nil
		}); err != nil {
			log.mu.Lock()
			defer log.mu.Unlock()
			t.Fatalf("%s: %s (denied: %v)", what, detail, log.denied)
		}
	}
	statusIs := func(want string) func() (bool, string) {
		return func() (bool, string) {
			e, err := adminEIP.K8sV1().EgressIPs().Get(ctx, "eip1", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			var got []string
			for _, it := range e.Status.Items {
				got = append(got, it.EgressIP+"@"+it.Node)
			}
			return strings.Join(got, " ") == want, fmt.Sprintf("status %v, want %s", got, want)
		}
	}

	waitUntil("every daemon publishes its egress facts", func() (bool, string) {
		for i, name := range nodes {
			n, err := admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if want := fmt.Sprintf(`{"ipv4":"172.18.0.1%d/16"}`, i+1); n.Annotations[annotations.PrimaryIfAddr] != want {
				return false, fmt.Sprintf("%s: %s = %q, want %s", name, annotations.PrimaryIfAddr, n.Annotations[annotations.PrimaryIfAddr], want)
			}
			if got := n.Annotations[annotations.EgressDaemonID]; got != "daemon-"+name {
				return false, fmt.Sprintf("%s: %s = %q (the policy must let the node write it)", name, annotations.EgressDaemonID, got)
			}
		}
		return true, ""
	})
	if _, err := adminEIP.K8sV1().EgressIPs().Create(ctx, &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "eip1"},
		Spec: egressipv1.EgressIPSpec{EgressIPs: []string{"172.18.0.33"},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil("assigned to node2", statusIs("172.18.0.33@node2"))
	waitUntil("node2 reports it ready", func() (bool, string) {
		v := readyOf("node2")
		return v == `["172.18.0.33"]`, "node2 ready = " + v
	})

	// Move: node2 is no longer egress-assignable.
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "node2", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"k8s.ovn.org/egress-assignable":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil("moved to node3", statusIs("172.18.0.33@node3"))
	waitUntil("node3 reports it ready and node2 no longer does", func() (bool, string) {
		v2, v3 := readyOf("node2"), readyOf("node3")
		return v3 == `["172.18.0.33"]` && v2 == `[]`, "node2 ready = " + v2 + ", node3 ready = " + v3
	})

	// node2's daemon comes back in shared gateway mode: it removes its ready list (the cleanup path).
	stops["node2"]()
	shared := params["node2"]
	shared.GatewayMode = gwmode.Shared
	startDaemon(shared)
	waitUntil("node2 in shared gateway mode removes its ready list", func() (bool, string) {
		n, err := admin.CoreV1().Nodes().Get(ctx, "node2", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		v, ok := n.Annotations[annotations.EgressIPsReady]
		return !ok, "node2 ready = " + v
	})

	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.denied) > 0 {
		t.Errorf("denied requests: %v", log.denied)
	}
	for _, name := range nodes {
		patches := 0
		for _, w := range log.writes[name] {
			switch {
			case w == "PATCH /api/v1/nodes/"+name:
				patches++
			case strings.HasPrefix(w, "POST /api/v1/namespaces/") && strings.HasSuffix(w, "/events"),
				strings.HasPrefix(w, "PATCH /api/v1/namespaces/") && strings.Contains(w, "/events/"):
			default:
				t.Errorf("node daemon %s wrote %s", name, w)
			}
		}
		if patches == 0 {
			t.Errorf("node daemon %s never patched its Node: %v", name, log.writes[name])
		}
	}
}
