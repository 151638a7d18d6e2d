package master

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/apiretry"
	eipscheme "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/scheme"
	eipinformers "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/informers/externalversions"
)

// nbProbeInterval is how often the NB connection is probed (OVSDB echo).
const nbProbeInterval = 500 * time.Millisecond

// Run is the egress IP master. It connects to OVN Northbound (retrying until it
// can), starts informers for EgressIP, Node, Namespace and Pod, waits for their
// caches, syncs once (start-up sync: NB rows we own that nothing wants any more are
// deleted, missing ones added, nothing written when nothing changed) and then on
// every relevant event. It blocks until ctx is done and then returns nil; it returns
// early only on a setup error (invalid Params, EgressIP CRD not installed, NB schema
// not usable).
func Run(ctx context.Context, p Params) error {
	s, err := p.validate()
	if err != nil {
		return err
	}
	if _, err := s.EgressIP.K8sV1().EgressIPs().List(ctx, metav1.ListOptions{Limit: 1}); apierrors.IsNotFound(err) {
		return fmt.Errorf("master: the EgressIP API (k8s.ovn.org/v1 egressips) is not served; install dist/crds: %w", err)
	}
	if s.Recorder == nil {
		rec, shutdown, err := NewRecorder(ctx, s.Kube, s.Role, s.Zone)
		if err != nil {
			return err
		}
		defer shutdown()
		s.Recorder = rec
	}
	m := newMetrics(s.Metrics)

	var conn *nbConn
	if !s.noNB {
		nb, err := newNBClient(s)
		if err != nil {
			return fmt.Errorf("master: NB client: %w", err)
		}
		defer nb.Close()
		if err := connectNB(ctx, nb, s.NBTimeout, s.NBAddress, s.watchesDataPlane()); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("master: %w", err)
		}
		conn = newNBConn(nb, m.nbTransactions)
	}

	kubeInf := informers.NewSharedInformerFactory(s.Kube, 0)
	eipInf := eipinformers.NewSharedInformerFactory(s.EgressIP, 0)
	var nbc nbClient
	if conn != nil {
		nbc = conn
	}
	c, err := newController(s, nbc, m, kubeInf, eipInf)
	if err != nil {
		return fmt.Errorf("master: %w", err)
	}
	// The informers' lists and watches wait out an apiserver that refuses connections without client-go's
	// reflector backoff (apiretry).
	kubeInf.StartWithContext(apiretry.Informing(ctx))
	eipInf.StartWithContext(apiretry.Informing(ctx))
	defer kubeInf.Shutdown()
	defer eipInf.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return nil // ctx ended
	}
	klog.InfoS("Egress IP master started", "role", roleName(s.Role), "zone", s.Zone, "gatewayMode", s.mode, "nb", s.NBAddress)

	if conn != nil {
		var dataPlane func()
		if s.watchesDataPlane() {
			dataPlane = c.dataPlaneChanged
		}
		watchNB(ctx, conn, nbProbeInterval, c.resync, dataPlane)
	}
	if n, ok := s.Reachability.(ReachabilityNotifier); ok {
		go forward(ctx, n.Changes(), c.enqueue)
	}
	if s.ResyncPeriod > 0 {
		go func() {
			t := time.NewTicker(s.ResyncPeriod)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					c.resync()
				}
			}
		}()
	}
	c.enqueue()
	c.run(ctx)
	return nil
}

// roleName names a role in logs.
func roleName(r Role) string {
	if r == RoleMaster {
		return "master"
	}
	return string(r)
}

// EventSource is the source of the Events a process of role r writes: the component
// is the process's name as the layout calls it (ovnkube-master, ovnkube-cluster-manager,
// ovnkube-controller), and a zone controller names its zone's node as the host.
func EventSource(r Role, zone string) corev1.EventSource {
	switch r {
	case RoleClusterManager:
		return corev1.EventSource{Component: "ovnkube-cluster-manager"}
	case RoleZone:
		return corev1.EventSource{Component: "ovnkube-controller", Host: zone}
	default:
		return corev1.EventSource{Component: "ovnkube-master"}
	}
}

// NewRecorder returns the Event recorder of a process of role r (its EventSource,
// writing to kube; it knows the EgressIP type) and the function that flushes and
// stops it.
func NewRecorder(ctx context.Context, kube kubernetes.Interface, r Role, zone string) (record.EventRecorder, func(), error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	if err := eipscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	return broadcaster.NewRecorder(scheme, EventSource(r, zone)), broadcaster.Shutdown, nil
}

func forward(ctx context.Context, ch <-chan struct{}, f func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
			f()
		}
	}
}
