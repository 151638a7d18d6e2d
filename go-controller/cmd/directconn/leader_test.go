package main

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/kube"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
)

// The names dist/manifests/directconn.yaml gives.
const (
	manifestNamespace = "ovn-egressip"
	providerSA        = "system:serviceaccount:ovn-egressip:directconn-provider"
	consumerSA        = "system:serviceaccount:ovn-egressip:directconn-consumer"
	providerLease     = "ovn-egressip-directconn-provider"
)

// pollTimeout bounds every wait on the apiserver; convergence takes about a second here.
const pollTimeout = 30 * time.Second

// applyManifest applies dist/manifests/directconn.yaml (namespace, RBAC, Deployments that no controller runs here).
func applyManifest(t *testing.T, env *apiserver.Env) {
	t.Helper()
	root, err := apiserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(env.Kubectl, "--kubeconfig", env.Kubeconfig, "apply", "-f",
		filepath.Join(root, "dist", "manifests", "directconn.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply dist/manifests/directconn.yaml: %v\n%s", err, out)
	}
}

// as returns a copy of the admin config cfg that acts as user (RBAC applies: no system:masters).
func as(cfg *rest.Config, user string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user}
	return c
}

// requestLog records the requests made through a client config (method, path and response status).
type requestLog struct {
	mu   sync.Mutex
	reqs []string
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		status := "error"
		if err == nil {
			status = fmt.Sprint(resp.StatusCode)
		}
		l.mu.Lock()
		l.reqs = append(l.reqs, r.Method+" "+r.URL.Path+" "+status)
		l.mu.Unlock()
		return resp, err
	})
}

// matching returns the recorded requests for which keep is true.
func (l *requestLog) matching(keep func(method, path, status string) bool) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.reqs {
		f := strings.Fields(r)
		if keep(f[0], f[1], f[2]) {
			out = append(out, r)
		}
	}
	return out
}

func isLease(path string) bool { return strings.Contains(path, "/apis/coordination.k8s.io/") }

func isWrite(method string) bool { return method != http.MethodGet }

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// replica is one directconn provider run in this process.
type replica struct {
	name   string
	log    *requestLog
	cancel context.CancelFunc
	done   chan error
}

func startProviderReplica(t *testing.T, cfg *rest.Config, name string) *replica {
	t.Helper()
	r := &replica{name: name, log: &requestLog{}, done: make(chan error, 1)}
	rc := rest.CopyConfig(cfg)
	rc.Wrap(r.log.wrap)
	opts := options{mode: modeProvider, clusterID: "cluster-b", workers: 1, election: election{
		enabled: true, namespace: manifestNamespace, leaseName: providerLease, identity: name,
		leaseDuration: 4 * time.Second, renewDeadline: 3 * time.Second, retryPeriod: 200 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- runClusters(ctx, opts, clusterConfigs{local: rc}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Logf("%s stopped: %v", r.name, err)
		}
		if denied := r.log.matching(func(_, _, s string) bool { return s == "403" }); len(denied) > 0 {
			t.Errorf("%s: requests the manifest's RBAC denied: %v", r.name, denied)
		}
	})
	return r
}

func (r *replica) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("%s: run after cancel = %v, want nil", r.name, err)
		}
	case <-time.After(pollTimeout):
		t.Fatalf("%s: run did not return within %s of its cancel", r.name, pollTimeout)
	}
}

// createShadow creates the ShadowEndpointSlice demo/name with one endpoint, addr, and port 80 written as the
// apiserver defaults an EndpointSlice's port (name "", protocol TCP), as a reflected slice has it.
func createShadow(t *testing.T, dyn dynamic.Interface, name, addr string) {
	t.Helper()
	s := &offv1beta1.ShadowEndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web",
			directconn.OriginClusterIDLabel: "cluster-a"}},
		Spec: offv1beta1.ShadowEndpointSliceSpec{Template: offv1beta1.EndpointSliceTemplate{
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To(""), Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolTCP)}},
		}},
	}
	if err := (kube.Shadows{Client: dyn}).Create(context.Background(), s); err != nil {
		t.Fatalf("create ShadowEndpointSlice %s: %v", name, err)
	}
}

// createIdentityConfiguration creates this cluster's Configuration for cluster id whose pod CIDR it sees unchanged,
// so that the shadows' addresses map to themselves without a Warning Event (Events are written asynchronously
// and would blur the count of each replica's writes).
func createIdentityConfiguration(t *testing.T, dyn dynamic.Interface, id, cidr string) {
	t.Helper()
	ctx := context.Background()
	cfg := &netv1beta1.Configuration{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: id, Labels: map[string]string{directconn.RemoteClusterIDLabel: id}},
		Spec:       netv1beta1.ConfigurationSpec{Remote: netv1beta1.ClusterConfig{CIDR: netv1beta1.ClusterConfigCIDR{Pod: []netv1beta1.CIDR{netv1beta1.CIDR(cidr)}}}},
	}
	u, err := kube.ToUnstructured(cfg, netv1beta1.SchemeGroupVersion.WithKind("Configuration"))
	if err != nil {
		t.Fatal(err)
	}
	r := dyn.Resource(netv1beta1.ConfigurationResource).Namespace("demo")
	created, err := r.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Object["status"] = map[string]interface{}{"remote": map[string]interface{}{"cidr": map[string]interface{}{"pod": []interface{}{cidr}}}}
	if _, err := r.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitSlices waits until the EndpointSlices of demo managed by directconn are exactly want (name -> address), each
// with a single controller reference to the ShadowEndpointSlice of its name, and returns them by name.
func waitSlices(t *testing.T, k kubernetes.Interface, dyn dynamic.Interface, want map[string]string) map[string]discoveryv1.EndpointSlice {
	t.Helper()
	var last []string
	var got map[string]discoveryv1.EndpointSlice
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, pollTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := k.DiscoveryV1().EndpointSlices("demo").List(ctx, metav1.ListOptions{
			LabelSelector: directconn.ShadowManagedByLabel + "=" + directconn.ShadowManagedBy})
		if err != nil {
			return false, err
		}
		last, got = nil, map[string]discoveryv1.EndpointSlice{}
		ok := len(list.Items) == len(want)
		for _, s := range list.Items {
			var addrs []string
			for _, e := range s.Endpoints {
				addrs = append(addrs, e.Addresses...)
			}
			ref := metav1.GetControllerOf(&s)
			shadow, err := dyn.Resource(offv1beta1.ShadowEndpointSliceResource).Namespace("demo").Get(ctx, s.Name, metav1.GetOptions{})
			owned := err == nil && ref != nil && ref.UID == shadow.GetUID() && len(s.OwnerReferences) == 1
			last = append(last, fmt.Sprintf("%s=%v owned=%v", s.Name, addrs, owned))
			ok = ok && owned && len(addrs) == 1 && addrs[0] == want[s.Name]
			got[s.Name] = s
		}
		return ok, nil
	})
	if err != nil {
		sort.Strings(last)
		t.Fatalf("EndpointSlices of demo: want exactly %v, each owned by its shadow; last seen %v: %v", want, last, err)
	}
	return got
}

func leaseHolder(t *testing.T, k kubernetes.Interface) string {
	t.Helper()
	l, err := k.CoordinationV1().Leases(manifestNamespace).Get(context.Background(), providerLease, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Lease: %v", err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// TestProviderReplicasOneActs runs two provider replicas against one apiserver, as the ServiceAccount of
// dist/manifests/directconn.yaml (its RBAC applies). Only the Lease holder runs the controller; the other reads
// nothing but the Lease. When the leader's context is canceled it returns nil, and the other takes over and
// converges the same EndpointSlices (kept, not recreated, no duplicates) plus the changes made meanwhile.
func TestProviderReplicasOneActs(t *testing.T) {
	env := apiserver.Start(t)
	applyManifest(t, env)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	dyn := dynamic.NewForConfigOrDie(env.Config)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createIdentityConfiguration(t, dyn, "cluster-a", "10.244.0.0/16")
	createShadow(t, dyn, "web-1", "10.244.1.5")
	createShadow(t, dyn, "web-2", "10.244.1.6")

	sa := as(env.Config, providerSA)
	replicas := map[string]*replica{}
	for _, name := range []string{"directconn-1", "directconn-2"} {
		replicas[name] = startProviderReplica(t, sa, name)
	}
	before := waitSlices(t, admin, dyn, map[string]string{"web-1": "10.244.1.5", "web-2": "10.244.1.6"})
	leader := replicas[leaseHolder(t, admin)]
	if leader == nil {
		t.Fatalf("Lease holder %q is neither replica", leaseHolder(t, admin))
	}
	standby := replicas[map[string]string{"directconn-1": "directconn-2", "directconn-2": "directconn-1"}[leader.name]]

	// The standby campaigns: it has read the Lease (so it is running) and has made no other request at all.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, pollTimeout, true, func(context.Context) (bool, error) {
		return len(standby.log.matching(func(m, p, _ string) bool { return isLease(p) })) > 0, nil
	})
	if err != nil {
		t.Fatalf("standby %s never read the Lease", standby.name)
	}
	if reqs := standby.log.matching(func(_, p, _ string) bool { return !isLease(p) }); len(reqs) > 0 {
		t.Fatalf("standby %s made requests besides the Lease: %v", standby.name, reqs)
	}
	if writes := leader.log.matching(func(m, p, _ string) bool { return isWrite(m) && !isLease(p) }); len(writes) == 0 {
		t.Fatalf("leader %s wrote nothing, yet the EndpointSlices exist", leader.name)
	}

	leader.stop(t)
	leaderWrites := len(leader.log.matching(func(m, _, _ string) bool { return isWrite(m) }))
	// Changes only the new leader can converge: one shadow changes, one is added.
	u, err := dyn.Resource(offv1beta1.ShadowEndpointSliceResource).Namespace("demo").Get(ctx, "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch := `{"spec":{"template":{"endpoints":[{"addresses":["10.244.1.7"]}]}}}`
	if _, err := dyn.Resource(offv1beta1.ShadowEndpointSliceResource).Namespace("demo").Patch(ctx, u.GetName(),
		types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	createShadow(t, dyn, "web-3", "10.244.1.8")

	after := waitSlices(t, admin, dyn, map[string]string{"web-1": "10.244.1.7", "web-2": "10.244.1.6", "web-3": "10.244.1.8"})
	if h := leaseHolder(t, admin); h != standby.name {
		t.Errorf("Lease holder after the takeover = %q, want %s", h, standby.name)
	}
	for _, name := range []string{"web-1", "web-2"} {
		if after[name].UID != before[name].UID {
			t.Errorf("EndpointSlice %s was recreated by the new leader (UID %s -> %s)", name, before[name].UID, after[name].UID)
		}
	}
	// web-2 was already right: the new leader neither rewrites it nor tries to create it again.
	if after["web-2"].ResourceVersion != before["web-2"].ResourceVersion {
		t.Errorf("EndpointSlice web-2 was already converged, yet it changed")
	}
	if w := standby.log.matching(func(m, p, s string) bool {
		return isWrite(m) && !isLease(p) && (strings.HasSuffix(p, "/web-2") || m == http.MethodDelete || s == "409")
	}); len(w) > 0 {
		t.Errorf("the new leader rewrote, deleted or re-created converged EndpointSlices: %v", w)
	}
	if n := len(leader.log.matching(func(m, _, _ string) bool { return isWrite(m) })); n != leaderWrites {
		t.Errorf("the old leader wrote %d more time(s) after its run returned", n-leaderWrites)
	}
	// Requests denied by the manifest's RBAC are reported by the replicas' cleanup.
}
