package directconn

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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

var nodeClusters = NodeClusters([]*corev1.Node{
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
			name: "overlap, reflected to B: B's pod left out, C's pod listed untranslated, with its real IP",
			svc:  service(optIn), slice: overlapSlice, target: "cluster-b", peers: consumerPeers,
			wantAddrs: []string{"10.244.1.5", "10.71.3.7"},
			wantData:  `{"clusterAddresses":{"cluster-c":["10.71.3.7"]},"realIPs":{"10.71.3.7":"10.244.3.7"}}`,
		},
		{
			name: "overlap, reflected to C: C's pod left out, B's pod listed",
			svc:  service(optIn), slice: overlapSlice, target: "cluster-c", peers: consumerPeers,
			wantAddrs: []string{"10.244.1.5", "10.70.2.4"},
			wantData:  `{"clusterAddresses":{"cluster-b":["10.70.2.4"]},"realIPs":{"10.70.2.4":"10.244.2.4"}}`,
		},
		{
			name: "no overlap: exactly Liqo's document (no real IPs)",
			svc:  service(optIn), slice: overlapSlice, target: "cluster-b",
			peers: Peers([]*netv1beta1.Configuration{
				configuration("cluster-c", []string{"10.71.0.0/16"}, []string{"10.71.0.0/16"})}, nil),
			wantAddrs: []string{"10.244.1.5", "10.71.3.7"},
			wantData:  `{"clusterAddresses":{"cluster-c":["10.71.3.7"]}}`,
		},
		{
			name: "not opted in: reflected, no annotation",
			svc:  service(nil), slice: overlapSlice, target: "cluster-b", peers: consumerPeers,
			wantAddrs: []string{"10.244.1.5", "10.71.3.7"},
		},
		{
			name: "opt-in value other than exactly true is off",
			svc:  service(map[string]string{UseDirectConnectionsAnnotation: "True"}), slice: overlapSlice, target: "cluster-b", peers: consumerPeers,
			wantAddrs: []string{"10.244.1.5", "10.71.3.7"},
		},
		{
			name: "no Service: no annotation",
			svc:  nil, slice: overlapSlice, target: "cluster-b", peers: consumerPeers,
			wantAddrs: []string{"10.244.1.5", "10.71.3.7"},
		},
		{
			name: "no endpoint on another provider: no annotation; a virtual node without cluster ID counts as the consumer's",
			svc:  service(optIn), target: "cluster-b", peers: consumerPeers,
			slice:     consumerSlice(discoveryv1.AddressTypeIPv4, endpoint("a-node1", "10.244.1.5"), endpoint("vn-b", "10.70.2.4"), endpoint("vn-x", "10.9.9.9")),
			wantAddrs: []string{"10.244.1.5", "10.9.9.9"},
		},
		{
			name: "no consumer Configuration for C: listed without real IP, reported",
			svc:  service(optIn), slice: overlapSlice, target: "cluster-b",
			peers:        Peers([]*netv1beta1.Configuration{configuration("cluster-b", []string{"10.244.0.0/16"}, []string{"10.70.0.0/16"})}, nil),
			wantAddrs:    []string{"10.244.1.5", "10.71.3.7"},
			wantData:     `{"clusterAddresses":{"cluster-c":["10.71.3.7"]}}`,
			wantProblems: []string{ReasonRemapFailed + ": address 10.71.3.7 on cluster cluster-c listed for direct connections from cluster cluster-b without its real IP: the consumer has no Configuration for cluster cluster-c"},
		},
		{
			name: "consumer address of C outside its remapped CIDR: listed without real IP, reported",
			svc:  service(optIn), target: "cluster-b", peers: consumerPeers,
			slice:        consumerSlice(discoveryv1.AddressTypeIPv4, endpoint("vn-c", "10.99.3.7")),
			wantAddrs:    []string{"10.99.3.7"},
			wantData:     `{"clusterAddresses":{"cluster-c":["10.99.3.7"]}}`,
			wantProblems: []string{ReasonRemapFailed + ": address 10.99.3.7 on cluster cluster-c listed for direct connections from cluster cluster-b without its real IP: 10.99.3.7 is in no status.remote.cidr.pod [10.71.0.0/16] of Configuration liqo-tenant-cluster-c/cluster-c"},
		},
		{
			name: "endpoint on an unknown Node: left out, reported",
			svc:  service(optIn), target: "cluster-b", peers: consumerPeers,
			slice:        consumerSlice(discoveryv1.AddressTypeIPv4, endpoint("a-node1", "10.244.1.5"), endpoint("gone", "10.244.9.9")),
			wantAddrs:    []string{"10.244.1.5"},
			wantProblems: []string{ReasonEndpointNotReflected + ": endpoint [10.244.9.9] on Node gone, which is unknown, not reflected to cluster cluster-b"},
		},
		{
			name: "IPv6",
			svc:  service(optIn), target: "cluster-b",
			slice: consumerSlice(discoveryv1.AddressTypeIPv6, endpoint("vn-b", "fd00:70::2:4"), endpoint("vn-c", "fd00:71::3:7")),
			peers: Peers([]*netv1beta1.Configuration{
				configuration("cluster-b", []string{"fd00:244::/32"}, []string{"fd00:70::/32"}),
				configuration("cluster-c", []string{"fd00:244::/32"}, []string{"fd00:71::/32"}),
			}, nil),
			wantAddrs: []string{"fd00:71::3:7"},
			wantData:  `{"clusterAddresses":{"cluster-c":["fd00:71::3:7"]},"realIPs":{"fd00:71::3:7":"fd00:244::3:7"}}`,
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
			wantLabels := map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: ReflectionManagedBy,
				OriginClusterIDLabel: "cluster-a", DestinationClusterIDLabel: tc.target}
			if !reflect.DeepEqual(sh.Labels, wantLabels) {
				t.Errorf("labels = %v, want %v", sh.Labels, wantLabels)
			}
			if sh.Spec.Template.AddressType != tc.slice.AddressType || len(sh.Spec.Template.Ports) != 1 {
				t.Errorf("template address type/ports = %v/%v", sh.Spec.Template.AddressType, sh.Spec.Template.Ports)
			}
			for _, ep := range sh.Spec.Template.Endpoints {
				if ep.NodeName == nil || *ep.NodeName != "cluster-a" {
					t.Errorf("endpoint %v: nodeName %v, want the consumer's cluster ID", ep.Addresses, ep.NodeName)
				}
			}
		})
	}
	// The input slice is not modified.
	if got := addresses(overlapSlice.Endpoints); !reflect.DeepEqual(got, []string{"10.244.1.5", "10.70.2.4", "10.71.3.7"}) {
		t.Errorf("input slice changed: %v", got)
	}
}

// TestBuildShadowEndpointShape: each endpoint is in Liqo's shape: Ready only among the conditions, hostname, zone
// and hints kept, nodeName the consumer's cluster ID, targetRef of kind RemotePod.
func TestBuildShadowEndpointShape(t *testing.T) {
	ep := discoveryv1.Endpoint{
		Addresses:          []string{"10.71.3.7"},
		Conditions:         discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		Hostname:           ptr.To("web-0"),
		TargetRef:          &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: "web-0", UID: "pod-uid"},
		NodeName:           ptr.To("vn-c"),
		Zone:               ptr.To("z1"),
		Hints:              &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}},
		DeprecatedTopology: map[string]string{"x": "y"},
	}
	slice := consumerSlice(discoveryv1.AddressTypeIPv4, ep)
	sh, _, err := BuildShadow(ShadowInput{ConsumerClusterID: "cluster-a", Target: "cluster-b", Service: service(optIn),
		Slice: slice, NodeClusters: nodeClusters, Peers: consumerPeers})
	if err != nil {
		t.Fatal(err)
	}
	want := discoveryv1.Endpoint{
		Addresses:  []string{"10.71.3.7"},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		Hostname:   ptr.To("web-0"),
		TargetRef:  &corev1.ObjectReference{Kind: "RemotePod", Namespace: "demo", Name: "web-0", UID: "pod-uid"},
		NodeName:   ptr.To("cluster-a"),
		Zone:       ptr.To("z1"),
		Hints:      &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}},
	}
	if got := sh.Spec.Template.Endpoints; len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("endpoint =\n%+v\nwant\n%+v", got, want)
	}
	if slice.Endpoints[0].TargetRef.Kind != "Pod" {
		t.Fatalf("the consumer's slice was changed: %+v", slice.Endpoints[0].TargetRef)
	}
}

// TestShadowDataReadByLiqo decodes our consumer's data annotation with a struct of the shape Liqo's provider
// reads ({"clusterAddresses": {"<clusterID>": ["<ip>", ...]}}, unknown fields ignored, as encoding/json does): each
// cluster's addresses are exactly those of the shadow's endpoints on that cluster, as the shadow carries them.
func TestShadowDataReadByLiqo(t *testing.T) {
	slice := consumerSlice(discoveryv1.AddressTypeIPv4,
		endpoint("a-node1", "10.244.1.5"), endpoint("vn-b", "10.70.2.4"),
		endpoint("vn-c", "10.71.3.7"), endpoint("vn-c", "10.71.3.8"), endpoint("vn-d", "10.73.4.4"))
	nodes := maps.Clone(nodeClusters)
	nodes["vn-d"] = "cluster-d"
	sh, _, err := BuildShadow(ShadowInput{ConsumerClusterID: "cluster-a", Target: "cluster-b", Service: service(optIn),
		Slice: slice, NodeClusters: nodes, Peers: consumerPeers})
	if err != nil {
		t.Fatal(err)
	}
	var liqo struct {
		ClusterAddresses map[string][]string `json:"clusterAddresses"`
	}
	if err := json.Unmarshal([]byte(sh.Annotations[DataAnnotation]), &liqo); err != nil {
		t.Fatalf("Liqo's shape cannot decode %s: %v", sh.Annotations[DataAnnotation], err)
	}
	want := map[string][]string{"cluster-c": {"10.71.3.7", "10.71.3.8"}, "cluster-d": {"10.73.4.4"}}
	if !reflect.DeepEqual(liqo.ClusterAddresses, want) {
		t.Fatalf("clusterAddresses = %v, want %v", liqo.ClusterAddresses, want)
	}
	inShadow := map[string]bool{}
	for _, a := range addresses(sh.Spec.Template.Endpoints) {
		inShadow[a] = true
	}
	for c, addrs := range liqo.ClusterAddresses {
		for _, a := range addrs {
			if !inShadow[a] {
				t.Errorf("cluster %s: listed address %s is not in the shadow's endpoints %v", c, a, addresses(sh.Spec.Template.Endpoints))
			}
		}
	}
}

func TestBuildShadowStripsForeignDataAnnotation(t *testing.T) {
	s := consumerSlice(discoveryv1.AddressTypeIPv4, endpoint("a-node1", "10.244.1.5"))
	s.Annotations[DataAnnotation] = `{"clusterAddresses":{"x":["10.244.1.5"]}}`
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
	// 8000 endpoints on C with real IPs: each is about 40 bytes of data, so the document exceeds 256 KiB.
	var eps []discoveryv1.Endpoint
	for i := range 8000 {
		eps = append(eps, endpoint("vn-c", netipFromIndex("10.71.0.0", i)))
	}
	s := consumerSlice(discoveryv1.AddressTypeIPv4, eps...)
	in := ShadowInput{ConsumerClusterID: "cluster-a", Target: "cluster-b", Service: service(optIn), Slice: s,
		NodeClusters: nodeClusters, Peers: consumerPeers}
	sh, _, err := BuildShadow(in)
	if !errors.Is(err, ErrAnnotationsTooLarge) || sh != nil {
		t.Fatalf("BuildShadow = %v, %v; want nil and ErrAnnotationsTooLarge", sh, err)
	}
	if !strings.Contains(err.Error(), "web-abc12") || !strings.Contains(err.Error(), "8000") {
		t.Errorf("error should name the slice and the entry count: %v", err)
	}
	// Half as many fit.
	in.Slice = consumerSlice(discoveryv1.AddressTypeIPv4, eps[:4000]...)
	if _, _, err := BuildShadow(in); err != nil {
		t.Fatalf("4000 entries: %v", err)
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
