package master

import (
	"fmt"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	eipfake "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/fake"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// TestStatusWriteFailsDuringMove: a sync plans its NB rows while its status writes
// are in flight, as if they all land. Two EgressIPs leave an unreachable node in
// one sync; one's status write is refused: its rows stay where its status says
// (node1), the other's move with its status (node2). Once the writes are accepted
// again, the first follows.
func TestStatusWriteFailsDuringMove(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := newEnv(t, start, gwmode.Shared)
		// The reactor is in place before the master starts (client-go's fake adds
		// reactors without a lock: adding one while the master writes is a data
		// race); it refuses only once refuse is set.
		var refuse atomic.Bool
		var refused atomic.Int64
		e.eip.(*eipfake.Clientset).PrependReactor("update", "egressips", func(a k8stesting.Action) (bool, runtime.Object, error) {
			u := a.(k8stesting.UpdateAction)
			obj := u.GetObject().(*egressipv1.EgressIP)
			if u.GetSubresource() != "status" || obj.Name != "eip-prod" || !refuse.Load() {
				return false, nil, nil
			}
			refused.Add(1)
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "k8s.ovn.org", Resource: "egressips"}, obj.Name, nil)
		})
		populate(e)
		// Both on node1: node2 is not assignable while they are assigned.
		e.updateNode("node2", unlabelAssignable)
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
		e.create(egressIP("eip-dev", 0, []string{"172.18.0.44"}, map[string]string{"env": "dev"}, web))
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		e.expectStatus("eip-dev", "172.18.0.44@node1")
		e.updateNode("node2", labelAssignable)
		e.settle()

		refuse.Store(true)

		e.reach.set("node1", false)
		e.expectStatus("eip-dev", "172.18.0.44@node2")
		// Two refusals: the sync of the first has ended (syncs are serial).
		e.eventually("eip-prod's status write refused twice", func() error {
			if n := refused.Load(); n < 2 {
				return fmt.Errorf("%d refusals", n)
			}
			return nil
		})
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		e.expectRows("eip-dev moved, eip-prod where its status says",
			map[string]string{
				"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2"),
				"prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2"),
				"dev/web3":  rr("eip-dev", "10.244.2.8", "100.64.0.3"),
			},
			[]string{
				sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod"),
				sn("node2", "172.18.0.44", "10.244.2.8", "eip-dev"),
			})

		refuse.Store(false)
		e.expectStatus("eip-prod", "172.18.0.33@node2")
		e.expectRows("eip-prod moved once its status was written",
			map[string]string{
				"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.3"),
				"prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.3"),
				"dev/web3":  rr("eip-dev", "10.244.2.8", "100.64.0.3"),
			},
			[]string{
				sn("node2", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node2", "172.18.0.33", "10.244.3.6", "eip-prod"),
				sn("node2", "172.18.0.44", "10.244.2.8", "eip-dev"),
			})
	})
}
