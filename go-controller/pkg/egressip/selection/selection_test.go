package selection

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
)

func ns(name string, lbl map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}
}

func pod(namespace, name string, lbl map[string]string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: lbl}}
	p.Status.Phase = corev1.PodRunning
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func eip(name string, created int, nsSel, podSel metav1.LabelSelector, assigned bool) *egressipv1.EgressIP {
	e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{
		Name:              name,
		CreationTimestamp: metav1.NewTime(time.Unix(int64(created), 0)),
	}}
	e.Spec.EgressIPs = []string{"172.18.0.50"}
	e.Spec.NamespaceSelector = nsSel
	e.Spec.PodSelector = podSel
	if assigned {
		e.Status.Items = []egressipv1.EgressIPStatusItem{{Node: "n1", EgressIP: "172.18.0.50"}}
	}
	return e
}

func names(pods []*corev1.Pod) []string {
	out := []string{}
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

func TestServedPods(t *testing.T) {
	prod := ns("prod", map[string]string{"environment": "production"})
	dev := ns("dev", map[string]string{"environment": "development"})
	bare := ns("bare", nil)
	namespaces := map[string]*corev1.Namespace{"prod": prod, "dev": dev, "bare": bare}
	notDev := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "environment", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"development"}}}}
	web := metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	noTier := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}}
	hasEnv := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "environment", Operator: metav1.LabelSelectorOpExists}}}
	bad := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "environment", Operator: "Bogus"}}}

	hostNet := pod("prod", "hostnet", map[string]string{"app": "web"}, "172.18.0.2")
	hostNet.Spec.HostNetwork = true
	done := pod("prod", "done", map[string]string{"app": "web"}, "10.244.1.9")
	done.Status.Phase = corev1.PodSucceeded
	failed := pod("prod", "failed", map[string]string{"app": "web"}, "10.244.1.10")
	failed.Status.Phase = corev1.PodFailed
	legacyIP := pod("prod", "legacy", map[string]string{"app": "web"})
	legacyIP.Status.PodIP = "10.244.1.11"

	pods := []*corev1.Pod{
		pod("prod", "web-b", map[string]string{"app": "web"}, "10.244.1.3"),
		pod("prod", "web-a", map[string]string{"app": "web", "tier": "front"}, "10.244.2.3", "fd00:10:244:2::3"),
		pod("prod", "db", map[string]string{"app": "db"}, "10.244.1.4"),
		pod("dev", "web", map[string]string{"app": "web"}, "10.244.3.3"),
		pod("bare", "web", map[string]string{"app": "web"}, "10.244.3.4"),
		pod("gone-ns", "web", map[string]string{"app": "web"}, "10.244.3.5"),
		pod("prod", "noip", map[string]string{"app": "web"}),
		hostNet, done, failed, legacyIP,
	}

	tests := []struct {
		name   string
		eips   []*egressipv1.EgressIP
		want   map[string][]string
		errors []string
	}{
		{
			name: "NotIn namespaces and podSelector; unservable pods skipped",
			eips: []*egressipv1.EgressIP{eip("prod", 1, notDev, web, true)},
			want: map[string][]string{"prod": {"bare/web", "prod/legacy", "prod/web-a", "prod/web-b"}},
		},
		{
			name: "empty podSelector selects every pod of the namespaces; Exists",
			eips: []*egressipv1.EgressIP{eip("all", 1, hasEnv, metav1.LabelSelector{}, true)},
			want: map[string][]string{"all": {"dev/web", "prod/db", "prod/legacy", "prod/web-a", "prod/web-b"}},
		},
		{
			name: "DoesNotExist on pods",
			eips: []*egressipv1.EgressIP{eip("notier", 1, metav1.LabelSelector{MatchLabels: map[string]string{"environment": "production"}}, noTier, true)},
			want: map[string][]string{"notier": {"prod/db", "prod/legacy", "prod/web-b"}},
		},
		{
			name: "overlap: older EgressIP serves, younger stands by",
			eips: []*egressipv1.EgressIP{
				eip("young", 5, notDev, web, true),
				eip("old", 2, hasEnv, web, true),
			},
			want: map[string][]string{
				"old":   {"dev/web", "prod/legacy", "prod/web-a", "prod/web-b"},
				"young": {"bare/web"},
			},
		},
		{
			name: "overlap: same age, name decides",
			eips: []*egressipv1.EgressIP{eip("b", 1, hasEnv, web, true), eip("a", 1, hasEnv, web, true)},
			want: map[string][]string{"a": {"dev/web", "prod/legacy", "prod/web-a", "prod/web-b"}, "b": nil},
		},
		{
			name: "overlap: an EgressIP with an assigned IP wins over an older one with none",
			eips: []*egressipv1.EgressIP{eip("old-unassigned", 1, hasEnv, web, false), eip("young", 9, hasEnv, web, true)},
			want: map[string][]string{"young": {"dev/web", "prod/legacy", "prod/web-a", "prod/web-b"}, "old-unassigned": nil},
		},
		{
			name:   "invalid selector serves nothing and takes nothing",
			eips:   []*egressipv1.EgressIP{eip("broken", 1, bad, web, true), eip("ok", 2, hasEnv, web, true)},
			want:   map[string][]string{"ok": {"dev/web", "prod/legacy", "prod/web-a", "prod/web-b"}},
			errors: []string{"broken"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := ServedPods(tc.eips, namespaces, pods)
			got := map[string][]string{}
			for k, v := range res.Served {
				if len(v) == 0 {
					got[k] = nil
					continue
				}
				got[k] = names(v)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("served = %v, want %v", got, tc.want)
			}
			var errs []string
			for k := range res.Errors {
				errs = append(errs, k)
			}
			if !reflect.DeepEqual(errs, tc.errors) {
				t.Errorf("errors = %v, want %v", res.Errors, tc.errors)
			}
		})
	}
}

func TestCompileErrorNamesField(t *testing.T) {
	e := eip("x", 1, metav1.LabelSelector{}, metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Nope"}}}, false)
	_, err := Compile(e)
	if err == nil || !strings.Contains(err.Error(), "spec.podSelector") || !strings.Contains(err.Error(), "EgressIP x") {
		t.Fatalf("error %v does not name the object and field", err)
	}
}

func TestPodIPsUnmapsAndSkipsGarbage(t *testing.T) {
	p := pod("a", "b", nil, "::ffff:10.0.0.1", "garbage", "fd00::1")
	got := PodIPs(p)
	if len(got) != 2 || got[0].String() != "10.0.0.1" || got[1].String() != "fd00::1" {
		t.Fatalf("PodIPs = %v", got)
	}
}

// TestCompilerFollowsSelectorChanges: the Compiler's memory never answers for
// selectors that changed, even when the EgressIP object is edited in place, and
// forgets EgressIPs that are gone.
func TestCompilerFollowsSelectorChanges(t *testing.T) {
	c := NewCompiler()
	e := eip("a", 1, metav1.LabelSelector{}, metav1.LabelSelector{MatchLabels: map[string]string{"app": "x"}}, false)
	n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	px := pod("n", "px", map[string]string{"app": "x"}, "10.0.0.1")
	py := pod("n", "py", map[string]string{"app": "y"}, "10.0.0.2")
	for i := 0; i < 2; i++ { // compiled, then remembered
		if s, err := c.Compile(e); err != nil || !s.Matches(n, px) || s.Matches(n, py) {
			t.Fatalf("round %d: app=x selector: err %v, matches x %v, y %v", i, err, s.Matches(n, px), s.Matches(n, py))
		}
	}
	e.Spec.PodSelector.MatchLabels["app"] = "y" // the same object, edited in place
	if s, err := c.Compile(e); err != nil || s.Matches(n, px) || !s.Matches(n, py) {
		t.Fatalf("after the edit: err %v, matches x %v, y %v", err, s.Matches(n, px), s.Matches(n, py))
	}
	e.Spec.PodSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Nope"}}
	if _, err := c.Compile(e); err == nil || !strings.Contains(err.Error(), "spec.podSelector") {
		t.Fatalf("bad selector: error %v", err)
	}
	if _, err := c.Compile(e); err == nil {
		t.Fatal("bad selector remembered as good")
	}
	b := eip("b", 2, metav1.LabelSelector{}, metav1.LabelSelector{}, false)
	r := c.Rank([]*egressipv1.EgressIP{e, b})
	if _, ok := r.Errors["a"]; !ok || len(r.Names) != 1 || r.Names[0] != "b" {
		t.Fatalf("rank: names %v, errors %v", r.Names, r.Errors)
	}
	c.Rank([]*egressipv1.EgressIP{b})
	if _, ok := c.memo["a"]; ok || len(c.memo) != 1 {
		t.Fatalf("memory after a is gone: %v", c.memo)
	}
}

// TestSameSelector: the Compiler's comparison is equality.Semantic's: nil and
// empty alike, any other difference counts.
func TestSameSelector(t *testing.T) {
	req := func(op metav1.LabelSelectorOperator, vals ...string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: "k", Operator: op, Values: vals}
	}
	base := metav1.LabelSelector{MatchLabels: map[string]string{"a": "1"}, MatchExpressions: []metav1.LabelSelectorRequirement{req(metav1.LabelSelectorOpIn, "x")}}
	for _, tc := range []struct {
		a, b metav1.LabelSelector
		want bool
	}{
		{metav1.LabelSelector{}, metav1.LabelSelector{MatchLabels: map[string]string{}, MatchExpressions: []metav1.LabelSelectorRequirement{}}, true},
		{base, *base.DeepCopy(), true},
		{base, metav1.LabelSelector{MatchLabels: map[string]string{"a": "2"}, MatchExpressions: base.MatchExpressions}, false},
		{base, metav1.LabelSelector{MatchLabels: base.MatchLabels, MatchExpressions: []metav1.LabelSelectorRequirement{req(metav1.LabelSelectorOpNotIn, "x")}}, false},
		{base, metav1.LabelSelector{MatchLabels: base.MatchLabels, MatchExpressions: []metav1.LabelSelectorRequirement{req(metav1.LabelSelectorOpIn, "x", "y")}}, false},
		{metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{req(metav1.LabelSelectorOpExists)}},
			metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{req(metav1.LabelSelectorOpExists, []string{}...)}}, true},
	} {
		if got := sameSelector(tc.a, tc.b); got != tc.want || got != equality.Semantic.DeepEqual(tc.a, tc.b) {
			t.Errorf("sameSelector(%v, %v) = %v; want %v (equality.Semantic)", tc.a, tc.b, got, tc.want)
		}
	}
}
