package main

import (
	"context"
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ovn-egressip/ovn-egressip/go-controller/internal/leaderelect"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/consumer"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/provider"
)

// clusterConfigs are the apiservers run talks to.
type clusterConfigs struct {
	// local is this cluster (its controller's objects, Events and the Lease).
	local *rest.Config
	// providers are, in consumer mode, the providers of opts.providers, in the same order.
	providers []*rest.Config
}

// run loads the kubeconfigs of opts and runs the controller of opts.mode until ctx is done (runClusters).
func run(ctx context.Context, opts options) error {
	var cc clusterConfigs
	var err error
	if cc.local, err = restConfig(opts.kubeconfig); err != nil {
		return err
	}
	for _, p := range opts.providers {
		rc, err := restConfig(p.kubeconfig)
		if err != nil {
			return fmt.Errorf("provider %s: %w", p.clusterID, err)
		}
		cc.providers = append(cc.providers, rc)
	}
	return runClusters(ctx, opts, cc)
}

// runClusters builds the clients and runs the controller of opts.mode until ctx is done, or, with leader election,
// only while this process holds the Lease (leaderelect.Run). It returns nil when ctx ends, a *leaderelect.LostError
// when the Lease is lost first, and otherwise the first client, controller or election error.
func runClusters(ctx context.Context, opts options, cc clusterConfigs) error {
	kube, err := kubernetes.NewForConfig(cc.local)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cc.local)
	if err != nil {
		return err
	}
	var providers []consumer.Provider
	for i, p := range opts.providers {
		pd, err := dynamic.NewForConfig(cc.providers[i])
		if err != nil {
			return fmt.Errorf("provider %s: %w", p.clusterID, err)
		}
		providers = append(providers, consumer.Provider{ClusterID: p.clusterID, Dynamic: pd})
	}
	// The controller is built and started only once leading, so that a standby replica neither watches nor writes.
	lead := func(ctx context.Context) error {
		if opts.mode == modeProvider {
			c, err := provider.New(provider.Config{ClusterID: opts.clusterID, Kube: kube, Dynamic: dyn,
				DenyDirectConnections: opts.deny})
			if err != nil {
				return err
			}
			return c.Run(ctx, opts.workers)
		}
		c, err := consumer.New(consumer.Config{ClusterID: opts.clusterID, Kube: kube, Dynamic: dyn,
			Namespaces: opts.namespaces, Providers: providers})
		if err != nil {
			return err
		}
		return c.Run(ctx, opts.workers)
	}
	e := opts.election
	if !e.enabled {
		return lead(ctx)
	}
	// A client of its own for the Lease, so that the controller's requests never hold up a renewal in the
	// client-side rate limiter.
	lc := rest.CopyConfig(cc.local)
	lc.UserAgent = rest.DefaultKubernetesUserAgent() + " leader-election"
	leases, err := kubernetes.NewForConfig(lc)
	if err != nil {
		return err
	}
	return leaderelect.Run(ctx, leaderelect.Config{
		Client:        leases.CoordinationV1(),
		Namespace:     e.namespace,
		Name:          e.leaseName,
		Identity:      e.identity,
		LeaseDuration: e.leaseDuration,
		RenewDeadline: e.renewDeadline,
		RetryPeriod:   e.retryPeriod,
		Component:     "directconn-" + opts.mode,
	}, lead)
}

// restConfig loads a kubeconfig file, or the in-cluster config when path is empty.
func restConfig(path string) (*rest.Config, error) {
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and no in-cluster config: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}
