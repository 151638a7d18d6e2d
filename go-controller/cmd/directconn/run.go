package main

import (
	"context"
	"fmt"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/consumer"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/provider"
)

// run builds the clients and runs the controller of opts.mode until ctx is done.
func run(ctx context.Context, opts options) error {
	local, err := restConfig(opts.kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(local)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(local)
	if err != nil {
		return err
	}
	if opts.mode == modeProvider {
		c, err := provider.New(provider.Config{ClusterID: opts.clusterID, Kube: kube, Dynamic: dyn})
		if err != nil {
			return err
		}
		return c.Run(ctx, opts.workers)
	}
	cfg := consumer.Config{ClusterID: opts.clusterID, Kube: kube, Dynamic: dyn, Namespaces: opts.namespaces}
	for _, p := range opts.providers {
		rc, err := restConfig(p.kubeconfig)
		if err != nil {
			return fmt.Errorf("provider %s: %w", p.clusterID, err)
		}
		pd, err := dynamic.NewForConfig(rc)
		if err != nil {
			return fmt.Errorf("provider %s: %w", p.clusterID, err)
		}
		cfg.Providers = append(cfg.Providers, consumer.Provider{ClusterID: p.clusterID, Dynamic: pd})
	}
	c, err := consumer.New(cfg)
	if err != nil {
		return err
	}
	return c.Run(ctx, opts.workers)
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
