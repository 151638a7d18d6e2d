package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/ovn-egressip/ovn-egressip/go-controller/internal/leaderelect"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/apiretry"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/healthcheck"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node"
)

// clients are the API clients every role uses.
type clients struct {
	kube     kubernetes.Interface
	egressIP egressipclientset.Interface
}

func restConfig(cfg *config.Config) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("invalid --%s %q: %w", config.FlagKubeconfig, cfg.Kubeconfig, err)
	}
	return rc, nil
}

func newClients(rc *rest.Config, cfg *config.Config) (*clients, error) {
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = cfg.KubeAPIQPS, cfg.KubeAPIBurst
	rc.UserAgent = "ovnkube-egressip"
	// Informers' GETs refused by an apiserver that is not listening are retried in place (apiretry).
	rc.Wrap(apiretry.Wrap)
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	eip, err := egressipclientset.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return &clients{kube: kube, egressIP: eip}, nil
}

// run starts the roles cfg asks for against the API server of rc and blocks
// until ctx is done or a role fails.
func run(ctx context.Context, cfg *config.Config, rc *rest.Config) error {
	cs, err := newClients(rc, cfg)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		// go_gc_heap_live_bytes (the heap marked live by the last GC) on top of the defaults: the heap a
		// process needs, without the garbage that go_memstats_heap_inuse_bytes also counts (test/scale reads both).
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var roles []string
	if cfg.InitMaster {
		roles = append(roles, "master")
	}
	if cfg.InitClusterManager {
		roles = append(roles, "cluster-manager")
	}
	if cfg.InitZone != "" {
		roles = append(roles, "ovnkube-controller")
	}
	if cfg.InitNode != "" {
		roles = append(roles, "node")
	}
	ready := newReadiness(roles...)
	g, ctx := errgroup.WithContext(ctx)
	if cfg.MetricsBindAddress != "" {
		serveHTTP(ctx, g, "metrics", config.FlagMetricsBindAddress, cfg.MetricsBindAddress, metricsMux(reg, ready))
	}
	if cfg.EnablePprof {
		if !isLoopback(cfg.PprofBindAddress) {
			klog.Warningf("--%s: serving Go's profiles unauthenticated on %s, not only on loopback (--%s)", config.FlagEnablePprof, cfg.PprofBindAddress, config.FlagPprofBindAddress)
		}
		serveHTTP(ctx, g, "pprof", config.FlagPprofBindAddress, cfg.PprofBindAddress, pprofMux())
	}
	if cfg.InitMaster {
		g.Go(func() error { return runMaster(ctx, cfg, cs, reg, ready, master.RoleMaster) })
	}
	if cfg.InitClusterManager {
		g.Go(func() error { return runMaster(ctx, cfg, cs, reg, ready, master.RoleClusterManager) })
	}
	if cfg.InitZone != "" {
		g.Go(func() error { return runZone(ctx, cfg, cs, reg, ready) })
	}
	if cfg.InitNode != "" {
		g.Go(func() error { return runNode(ctx, cfg, cs, ready) })
	}
	return g.Wait()
}

// serveHTTP serves h on addr (the value of --flag) until ctx is done; a listen error fails g naming the flag.
func serveHTTP(ctx context.Context, g *errgroup.Group, what, flag, addr string, h http.Handler) {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	g.Go(func() error {
		klog.Infof("serving %s on http://%s", what, addr)
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("invalid --%s %q: %w", flag, addr, err)
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
}

// metricsMux serves /metrics, /healthz (the process serves: the liveness probe) and /readyz (every role is ready:
// the readiness probe; a master is ready once it reaches the NB database and either stands by or its last sync
// succeeded, a node once its last sync programmed the host). Never the profiles: they have their own address.
func metricsMux(reg *prometheus.Registry, ready *readiness) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", ready.serveHTTP)
	return mux
}

// pprofMux serves Go's /debug/pprof/ (--enable-pprof, on --pprof-bind-address).
func pprofMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // also serves heap, goroutine, allocs...
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// isLoopback: addr (HOST:PORT) listens on a loopback address only ("localhost" included).
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// runMaster runs the master (role RoleMaster) or the cluster manager (RoleClusterManager): leader-elected, with
// the health checker. The cluster manager uses no NB database.
func runMaster(ctx context.Context, cfg *config.Config, cs *clients, reg prometheus.Registerer, ready *readiness, role master.Role) error {
	name := "master"
	if role == master.RoleClusterManager {
		name = "cluster-manager"
	}
	if !cfg.EgressIPEnable {
		klog.Infof("%s: egress IP feature off (--%s not set): no EgressIP informer, handler or NB writer starts", name, config.FlagEgressIPEnable)
		ready.set(name, nil)
		<-ctx.Done()
		return nil
	}
	if role == master.RoleMaster {
		ready.set(name, errors.New("waiting for the NB database"))
		if err := config.WaitNBReachable(ctx, cfg.NBAddresses, cfg.NBTLS, cfg.NBConnectTimeout); err != nil {
			return err
		}
	}
	ready.set(name, nil) // standing by, or leading until its first sync says otherwise
	lead := func(ctx context.Context) error {
		return runLeader(ctx, cfg, cs, reg, role, func(err error) { ready.set(name, syncState(err)) })
	}
	if !cfg.LeaderElection {
		return lead(ctx)
	}
	return runWithLeaderElection(ctx, cfg, cs.kube, lead)
}

// runZone runs the zone controller of one node (not leader-elected: one per zone, each with its own NB).
func runZone(ctx context.Context, cfg *config.Config, cs *clients, reg prometheus.Registerer, ready *readiness) error {
	const name = "ovnkube-controller"
	if !cfg.EgressIPEnable {
		klog.Infof("%s: egress IP feature off (--%s not set): no EgressIP informer, handler or NB writer starts", name, config.FlagEgressIPEnable)
		ready.set(name, nil)
		<-ctx.Done()
		return nil
	}
	ready.set(name, errors.New("waiting for the zone's NB database"))
	if err := config.WaitNBReachable(ctx, cfg.NBAddresses, cfg.NBTLS, cfg.NBConnectTimeout); err != nil {
		return err
	}
	return master.Run(ctx, master.Params{
		Role:           master.RoleZone,
		Zone:           cfg.InitZone,
		Kube:           cs.kube,
		EgressIP:       cs.egressIP,
		NBAddress:      strings.Join(cfg.NBAddresses, ","),
		NBTLS:          cfg.NBTLS,
		GatewayMode:    cfg.GatewayMode,
		ClusterSubnets: cfg.ClusterSubnets,
		JoinSubnets:    cfg.JoinSubnets,
		Metrics:        reg,
		// The zone keeps the SNAT rows of an egress IP its node released for this long (shared gateway mode); in
		// local gateway mode its pods stay rerouted to the previous holder for as long, as the master's.
		ReleaseLinger: releaseLinger(cfg.NodeReleaseLinger),
		OnSync:        func(err error) { ready.set(name, syncState(err)) },
	})
}

// runLeader runs the master's (or the cluster manager's) work: the health checker and the controller.
func runLeader(ctx context.Context, cfg *config.Config, cs *clients, reg prometheus.Registerer, role master.Role, onSync func(error)) error {
	recorder, stopRecorder, err := master.NewRecorder(ctx, cs.kube, role, "")
	if err != nil {
		return err
	}
	defer stopRecorder()
	held := master.HealthHeldCounter(reg)
	g, ctx := errgroup.WithContext(ctx)
	nodes := newNodeTargets(cs.kube)
	checker := healthcheck.NewChecker(healthcheck.CheckerConfig{
		Port:     cfg.HealthCheckPort,
		Interval: cfg.ReachabilityInterval,
		Timeout:  cfg.ReachabilityTotalTimeout,
		Targets:  nodes.targets,
		OnChange: func(string, bool) { nodes.notify() },
		// a restarted daemon's facts are trusted once the master's cache holds them (master.DaemonIdentity)
		OnDaemonChange: func(string, string) { nodes.notify() },
		OnHold: func(node string, failed, probed int) {
			held.Inc()
			reportHold(recorder, node, failed, probed)
		},
	})
	defer master.RegisterNodeReachable(reg, func() map[string]bool {
		out := map[string]bool{}
		for _, t := range nodes.targets() {
			out[t.Node] = checker.Reachable(t.Node)
		}
		return out
	})()
	g.Go(func() error { return nodes.run(ctx) })
	g.Go(func() error { checker.Run(ctx); return nil })
	g.Go(func() error {
		nb, nbTLS := strings.Join(cfg.NBAddresses, ","), cfg.NBTLS
		if role == master.RoleClusterManager {
			nb, nbTLS = "", nil // no NB: the zones write the rows
		}
		return master.Run(ctx, master.Params{
			Role:           role,
			Kube:           cs.kube,
			EgressIP:       cs.egressIP,
			NBAddress:      nb,
			NBTLS:          nbTLS,
			GatewayMode:    cfg.GatewayMode,
			ClusterSubnets: cfg.ClusterSubnets,
			JoinSubnets:    cfg.JoinSubnets,
			Reachability:   &reachability{checker: checker, changes: nodes.changes},
			Recorder:       recorder,
			Metrics:        reg,
			// The nodes keep a moved IP's SNAT for this long: the master reroutes to
			// the previous holder for as long while the new one is not ready.
			ReleaseLinger: releaseLinger(cfg.NodeReleaseLinger),
			OnSync:        onSync,
		})
	})
	return g.Wait()
}

// runWithLeaderElection runs lead only while this master holds the Lease of cfg (leaderelect.Run); the identity is
// "<hostname>_<pid>" (the node of --init-master NODE instead of the hostname when given). A lost Lease is an error, so that the process exits and a restart starts clean and no two
// masters ever write at once.
func runWithLeaderElection(ctx context.Context, cfg *config.Config, kube kubernetes.Interface, lead func(context.Context) error) error {
	host := cfg.MasterNode // --init-master NODE
	if host == "" {
		var err error
		if host, err = os.Hostname(); err != nil {
			klog.ErrorS(err, "Cannot read the hostname; the leader election identity is the pid alone")
		}
	}
	if cfg.ClusterManagerNode != "" {
		host = cfg.ClusterManagerNode // --init-cluster-manager NODE
	}
	return leaderelect.Run(ctx, leaderelect.Config{
		Client:        kube.CoordinationV1(),
		Namespace:     cfg.LeaderElectionNamespace,
		Name:          cfg.LeaderElectionName,
		Identity:      fmt.Sprintf("%s_%d", host, os.Getpid()),
		LeaseDuration: cfg.LeaderElectionLeaseDuration,
		RenewDeadline: cfg.LeaderElectionRenewDeadline,
		RetryPeriod:   cfg.LeaderElectionRetryPeriod,
		Component:     "master",
	}, lead)
}

func runNode(ctx context.Context, cfg *config.Config, cs *clients, ready *readiness) error {
	if !cfg.EgressIPEnable {
		klog.Infof("node %s: egress IP feature off (--%s not set): no EgressIP informer, handler or health server starts", cfg.InitNode, config.FlagEgressIPEnable)
		ready.set("node", nil)
		<-ctx.Done()
		return nil
	}
	g, ctx := errgroup.WithContext(ctx)
	synced := newFirstSync()
	daemonID := newDaemonID()
	klog.Infof("node %s: this node daemon's identity is %s (%s)", cfg.InitNode, daemonID, annotations.EgressDaemonID)
	if cfg.HealthCheckPort != 0 {
		g.Go(func() error {
			addr, err := waitManagementIP(ctx, cs.kube, cfg.InitNode)
			if err != nil {
				return err
			}
			// The health check answers only once this daemon's first sync has programmed the host and published
			// its egress-ips-ready: a master that sees the node reachable again (after a restart, say a DaemonSet
			// roll) then reads this daemon's facts, not those its predecessor left, which may name an egress IP
			// the master took away meanwhile (docs/images.md, "Real kubelets").
			if err := synced.wait(ctx); err != nil {
				return nil // stopping before the first sync
			}
			return healthcheck.Serve(ctx, addr, cfg.HealthCheckPort, daemonID)
		})
	}
	g.Go(func() error {
		return node.Run(ctx, node.Params{
			Kube:             cs.kube,
			EgressIP:         cs.egressIP,
			NodeName:         cfg.InitNode,
			GatewayMode:      cfg.GatewayMode,
			GatewayInterface: cfg.GatewayInterface,
			ResyncInterval:   cfg.NodeResyncInterval,
			ReleaseLinger:    releaseLinger(cfg.NodeReleaseLinger),
			DaemonID:         daemonID,
			OnSync: func(err error) {
				ready.set("node", syncState(err))
				synced.done(err)
			},
		})
	})
	return g.Wait()
}

// waitManagementIP reads the node's management port IP (the .2 of its first pod
// subnet, k8s.ovn.org/node-subnets), waiting for the annotation if needed.
func waitManagementIP(ctx context.Context, kube kubernetes.Interface, name string) (netip.Addr, error) {
	for {
		n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			subnets, perr := annotations.ParseNodeSubnets(n)
			if perr == nil && len(subnets) > 0 {
				return annotations.ManagementIP(subnets[0]), nil
			}
			klog.Warningf("node %s: cannot start the egress health server yet: %v", name, perr)
		} else {
			klog.Warningf("node %s: cannot read Node: %v", name, err)
		}
		select {
		case <-ctx.Done():
			return netip.Addr{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// newDaemonID draws this node daemon run's identity (annotations.EgressDaemonID): 64 random bits in hex.
func newDaemonID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error (Go 1.24+)
	return hex.EncodeToString(b[:])
}

// releaseLinger maps the flag (0 = off) to node.Params.ReleaseLinger (0 = default, negative = off).
func releaseLinger(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
