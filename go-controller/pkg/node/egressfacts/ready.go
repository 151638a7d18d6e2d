package egressfacts

import (
	"maps"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
)

// ReadyChange returns the change of annotations.EgressIPsReady that makes current
// (the Node's annotations) carry the egress IPs in ready (publish true: local
// gateway mode; an empty set is written as "[]"), or not carry the annotation at
// all (publish false: shared gateway mode). value nil means "remove"; changed is
// false when nothing needs to change. The current value is compared parsed, so an
// equivalent value is left alone and an unparsable one is replaced.
func ReadyChange(current map[string]string, ready map[netip.Addr]bool, publish bool) (value *string, changed bool) {
	_, has := current[annotations.EgressIPsReady]
	if !publish {
		return nil, has
	}
	want := map[netip.Addr]bool{}
	for ip, ok := range ready {
		if ok {
			want[ip.Unmap()] = true
		}
	}
	if has {
		got, err := annotations.ParseEgressIPsReady(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: current}})
		if err == nil && maps.Equal(got, want) {
			return nil, false
		}
	}
	v := annotations.FormatEgressIPsReady(want)
	return &v, true
}
