package directconn

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	corev1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/core/v1beta1"
	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
)

func connection(id string, v netv1beta1.ConnectionStatusValue) *netv1beta1.Connection {
	return &netv1beta1.Connection{
		ObjectMeta: metav1.ObjectMeta{Namespace: "liqo-tenant-" + id, Name: "gw-" + string(v), Labels: map[string]string{RemoteClusterIDLabel: id}},
		Status:     netv1beta1.ConnectionStatus{Value: v},
	}
}

func shadow(addressType discoveryv1.AddressType, data string, eps ...discoveryv1.Endpoint) *offv1beta1.ShadowEndpointSlice {
	s := &offv1beta1.ShadowEndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-abc12", UID: types.UID("shadow-uid"),
			Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: ReflectionManagedBy,
				OriginClusterIDLabel: "cluster-a", DestinationClusterIDLabel: "cluster-b"},
			Annotations: map[string]string{"keep": "me"}},
		Spec: offv1beta1.ShadowEndpointSliceSpec{Template: offv1beta1.EndpointSliceTemplate{
			AddressType: addressType, Endpoints: eps,
		}},
	}
	if data != "" {
		s.Annotations[DataAnnotation] = data
	}
	return s
}

// liqoEndpoint is an endpoint as Liqo's virtual kubelet reflects it: nodeName the consumer's cluster ID.
func liqoEndpoint(addr string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr.To("cluster-a"),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		TargetRef:  &corev1.ObjectReference{Kind: "RemotePod", Namespace: "demo", Name: "pod-" + addr}}
}

// withExternal adds external CIDRs to a Configuration.
func withExternal(c *netv1beta1.Configuration, real, view string) *netv1beta1.Configuration {
	c.Spec.Remote.CIDR.External = []netv1beta1.CIDR{netv1beta1.CIDR(real)}
	c.Status.Remote.CIDR.External = []netv1beta1.CIDR{netv1beta1.CIDR(view)}
	return c
}

// The overlap scenario at provider B: A, B and C all use 10.244.0.0/16. B sees A's pods as 10.80.0.0/16 and A's
// external CIDR 10.60.0.0/16 as 10.61.0.0/16, and C as 10.72.0.0/16; A sees C as 10.71.0.0/16. A's pod
// 10.244.1.5, C's pod 10.244.3.7 (10.71.3.7 in A), an address in A's external CIDR 10.60.0.9 and one in no CIDR
// 192.0.2.10.
var (
	cfgAatB = withExternal(configuration("cluster-a", []string{"10.244.0.0/16"}, []string{"10.80.0.0/16"}), "10.60.0.0/16", "10.61.0.0/16")
	cfgCatB = configuration("cluster-c", []string{"10.244.0.0/16"}, []string{"10.72.0.0/16"})
	connC   = connection("cluster-c", netv1beta1.Connected)

	overlapEndpoints = []discoveryv1.Endpoint{liqoEndpoint("10.244.1.5"), liqoEndpoint("10.71.3.7"),
		liqoEndpoint("10.60.0.9"), liqoEndpoint("192.0.2.10")}
)

const (
	liqoOverlapData = `{"clusterAddresses":{"cluster-c":["10.71.3.7"]}}`
	ourOverlapData  = `{"clusterAddresses":{"cluster-c":["10.71.3.7"]},"realIPs":{"10.71.3.7":"10.244.3.7"}}`
	// fallback: C's address mapped through A, where it is in no CIDR: unchanged.
	fallbackMsg = "mapped through consumer cluster cluster-a instead (addresses 10.71.3.7)"
)

func TestBuildEndpointSlice(t *testing.T) {
	twoCIDRs := configuration("cluster-c", []string{"10.244.0.0/16", "10.245.0.0/16"}, []string{"10.72.0.0/16", "10.73.0.0/16"})
	notReadyEp := liqoEndpoint("10.244.1.6")
	notReadyEp.Conditions.Ready = ptr.To(false)
	tests := []struct {
		name         string
		shadow       *offv1beta1.ShadowEndpointSlice
		cfgs         []*netv1beta1.Configuration
		conns        []*netv1beta1.Connection
		origin       *OriginState
		deny         bool
		wantAddrs    []string
		wantReady    []bool
		wantProblems []string
	}{
		{
			name:   "overlap, Liqo's data: C's pod by host bits under B's view of C, the rest through A",
			shadow: shadow(discoveryv1.AddressTypeIPv4, liqoOverlapData, overlapEndpoints...),
			cfgs:   []*netv1beta1.Configuration{cfgAatB, cfgCatB}, conns: []*netv1beta1.Connection{connC},
			wantAddrs: []string{"10.80.1.5", "10.72.3.7", "10.61.0.9", "192.0.2.10"},
		},
		{
			name:   "overlap, our data: C's pod from its real IP",
			shadow: shadow(discoveryv1.AddressTypeIPv4, ourOverlapData, overlapEndpoints...),
			cfgs:   []*netv1beta1.Configuration{cfgAatB, cfgCatB}, conns: []*netv1beta1.Connection{connC},
			wantAddrs: []string{"10.80.1.5", "10.72.3.7", "10.61.0.9", "192.0.2.10"},
		},
		{
			name:   "no data: every address through A (Liqo's plain mapping)",
			shadow: shadow(discoveryv1.AddressTypeIPv4, "", overlapEndpoints...),
			cfgs:   []*netv1beta1.Configuration{cfgAatB, cfgCatB}, conns: []*netv1beta1.Connection{connC},
			wantAddrs: []string{"10.80.1.5", "10.71.3.7", "10.61.0.9", "192.0.2.10"},
		},
		{
			name:         "connection down: C's pod through A, reported",
			shadow:       shadow(discoveryv1.AddressTypeIPv4, ourOverlapData, overlapEndpoints...),
			cfgs:         []*netv1beta1.Configuration{cfgAatB, cfgCatB},
			conns:        []*netv1beta1.Connection{connection("cluster-c", netv1beta1.ConnectionError)},
			wantAddrs:    []string{"10.80.1.5", "10.71.3.7", "10.61.0.9", "192.0.2.10"},
			wantProblems: []string{ReasonDirectConnectionUnavailable + `: connection to cluster cluster-c is down (status "Error") (clusterAddresses["cluster-c"]): ` + fallbackMsg},
		},
		{
			name:      "one Connection connected among several suffices",
			shadow:    shadow(discoveryv1.AddressTypeIPv4, ourOverlapData, overlapEndpoints...),
			cfgs:      []*netv1beta1.Configuration{cfgAatB, cfgCatB},
			conns:     []*netv1beta1.Connection{connection("cluster-c", netv1beta1.Connecting), connC},
			wantAddrs: []string{"10.80.1.5", "10.72.3.7", "10.61.0.9", "192.0.2.10"},
		},
		{
			name:         "no Connection to C: through A, reported",
			shadow:       shadow(discoveryv1.AddressTypeIPv4, ourOverlapData, overlapEndpoints...),
			cfgs:         []*netv1beta1.Configuration{cfgAatB, cfgCatB},
			wantAddrs:    []string{"10.80.1.5", "10.71.3.7", "10.61.0.9", "192.0.2.10"},
			wantProblems: []string{ReasonDirectConnectionUnavailable + `: no Connection to cluster cluster-c (clusterAddresses["cluster-c"]): ` + fallbackMsg},
		},
		{
			name:   "cluster ID with no Configuration: that address through A, reported; the others mapped",
			shadow: shadow(discoveryv1.AddressTypeIPv4, ourOverlapData, overlapEndpoints...),
			cfgs:   []*netv1beta1.Configuration{cfgAatB}, conns: []*netv1beta1.Connection{connC},
			wantAddrs:    []string{"10.80.1.5", "10.71.3.7", "10.61.0.9", "192.0.2.10"},
			wantProblems: []string{ReasonDirectConnectionUnavailable + `: no Configuration for cluster cluster-c (clusterAddresses["cluster-c"]): ` + fallbackMsg},
		},
		{
			name: "real IP in no CIDR of C: through A, reported naming the field; the others mapped",
			shadow: shadow(discoveryv1.AddressTypeIPv4,
				`{"clusterAddresses":{"cluster-c":["10.71.3.7","10.71.3.8"]},"realIPs":{"10.71.3.7":"10.99.3.7","10.71.3.8":"10.244.3.8"}}`,
				append([]discoveryv1.Endpoint{liqoEndpoint("10.71.3.8")}, overlapEndpoints...)...),
			cfgs: []*netv1beta1.Configuration{cfgAatB, cfgCatB}, conns: []*netv1beta1.Connection{connC},
			wantAddrs: []string{"10.72.3.8", "10.80.1.5", "10.71.3.7", "10.61.0.9", "192.0.2.10"},
			wantProblems: []string{ReasonRemapFailed + `: cluster cluster-c (clusterAddresses["cluster-c"]): real IP 10.99.3.7 (realIPs["10.71.3.7"]) ` +
				`is in no spec.remote.cidr.pod [10.244.0.0/16] of Configuration liqo-tenant-cluster-c/cluster-c: ` + fallbackMsg},
		},
		{
			name:   "Liqo's data, C with two pod CIDRs and the address in neither: through A, reported",
			shadow: shadow(discoveryv1.AddressTypeIPv4, liqoOverlapData, overlapEndpoints...),
			cfgs:   []*netv1beta1.Configuration{cfgAatB, twoCIDRs}, conns: []*netv1beta1.Connection{connC},
			wantAddrs: []string{"10.80.1.5", "10.71.3.7", "10.61.0.9", "192.0.2.10"},
			wantProblems: []string{ReasonRemapFailed + `: cluster cluster-c (clusterAddresses["cluster-c"]): 10.71.3.7 is in no real CIDR ` +
				`[10.244.0.0/16 10.245.0.0/16], and with 2 CIDRs its own CIDR is unknown (Configuration liqo-tenant-cluster-c/cluster-c): ` + fallbackMsg},
		},
		{
			name: "unknown fields and a malformed entry: named; the other addresses still mapped",
			shadow: shadow(discoveryv1.AddressTypeIPv4,
				`{"clusterAddresses":{"cluster-c":["10.71.3.7","bogus"]},"realIPs":{"10.71.3.7":"10.244.3.7"},"extra":true}`, overlapEndpoints...),
			cfgs: []*netv1beta1.Configuration{cfgAatB, cfgCatB}, conns: []*netv1beta1.Connection{connC},
			wantAddrs: []string{"10.80.1.5", "10.72.3.7", "10.61.0.9", "192.0.2.10"},
			wantProblems: []string{
				ReasonInvalidData + `: annotation ` + DataAnnotation + `: unknown field "extra" ignored`,
				ReasonInvalidData + `: annotation ` + DataAnnotation + `: clusterAddresses["cluster-c"][1] "bogus" is not an IP address: ignored`,
			},
		},
		{
			name:   "malformed document: every address through A, reported",
			shadow: shadow(discoveryv1.AddressTypeIPv4, `{"clusterAddresses":{"cluster-c":["10.71.3.7"]`, overlapEndpoints...),
			cfgs:   []*netv1beta1.Configuration{cfgAatB, cfgCatB}, conns: []*netv1beta1.Connection{connC},
			wantAddrs: []string{"10.80.1.5", "10.71.3.7", "10.61.0.9", "192.0.2.10"},
			wantProblems: []string{ReasonInvalidData + `: annotation ` + DataAnnotation +
				`: not a JSON object (unexpected end of JSON input): no address is listed, every address is mapped through the consumer`},
		},
		{
			name:   "data naming this cluster: through A, reported",
			shadow: shadow(discoveryv1.AddressTypeIPv4, `{"clusterAddresses":{"cluster-b":["10.71.3.7"]}}`, overlapEndpoints...),
			cfgs:   []*netv1beta1.Configuration{cfgAatB, cfgCatB}, conns: []*netv1beta1.Connection{connC},
			wantAddrs:    []string{"10.80.1.5", "10.71.3.7", "10.61.0.9", "192.0.2.10"},
			wantProblems: []string{ReasonInvalidData + `: clusterAddresses["cluster-b"] names this cluster: ` + fallbackMsg},
		},
		{
			name:   "no Configuration for the origin: unlisted addresses kept, reported; the listed one direct",
			shadow: shadow(discoveryv1.AddressTypeIPv4, ourOverlapData, overlapEndpoints...),
			cfgs:   []*netv1beta1.Configuration{cfgCatB}, conns: []*netv1beta1.Connection{connC},
			wantAddrs: []string{"10.244.1.5", "10.72.3.7", "10.60.0.9", "192.0.2.10"},
			wantProblems: []string{ReasonRemapFailed + ": no Configuration for origin cluster cluster-a (label " + OriginClusterIDLabel +
				"): address kept as the consumer wrote it (addresses 10.244.1.5, 10.60.0.9, 192.0.2.10)"},
		},
		{
			name:   "--deny-direct-connections: listed endpoints dropped",
			shadow: shadow(discoveryv1.AddressTypeIPv4, ourOverlapData, overlapEndpoints...),
			cfgs:   []*netv1beta1.Configuration{cfgAatB, cfgCatB}, conns: []*netv1beta1.Connection{connC}, deny: true,
			wantAddrs: []string{"10.80.1.5", "10.61.0.9", "192.0.2.10"},
		},
		{
			name:   "ForeignCluster ready: endpoints ready, except those the consumer says are not",
			shadow: shadow(discoveryv1.AddressTypeIPv4, ourOverlapData, liqoEndpoint("10.244.1.5"), notReadyEp, liqoEndpoint("10.71.3.7")),
			cfgs:   []*netv1beta1.Configuration{cfgAatB, cfgCatB}, conns: []*netv1beta1.Connection{connC},
			origin:    &OriginState{NetworkingEnabled: true, Ready: true},
			wantAddrs: []string{"10.80.1.5", "10.80.1.6", "10.72.3.7"}, wantReady: []bool{true, false, true},
		},
		{
			name:   "ForeignCluster not ready: every endpoint not ready",
			shadow: shadow(discoveryv1.AddressTypeIPv4, ourOverlapData, liqoEndpoint("10.244.1.5"), liqoEndpoint("10.71.3.7")),
			cfgs:   []*netv1beta1.Configuration{cfgAatB, cfgCatB}, conns: []*netv1beta1.Connection{connC},
			origin:    &OriginState{NetworkingEnabled: true, Ready: false},
			wantAddrs: []string{"10.80.1.5", "10.72.3.7"}, wantReady: []bool{false, false},
		},
		{
			name:   "ForeignCluster with networking disabled: no mapping at all",
			shadow: shadow(discoveryv1.AddressTypeIPv4, ourOverlapData, overlapEndpoints...),
			cfgs:   []*netv1beta1.Configuration{cfgAatB, cfgCatB}, conns: []*netv1beta1.Connection{connC},
			origin:    &OriginState{NetworkingEnabled: false, Ready: true},
			wantAddrs: []string{"10.244.1.5", "10.71.3.7", "10.60.0.9", "192.0.2.10"}, wantReady: []bool{true, true, true, true},
		},
		{
			name: "IPv6, prefixes off byte boundaries",
			shadow: shadow(discoveryv1.AddressTypeIPv6, `{"clusterAddresses":{"cluster-c":["fd00:71::3:7"]},"realIPs":{"fd00:71::3:7":"fd00:244::3:7"}}`,
				liqoEndpoint("fd00:244::1:5"), liqoEndpoint("fd00:71::3:7")),
			cfgs: []*netv1beta1.Configuration{
				configuration("cluster-a", []string{"fd00:244::/31"}, []string{"fd00:80::/31"}),
				configuration("cluster-c", []string{"fd00:244::/31"}, []string{"fd00:72::/31"})},
			conns:     []*netv1beta1.Connection{connC},
			wantAddrs: []string{"fd00:80::1:5", "fd00:72::3:7"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.shadow.DeepCopy()
			es, problems, err := BuildEndpointSlice(SliceInput{LocalClusterID: "cluster-b", Shadow: tc.shadow,
				Peers: Peers(tc.cfgs, tc.conns), Origin: tc.origin, DenyDirectConnections: tc.deny})
			if err != nil {
				t.Fatalf("BuildEndpointSlice: %v", err)
			}
			if got := addresses(es.Endpoints); !reflect.DeepEqual(got, tc.wantAddrs) {
				t.Errorf("addresses = %v, want %v", got, tc.wantAddrs)
			}
			if tc.wantReady != nil {
				var got []bool
				for _, e := range es.Endpoints {
					got = append(got, e.Conditions.Ready != nil && *e.Conditions.Ready)
				}
				if !reflect.DeepEqual(got, tc.wantReady) {
					t.Errorf("ready = %v, want %v", got, tc.wantReady)
				}
			}
			if got := problemStrings(problems); !reflect.DeepEqual(got, tc.wantProblems) {
				t.Errorf("problems =\n%q\nwant\n%q", got, tc.wantProblems)
			}
			if !equality.Semantic.DeepEqual(tc.shadow, before) {
				t.Errorf("input shadow changed")
			}
		})
	}
}

// TestBuildEndpointSliceLiqoShape: the EndpointSlice made of a shadow exactly as Liqo's virtual kubelet writes it
// (plain case: no overlap at the consumer) is the one Liqo's provider makes: the shadow's labels plus
// liqo.io/managed-by=shadowendpointslice, its annotations without the data, the controller reference to the
// shadow, the endpoints as reflected with their addresses mapped (listed ones with C's Configuration, others with
// A's: pod CIDRs, then external CIDRs, else unchanged).
func TestBuildEndpointSliceLiqoShape(t *testing.T) {
	cfgA := withExternal(configuration("cluster-a", []string{"10.201.0.0/16"}, []string{"10.81.0.0/16"}), "10.70.0.0/16", "10.82.0.0/16")
	cfgC := configuration("cluster-c", []string{"10.203.0.0/16"}, []string{"10.72.0.0/16"})
	eps := []discoveryv1.Endpoint{liqoEndpoint("10.201.1.5"), liqoEndpoint("10.203.3.7"), liqoEndpoint("10.70.0.9"), liqoEndpoint("192.0.2.10")}
	eps[0].Hostname, eps[0].Zone = ptr.To("web-0"), ptr.To("z1")
	sh := shadow(discoveryv1.AddressTypeIPv4, `{"clusterAddresses":{"cluster-c":["10.203.3.7"]}}`, eps...)
	sh.Spec.Template.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}}
	es, problems, err := BuildEndpointSlice(SliceInput{LocalClusterID: "cluster-b", Shadow: sh,
		Peers: Peers([]*netv1beta1.Configuration{cfgA, cfgC}, []*netv1beta1.Connection{connC})})
	if err != nil || len(problems) != 0 {
		t.Fatalf("BuildEndpointSlice: %v %v", problems, err)
	}
	wantEps := []discoveryv1.Endpoint{liqoEndpoint("10.81.1.5"), liqoEndpoint("10.72.3.7"), liqoEndpoint("10.82.0.9"), liqoEndpoint("192.0.2.10")}
	for i := range wantEps {
		wantEps[i].TargetRef = eps[i].TargetRef
	}
	wantEps[0].Hostname, wantEps[0].Zone = ptr.To("web-0"), ptr.To("z1")
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-abc12",
			Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: ReflectionManagedBy,
				OriginClusterIDLabel: "cluster-a", DestinationClusterIDLabel: "cluster-b", ShadowManagedByLabel: ShadowManagedBy},
			Annotations: map[string]string{"keep": "me"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "offloading.liqo.io/v1beta1", Kind: "ShadowEndpointSlice",
				Name: "web-abc12", UID: "shadow-uid", Controller: ptr.To(true)}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   wantEps,
		Ports:       sh.Spec.Template.Ports,
	}
	if !equality.Semantic.DeepEqual(es, want) {
		t.Fatalf("EndpointSlice =\n%+v\nwant\n%+v", es, want)
	}
}

func TestBuildEndpointSliceNeedsOrigin(t *testing.T) {
	sh := shadow(discoveryv1.AddressTypeIPv4, "", liqoEndpoint("10.244.1.5"))
	delete(sh.Labels, OriginClusterIDLabel)
	es, _, err := BuildEndpointSlice(SliceInput{LocalClusterID: "cluster-b", Shadow: sh})
	if !errors.Is(err, ErrNoOrigin) || es != nil {
		t.Fatalf("got %v, %v; want ErrNoOrigin", es, err)
	}
}

func TestOriginFromForeignClusters(t *testing.T) {
	fc := func(name, id string, enabled bool, network, api corev1beta1.ConditionStatus) *corev1beta1.ForeignCluster {
		f := &corev1beta1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1beta1.ForeignClusterSpec{ClusterID: id}}
		f.Status.Modules.Networking.Enabled = enabled
		if network != "" {
			f.Status.Modules.Networking.Conditions = []corev1beta1.Condition{{Type: corev1beta1.NetworkConnectionStatusCondition, Status: network}}
		}
		if api != "" {
			f.Status.Conditions = []corev1beta1.Condition{{Type: corev1beta1.APIServerStatusCondition, Status: api}}
		}
		return f
	}
	est, none := corev1beta1.ConditionStatusEstablished, corev1beta1.ConditionStatusNone
	tests := []struct {
		name string
		fcs  []*corev1beta1.ForeignCluster
		want *OriginState
	}{
		{"none for the cluster", []*corev1beta1.ForeignCluster{fc("b", "cluster-b", true, est, est)}, nil},
		{"established", []*corev1beta1.ForeignCluster{fc("a", "cluster-a", true, est, est)}, &OriginState{ForeignCluster: "a", NetworkingEnabled: true, Ready: true}},
		{"API server condition absent counts as None: ready", []*corev1beta1.ForeignCluster{fc("a", "cluster-a", true, est, "")}, &OriginState{ForeignCluster: "a", NetworkingEnabled: true, Ready: true}},
		{"API server None: ready", []*corev1beta1.ForeignCluster{fc("a", "cluster-a", true, est, none)}, &OriginState{ForeignCluster: "a", NetworkingEnabled: true, Ready: true}},
		{"network not established", []*corev1beta1.ForeignCluster{fc("a", "cluster-a", true, "Error", est)}, &OriginState{ForeignCluster: "a", NetworkingEnabled: true}},
		{"network condition absent: not ready", []*corev1beta1.ForeignCluster{fc("a", "cluster-a", true, "", est)}, &OriginState{ForeignCluster: "a", NetworkingEnabled: true}},
		{"networking disabled: ready", []*corev1beta1.ForeignCluster{fc("a", "cluster-a", false, "", est)}, &OriginState{ForeignCluster: "a", Ready: true}},
		{"API server not ready", []*corev1beta1.ForeignCluster{fc("a", "cluster-a", true, est, "NotReady")}, &OriginState{ForeignCluster: "a", NetworkingEnabled: true}},
		{"several: the first by name", []*corev1beta1.ForeignCluster{fc("z", "cluster-a", true, "Error", est), fc("m", "cluster-a", true, est, est)},
			&OriginState{ForeignCluster: "m", NetworkingEnabled: true, Ready: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := OriginFromForeignClusters(tc.fcs, "cluster-a"); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestConsumerToProvider runs the overlap case through both sides and the data document: the pod at 10.244.3.7
// on C appears in A as 10.71.3.7 and must become 10.72.3.7 at B.
func TestConsumerToProvider(t *testing.T) {
	sh, problems, err := BuildShadow(ShadowInput{ConsumerClusterID: "cluster-a", Target: "cluster-b",
		Service: service(optIn), Slice: overlapSlice, NodeClusters: nodeClusters, Peers: consumerPeers})
	if err != nil || len(problems) != 0 {
		t.Fatalf("BuildShadow: %v %v", problems, err)
	}
	es, problems, err := BuildEndpointSlice(SliceInput{LocalClusterID: "cluster-b", Shadow: sh, Peers: Peers(
		[]*netv1beta1.Configuration{cfgAatB, cfgCatB}, []*netv1beta1.Connection{connC})})
	if err != nil || len(problems) != 0 {
		t.Fatalf("BuildEndpointSlice: %v %v", problems, err)
	}
	if got, want := addresses(es.Endpoints), []string{"10.80.1.5", "10.72.3.7"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("at B: %v, want %v", got, want)
	}
}

func TestProblemMessageListsAtMostFiveAddresses(t *testing.T) {
	var (
		listed []string
		eps    []discoveryv1.Endpoint
	)
	for i := range 7 {
		ip := netipFromIndex("10.71.0.0", i)
		listed = append(listed, `"`+ip+`"`)
		eps = append(eps, liqoEndpoint(ip))
	}
	data := `{"clusterAddresses":{"cluster-c":[` + strings.Join(listed, ",") + `]}}`
	_, problems, err := BuildEndpointSlice(SliceInput{LocalClusterID: "cluster-b", Shadow: shadow(discoveryv1.AddressTypeIPv4, data, eps...),
		Peers: Peers([]*netv1beta1.Configuration{cfgAatB}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ReasonDirectConnectionUnavailable + `: no Configuration for cluster cluster-c (clusterAddresses["cluster-c"]): ` +
		"mapped through consumer cluster cluster-a instead (addresses 10.71.0.1, 10.71.0.2, 10.71.0.3, 10.71.0.4, 10.71.0.5 and 2 more)"}
	if got := problemStrings(problems); !reflect.DeepEqual(got, want) {
		t.Fatalf("problems = %q, want %q", got, want)
	}
}

func TestAsStored(t *testing.T) {
	tcp, udp, sctp := corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP
	ready := discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(false)}
	hints := &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}, ForNodes: []discoveryv1.ForNode{{Name: "n1"}}}
	tests := []struct {
		name string
		in   discoveryv1.EndpointSlice
		want discoveryv1.EndpointSlice
	}{
		{
			name: "port without protocol: TCP",
			in:   discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80)}}},
			want: discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: &tcp, Port: ptr.To[int32](80)}}},
		},
		{
			name: "port without name: empty name",
			in:   discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Protocol: &udp, Port: ptr.To[int32](53)}}},
			want: discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Name: ptr.To(""), Protocol: &udp, Port: ptr.To[int32](53)}}},
		},
		{
			name: "port with neither, and one without a port number (kept nil)",
			in:   discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](8080)}, {Name: ptr.To("any")}}},
			want: discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{
				{Name: ptr.To(""), Protocol: &tcp, Port: ptr.To[int32](8080)}, {Name: ptr.To("any"), Protocol: &tcp}}},
		},
		{
			name: "complete port: untouched",
			in: discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{
				{Name: ptr.To("s"), Protocol: &sctp, Port: ptr.To[int32](9), AppProtocol: ptr.To("kubernetes.io/h2c")}}},
			want: discoveryv1.EndpointSlice{Ports: []discoveryv1.EndpointPort{
				{Name: ptr.To("s"), Protocol: &sctp, Port: ptr.To[int32](9), AppProtocol: ptr.To("kubernetes.io/h2c")}}},
		},
		{
			name: "no ports: none added",
			in:   discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4},
			want: discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4},
		},
		{
			name: "deprecatedTopology dropped, the rest of the endpoint kept",
			in: discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: ready,
				Hints: hints, Zone: ptr.To("z1"), DeprecatedTopology: map[string]string{corev1.LabelHostname: "n1"}}}},
			want: discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}, Conditions: ready,
				Hints: hints, Zone: ptr.To("z1")}}},
		},
		{
			name: "endpoint without conditions: none added",
			in:   discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}}},
			want: discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.1"}}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.DeepCopy()
			asStored(got)
			if !reflect.DeepEqual(*got, tt.want) {
				t.Fatalf("asStored:\n got %+v\nwant %+v", *got, tt.want)
			}
			again := got.DeepCopy()
			asStored(again)
			if !reflect.DeepEqual(again, got) {
				t.Fatalf("asStored is not idempotent: %+v -> %+v", got, again)
			}
		})
	}
}

// TestBuildEndpointSliceIsInStoredForm: a template lacking port names and protocols and carrying deprecatedTopology
// gives the slice the apiserver would store, without changing the shadow.
func TestBuildEndpointSliceIsInStoredForm(t *testing.T) {
	sh := shadow(discoveryv1.AddressTypeIPv4, "", discoveryv1.Endpoint{Addresses: []string{"10.244.2.4"},
		DeprecatedTopology: map[string]string{corev1.LabelHostname: "b-node1"}})
	sh.Spec.Template.Ports = []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}}
	before := sh.DeepCopy()
	es, problems, err := BuildEndpointSlice(SliceInput{LocalClusterID: "cluster-b", Shadow: sh,
		Peers: Peers([]*netv1beta1.Configuration{cfgAatB}, nil)})
	if err != nil || len(problems) != 0 {
		t.Fatalf("problems: %v %v", problems, err)
	}
	want := []discoveryv1.EndpointPort{{Name: ptr.To(""), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](80)}}
	if !reflect.DeepEqual(es.Ports, want) {
		t.Errorf("ports = %+v, want %+v", es.Ports, want)
	}
	if es.Endpoints[0].DeprecatedTopology != nil {
		t.Errorf("deprecatedTopology kept: %v", es.Endpoints[0].DeprecatedTopology)
	}
	if !equality.Semantic.DeepEqual(sh, before) {
		t.Errorf("shadow changed:\n got %+v\nwant %+v", sh, before)
	}
}
