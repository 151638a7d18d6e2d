package directconn

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

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
			Labels:      map[string]string{discoveryv1.LabelServiceName: "web", OriginClusterIDLabel: "cluster-a"},
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

// At B: the consumer's pod, B's own pod (already un-remapped by the consumer) and C's pod as the consumer sees it.
const overlapData = `{"endpoints":[{"clusterID":"cluster-c","realIP":"10.244.3.7","consumerIP":"10.71.3.7","reflectedIP":"10.71.3.7"}]}`

var overlapShadow = shadow(discoveryv1.AddressTypeIPv4, overlapData,
	endpoint("vn-a", "10.244.1.5"), endpoint("b-node1", "10.244.2.4"), endpoint("vn-c", "10.71.3.7"))

func TestBuildEndpointSlice(t *testing.T) {
	cfgC := configuration("cluster-c", []string{"10.244.0.0/16"}, []string{"10.72.0.0/16"})
	tests := []struct {
		name         string
		shadow       *offv1beta1.ShadowEndpointSlice
		cfgs         []*netv1beta1.Configuration
		conns        []*netv1beta1.Connection
		wantAddrs    []string
		wantProblems []string
	}{
		{
			name:   "overlap, connected: C's pod gets B's direct address, others untouched",
			shadow: overlapShadow, cfgs: []*netv1beta1.Configuration{cfgC},
			conns:     []*netv1beta1.Connection{connection("cluster-c", netv1beta1.Connected)},
			wantAddrs: []string{"10.244.1.5", "10.244.2.4", "10.72.3.7"},
		},
		{
			name:   "several Connections: one Connected is enough",
			shadow: overlapShadow, cfgs: []*netv1beta1.Configuration{cfgC},
			conns:     []*netv1beta1.Connection{connection("cluster-c", netv1beta1.ConnectionError), connection("cluster-c", netv1beta1.Connected)},
			wantAddrs: []string{"10.244.1.5", "10.244.2.4", "10.72.3.7"},
		},
		{
			name:   "connection Error: indirect kept, reported",
			shadow: overlapShadow, cfgs: []*netv1beta1.Configuration{cfgC},
			conns:        []*netv1beta1.Connection{connection("cluster-c", netv1beta1.ConnectionError)},
			wantAddrs:    []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"},
			wantProblems: []string{ReasonDirectConnectionUnavailable + `: connection to cluster cluster-c is down (status "Error"): indirect address kept (addresses 10.71.3.7)`},
		},
		{
			name:   "connection Connecting: indirect kept",
			shadow: overlapShadow, cfgs: []*netv1beta1.Configuration{cfgC},
			conns:        []*netv1beta1.Connection{connection("cluster-c", netv1beta1.Connecting)},
			wantAddrs:    []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"},
			wantProblems: []string{ReasonDirectConnectionUnavailable + `: connection to cluster cluster-c is down (status "Connecting"): indirect address kept (addresses 10.71.3.7)`},
		},
		{
			name:   "no Connection: indirect kept",
			shadow: overlapShadow, cfgs: []*netv1beta1.Configuration{cfgC},
			wantAddrs:    []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"},
			wantProblems: []string{ReasonDirectConnectionUnavailable + `: no Connection to cluster cluster-c: indirect address kept (addresses 10.71.3.7)`},
		},
		{
			name:   "no Configuration: indirect kept",
			shadow: overlapShadow, conns: []*netv1beta1.Connection{connection("cluster-c", netv1beta1.Connected)},
			wantAddrs:    []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"},
			wantProblems: []string{ReasonDirectConnectionUnavailable + `: no Configuration for cluster cluster-c: indirect address kept (addresses 10.71.3.7)`},
		},
		{
			name:         "prefix-length mismatch: indirect kept, reported",
			shadow:       overlapShadow,
			cfgs:         []*netv1beta1.Configuration{configuration("cluster-c", []string{"10.244.0.0/16"}, []string{"10.72.0.0/17"})},
			conns:        []*netv1beta1.Connection{connection("cluster-c", netv1beta1.Connected)},
			wantAddrs:    []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"},
			wantProblems: []string{ReasonRemapFailed + `: cluster cluster-c: 10.244.3.7 is in real CIDR 10.244.0.0/16, paired with remapped CIDR 10.72.0.0/17: prefix lengths differ: indirect address kept (addresses 10.71.3.7)`},
		},
		{
			name:         "real IP in no CIDR: indirect kept, reported",
			shadow:       overlapShadow,
			cfgs:         []*netv1beta1.Configuration{configuration("cluster-c", []string{"10.245.0.0/16"}, []string{"10.72.0.0/16"})},
			conns:        []*netv1beta1.Connection{connection("cluster-c", netv1beta1.Connected)},
			wantAddrs:    []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"},
			wantProblems: []string{ReasonRemapFailed + `: cluster cluster-c: 10.244.3.7 is in no known real CIDR [10.245.0.0/16]: indirect address kept (addresses 10.71.3.7)`},
		},
		{
			name:         "Configuration without status: indirect kept, reported",
			shadow:       overlapShadow,
			cfgs:         []*netv1beta1.Configuration{configuration("cluster-c", []string{"10.244.0.0/16"}, nil)},
			conns:        []*netv1beta1.Connection{connection("cluster-c", netv1beta1.Connected)},
			wantAddrs:    []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"},
			wantProblems: []string{ReasonRemapFailed + `: cluster cluster-c: no status.remote in Configuration liqo-tenant-cluster-c/cluster-c yet (remapping not done): indirect address kept (addresses 10.71.3.7)`},
		},
		{
			name: "several CIDRs per cluster, several listed addresses",
			shadow: shadow(discoveryv1.AddressTypeIPv4,
				`{"endpoints":[{"clusterID":"cluster-c","realIP":"10.244.3.7","reflectedIP":"10.71.3.7"},`+
					`{"clusterID":"cluster-c","realIP":"10.250.0.9","reflectedIP":"10.81.0.9"},`+
					`{"clusterID":"cluster-d","realIP":"10.244.5.5","reflectedIP":"10.73.5.5"}]}`,
				endpoint("vn-c", "10.71.3.7", "10.81.0.9"), endpoint("vn-d", "10.73.5.5")),
			cfgs: []*netv1beta1.Configuration{
				configuration("cluster-c", []string{"10.244.0.0/16", "10.250.0.0/24"}, []string{"10.72.0.0/16", "192.168.7.0/24"}),
				configuration("cluster-d", []string{"10.244.0.0/16"}, []string{"10.74.0.0/16"}),
			},
			conns: []*netv1beta1.Connection{
				connection("cluster-c", netv1beta1.Connected), connection("cluster-d", netv1beta1.Connected),
			},
			wantAddrs: []string{"10.72.3.7", "192.168.7.9", "10.74.5.5"},
		},
		{
			name: "IPv6",
			shadow: shadow(discoveryv1.AddressTypeIPv6,
				`{"endpoints":[{"clusterID":"cluster-c","realIP":"fd00:244::3:7","consumerIP":"fd00:71::3:7","reflectedIP":"fd00:71::3:7"}]}`,
				endpoint("b-node1", "fd00:244::2:4"), endpoint("vn-c", "fd00:71::3:7")),
			cfgs:      []*netv1beta1.Configuration{configuration("cluster-c", []string{"fd00:244::/32"}, []string{"fd00:72::/32"})},
			conns:     []*netv1beta1.Connection{connection("cluster-c", netv1beta1.Connected)},
			wantAddrs: []string{"fd00:244::2:4", "fd00:72::3:7"},
		},
		{
			name:   "no data annotation: nothing remapped",
			shadow: shadow(discoveryv1.AddressTypeIPv4, "", endpoint("vn-c", "10.71.3.7")),
			cfgs:   []*netv1beta1.Configuration{cfgC}, conns: []*netv1beta1.Connection{connection("cluster-c", netv1beta1.Connected)},
			wantAddrs: []string{"10.71.3.7"},
		},
		{
			name:   "unparsable data: nothing remapped, reported",
			shadow: shadow(discoveryv1.AddressTypeIPv4, `{"endpoints":[{"clusterID":"cluster-c","realIP":"10.244.3","reflectedIP":"10.71.3.7"}]}`, endpoint("vn-c", "10.71.3.7")),
			cfgs:   []*netv1beta1.Configuration{cfgC}, conns: []*netv1beta1.Connection{connection("cluster-c", netv1beta1.Connected)},
			wantAddrs:    []string{"10.71.3.7"},
			wantProblems: []string{ReasonInvalidData + `: annotation liqo.io/direct-connections-data: endpoints[0].realIP: ParseAddr("10.244.3"): IPv4 address too short; every address keeps its indirect value`},
		},
		{
			name:         "data naming this cluster: ignored, reported",
			shadow:       shadow(discoveryv1.AddressTypeIPv4, `{"endpoints":[{"clusterID":"cluster-b","realIP":"10.244.2.4","reflectedIP":"10.70.2.4"}]}`, endpoint("b-node1", "10.70.2.4")),
			wantAddrs:    []string{"10.70.2.4"},
			wantProblems: []string{ReasonInvalidData + `: the data lists cluster cluster-b, which is this cluster (addresses 10.70.2.4)`},
		},
		{
			name: "same address listed with different real IPs: indirect kept, reported",
			shadow: shadow(discoveryv1.AddressTypeIPv4,
				`{"endpoints":[{"clusterID":"cluster-c","realIP":"10.244.3.7","reflectedIP":"10.71.3.7"},{"clusterID":"cluster-c","realIP":"10.244.3.8","reflectedIP":"10.71.3.7"}]}`,
				endpoint("vn-c", "10.71.3.7")),
			cfgs: []*netv1beta1.Configuration{cfgC}, conns: []*netv1beta1.Connection{connection("cluster-c", netv1beta1.Connected)},
			wantAddrs:    []string{"10.71.3.7"},
			wantProblems: []string{ReasonInvalidData + `: the data lists the address several times with different real IPs (addresses 10.71.3.7)`},
		},
		{
			name:   "two Configurations for one cluster: indirect kept, reported",
			shadow: overlapShadow,
			cfgs: []*netv1beta1.Configuration{cfgC, func() *netv1beta1.Configuration {
				c := configuration("cluster-c", []string{"10.244.0.0/16"}, []string{"10.99.0.0/16"})
				c.Name = "other"
				return c
			}()},
			conns:        []*netv1beta1.Connection{connection("cluster-c", netv1beta1.Connected)},
			wantAddrs:    []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"},
			wantProblems: []string{ReasonRemapFailed + `: cluster cluster-c: 2 Configurations name cluster cluster-c ([liqo-tenant-cluster-c/cluster-c liqo-tenant-cluster-c/other]); expected one: indirect address kept (addresses 10.71.3.7)`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			es, problems := BuildEndpointSlice(SliceInput{LocalClusterID: "cluster-b", Shadow: tc.shadow, Peers: Peers(tc.cfgs, tc.conns)})
			if got := addresses(es.Endpoints); !reflect.DeepEqual(got, tc.wantAddrs) {
				t.Errorf("addresses = %v, want %v", got, tc.wantAddrs)
			}
			if got := problemStrings(problems); !reflect.DeepEqual(got, tc.wantProblems) {
				t.Errorf("problems =\n%q\nwant\n%q", got, tc.wantProblems)
			}
			if _, has := es.Annotations[DataAnnotation]; has || es.Annotations["keep"] != "me" {
				t.Errorf("annotations = %v: data must be removed, others kept", es.Annotations)
			}
			if es.Name != tc.shadow.Name || es.Namespace != tc.shadow.Namespace || es.AddressType != tc.shadow.Spec.Template.AddressType {
				t.Errorf("slice %s/%s %s does not match the shadow", es.Namespace, es.Name, es.AddressType)
			}
			if es.Labels[discoveryv1.LabelManagedBy] != ManagedBy || es.Labels[discoveryv1.LabelServiceName] != "web" {
				t.Errorf("labels = %v", es.Labels)
			}
			if len(es.OwnerReferences) != 1 || es.OwnerReferences[0].UID != "shadow-uid" ||
				es.OwnerReferences[0].Kind != "ShadowEndpointSlice" || !*es.OwnerReferences[0].Controller {
				t.Errorf("owner references = %+v", es.OwnerReferences)
			}
		})
	}
	if got := addresses(overlapShadow.Spec.Template.Endpoints); !reflect.DeepEqual(got, []string{"10.244.1.5", "10.244.2.4", "10.71.3.7"}) {
		t.Errorf("input shadow changed: %v", got)
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
	es, problems := BuildEndpointSlice(SliceInput{LocalClusterID: "cluster-b", Shadow: sh, Peers: Peers(
		[]*netv1beta1.Configuration{configuration("cluster-c", []string{"10.244.0.0/16"}, []string{"10.72.0.0/16"})},
		[]*netv1beta1.Connection{connection("cluster-c", netv1beta1.Connected)})})
	if len(problems) != 0 {
		t.Fatalf("BuildEndpointSlice problems: %v", problems)
	}
	if got, want := addresses(es.Endpoints), []string{"10.244.1.5", "10.244.2.4", "10.72.3.7"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("at B: %v, want %v", got, want)
	}
}

func TestProblemMessageListsAtMostFiveAddresses(t *testing.T) {
	data := `{"endpoints":[`
	var eps []discoveryv1.Endpoint
	for i := range 7 {
		if i > 0 {
			data += ","
		}
		ip := netipFromIndex("10.71.0.0", i)
		data += `{"clusterID":"cluster-c","realIP":"` + netipFromIndex("10.244.0.0", i) + `","reflectedIP":"` + ip + `"}`
		eps = append(eps, endpoint("vn-c", ip))
	}
	data += "]}"
	_, problems := BuildEndpointSlice(SliceInput{LocalClusterID: "cluster-b", Shadow: shadow(discoveryv1.AddressTypeIPv4, data, eps...)})
	want := []string{ReasonDirectConnectionUnavailable + ": no Configuration for cluster cluster-c: indirect address kept " +
		"(addresses 10.71.0.1, 10.71.0.2, 10.71.0.3, 10.71.0.4, 10.71.0.5 and 2 more)"}
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
	es, problems := BuildEndpointSlice(SliceInput{LocalClusterID: "cluster-b", Shadow: sh})
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
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
