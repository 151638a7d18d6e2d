package directconn

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
)

// The overlap scenario: consumer A and providers B and C all use 10.244.0.0/16. A sees B as 10.70.0.0/16 and C as
// 10.71.0.0/16; B sees C as 10.72.0.0/16. Pods: 10.244.1.5 on A, 10.244.2.4 on B, 10.244.3.7 on C.

func service(annotations map[string]string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web", Annotations: annotations}}
}

var optIn = map[string]string{UseDirectConnectionsAnnotation: "true"}

func endpoint(node string, addrs ...string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: addrs, NodeName: ptr.To(node),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
}

func consumerSlice(addressType discoveryv1.AddressType, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-abc12",
			Labels:      map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"},
			Annotations: map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-01-01T00:00:00Z"}},
		AddressType: addressType,
		Endpoints:   eps,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
	}
}

var overlapSlice = consumerSlice(discoveryv1.AddressTypeIPv4,
	endpoint("a-node1", "10.244.1.5"),
	endpoint("vn-b", "10.70.2.4"),
	endpoint("vn-c", "10.71.3.7"))

var nodeClusters = VirtualNodeClusters([]*corev1.Node{
	{ObjectMeta: metav1.ObjectMeta{Name: "a-node1"}},
	{ObjectMeta: metav1.ObjectMeta{Name: "vn-b", Labels: map[string]string{NodeTypeLabel: VirtualNodeType, RemoteClusterIDLabel: "cluster-b"}}},
	{ObjectMeta: metav1.ObjectMeta{Name: "vn-c", Labels: map[string]string{NodeTypeLabel: VirtualNodeType, RemoteClusterIDLabel: "cluster-c"}}},
	{ObjectMeta: metav1.ObjectMeta{Name: "vn-x", Labels: map[string]string{NodeTypeLabel: VirtualNodeType}}},
})

var consumerPeers = Peers([]*netv1beta1.Configuration{
	configuration("cluster-b", []string{"10.244.0.0/16"}, []string{"10.70.0.0/16"}),
	configuration("cluster-c", []string{"10.244.0.0/16"}, []string{"10.71.0.0/16"}),
}, nil)

func addresses(eps []discoveryv1.Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.Addresses...)
	}
	return out
}

func TestBuildShadow(t *testing.T) {
	tests := []struct {
		name         string
		svc          *corev1.Service
		slice        *discoveryv1.EndpointSlice
		target       string
		peers        map[string]Peer
		wantAddrs    []string
		wantData     string // "" = no annotation
		wantProblems []string
	}{
		{
			name: "overlap, reflected to B: B's pod un-remapped, C's pod listed with its real IP",
			svc:  service(optIn), slice: overlapSlice, target: "cluster-b", peers: consumerPeers,
			wantAddrs: []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"},
			wantData:  `{"endpoints":[{"clusterID":"cluster-c","realIP":"10.244.3.7","consumerIP":"10.71.3.7","reflectedIP":"10.71.3.7"}]}`,
		},
		{
			name: "overlap, reflected to C: B's pod listed",
			svc:  service(optIn), slice: overlapSlice, target: "cluster-c", peers: consumerPeers,
			wantAddrs: []string{"10.244.1.5", "10.70.2.4", "10.244.3.7"},
			wantData:  `{"endpoints":[{"clusterID":"cluster-b","realIP":"10.244.2.4","consumerIP":"10.70.2.4","reflectedIP":"10.70.2.4"}]}`,
		},
		{
			name: "not opted in: reflected, no annotation",
			svc:  service(nil), slice: overlapSlice, target: "cluster-b", peers: consumerPeers,
			wantAddrs: []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"},
		},
		{
			name: "opt-in value other than exactly true is off",
			svc:  service(map[string]string{UseDirectConnectionsAnnotation: "True"}), slice: overlapSlice, target: "cluster-b", peers: consumerPeers,
			wantAddrs: []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"},
		},
		{
			name: "no Service: no annotation",
			svc:  nil, slice: overlapSlice, target: "cluster-b", peers: consumerPeers,
			wantAddrs: []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"},
		},
		{
			name: "no endpoint on another provider: no annotation",
			svc:  service(optIn), target: "cluster-b", peers: consumerPeers,
			slice:     consumerSlice(discoveryv1.AddressTypeIPv4, endpoint("a-node1", "10.244.1.5"), endpoint("vn-b", "10.70.2.4"), endpoint("vn-x", "10.9.9.9")),
			wantAddrs: []string{"10.244.1.5", "10.244.2.4", "10.9.9.9"},
		},
		{
			name: "no Configuration for the target: pass through",
			svc:  service(optIn), slice: overlapSlice, target: "cluster-b",
			peers:     Peers([]*netv1beta1.Configuration{configuration("cluster-c", []string{"10.244.0.0/16"}, []string{"10.71.0.0/16"})}, nil),
			wantAddrs: []string{"10.244.1.5", "10.70.2.4", "10.71.3.7"},
			wantData:  `{"endpoints":[{"clusterID":"cluster-c","realIP":"10.244.3.7","consumerIP":"10.71.3.7","reflectedIP":"10.71.3.7"}]}`,
		},
		{
			name: "no consumer Configuration for C: not listed, reported",
			svc:  service(optIn), slice: overlapSlice, target: "cluster-b",
			peers:        Peers([]*netv1beta1.Configuration{configuration("cluster-b", []string{"10.244.0.0/16"}, []string{"10.70.0.0/16"})}, nil),
			wantAddrs:    []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"},
			wantProblems: []string{ReasonRemapFailed + ": address 10.71.3.7 on cluster cluster-c not listed for direct connections from cluster cluster-b: the consumer has no Configuration for cluster cluster-c"},
		},
		{
			name: "consumer address of C outside its remapped CIDR: not listed, reported",
			svc:  service(optIn), target: "cluster-b", peers: consumerPeers,
			slice:        consumerSlice(discoveryv1.AddressTypeIPv4, endpoint("vn-c", "10.99.3.7")),
			wantAddrs:    []string{"10.99.3.7"},
			wantProblems: []string{ReasonRemapFailed + ": address 10.99.3.7 on cluster cluster-c not listed for direct connections from cluster cluster-b: 10.99.3.7 is in no known remapped CIDR [10.71.0.0/16]"},
		},
		{
			name: "IPv6",
			svc:  service(optIn), target: "cluster-b",
			slice: consumerSlice(discoveryv1.AddressTypeIPv6, endpoint("vn-b", "fd00:70::2:4"), endpoint("vn-c", "fd00:71::3:7")),
			peers: Peers([]*netv1beta1.Configuration{
				configuration("cluster-b", []string{"fd00:244::/32"}, []string{"fd00:70::/32"}),
				configuration("cluster-c", []string{"fd00:244::/32"}, []string{"fd00:71::/32"}),
			}, nil),
			wantAddrs: []string{"fd00:244::2:4", "fd00:71::3:7"},
			wantData:  `{"endpoints":[{"clusterID":"cluster-c","realIP":"fd00:244::3:7","consumerIP":"fd00:71::3:7","reflectedIP":"fd00:71::3:7"}]}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sh, problems, err := BuildShadow(ShadowInput{
				ConsumerClusterID: "cluster-a", Target: tc.target, Service: tc.svc, Slice: tc.slice,
				NodeClusters: nodeClusters, Peers: tc.peers,
			})
			if err != nil {
				t.Fatalf("BuildShadow: %v", err)
			}
			if got := addresses(sh.Spec.Template.Endpoints); !reflect.DeepEqual(got, tc.wantAddrs) {
				t.Errorf("addresses = %v, want %v", got, tc.wantAddrs)
			}
			data, has := sh.Annotations[DataAnnotation]
			if data != tc.wantData || has != (tc.wantData != "") {
				t.Errorf("data annotation = %q (present %v), want %q", data, has, tc.wantData)
			}
			if got := problemStrings(problems); !reflect.DeepEqual(got, tc.wantProblems) {
				t.Errorf("problems = %q, want %q", got, tc.wantProblems)
			}
			if sh.Name != tc.slice.Name || sh.Namespace != tc.slice.Namespace {
				t.Errorf("shadow is %s/%s, want the slice's name", sh.Namespace, sh.Name)
			}
			if sh.Labels[discoveryv1.LabelServiceName] != "web" || sh.Labels[discoveryv1.LabelManagedBy] != ManagedBy ||
				sh.Labels[OriginClusterIDLabel] != "cluster-a" {
				t.Errorf("labels = %v", sh.Labels)
			}
			if sh.Spec.Template.AddressType != tc.slice.AddressType || len(sh.Spec.Template.Ports) != 1 {
				t.Errorf("template address type/ports = %v/%v", sh.Spec.Template.AddressType, sh.Spec.Template.Ports)
			}
		})
	}
	// The input slice is not modified.
	if got := addresses(overlapSlice.Endpoints); !reflect.DeepEqual(got, []string{"10.244.1.5", "10.70.2.4", "10.71.3.7"}) {
		t.Errorf("input slice changed: %v", got)
	}
}

func TestBuildShadowStripsForeignDataAnnotation(t *testing.T) {
	s := consumerSlice(discoveryv1.AddressTypeIPv4, endpoint("a-node1", "10.244.1.5"))
	s.Annotations[DataAnnotation] = `{"endpoints":[{"clusterID":"x","realIP":"1.1.1.1","reflectedIP":"10.244.1.5"}]}`
	sh, _, err := BuildShadow(ShadowInput{ConsumerClusterID: "cluster-a", Target: "cluster-b", Service: service(optIn),
		Slice: s, NodeClusters: nodeClusters, Peers: consumerPeers})
	if err != nil {
		t.Fatal(err)
	}
	if _, has := sh.Annotations[DataAnnotation]; has {
		t.Fatalf("a data annotation on the consumer's slice must not be reflected: %v", sh.Annotations)
	}
}

func TestBuildShadowTooLarge(t *testing.T) {
	// 4000 endpoints on C: each data entry is about 100 bytes, so the document exceeds 256 KiB.
	var eps []discoveryv1.Endpoint
	for i := range 4000 {
		eps = append(eps, endpoint("vn-c", netipFromIndex("10.71.0.0", i)))
	}
	s := consumerSlice(discoveryv1.AddressTypeIPv4, eps...)
	in := ShadowInput{ConsumerClusterID: "cluster-a", Target: "cluster-b", Service: service(optIn), Slice: s,
		NodeClusters: nodeClusters, Peers: consumerPeers}
	sh, _, err := BuildShadow(in)
	if !errors.Is(err, ErrAnnotationsTooLarge) || sh != nil {
		t.Fatalf("BuildShadow = %v, %v; want nil and ErrAnnotationsTooLarge", sh, err)
	}
	if !strings.Contains(err.Error(), "web-abc12") || !strings.Contains(err.Error(), "4000") {
		t.Errorf("error should name the slice and the entry count: %v", err)
	}
	// Half as many fit.
	in.Slice = consumerSlice(discoveryv1.AddressTypeIPv4, eps[:2000]...)
	if _, _, err := BuildShadow(in); err != nil {
		t.Fatalf("2000 entries: %v", err)
	}
}

func netipFromIndex(base string, i int) string {
	b := strings.Split(base, ".")
	return fmt.Sprintf("%s.%s.%d.%d", b[0], b[1], i/250, i%250+1)
}

func problemStrings(ps []Problem) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Reason+": "+p.Message)
	}
	return out
}
