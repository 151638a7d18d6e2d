// Command directconn runs one side of direct connections between provider clusters (docs/direct-connections.md):
//
//	directconn --mode consumer --cluster-id A [--kubeconfig A.kubeconfig] --provider B=B.kubeconfig --provider C=C.kubeconfig
//	directconn --mode provider --cluster-id B [--kubeconfig B.kubeconfig]
//
// The consumer reflects EndpointSlices into the providers as ShadowEndpointSlices (with the
// liqo.io/direct-connections-data annotation for opted-in Services); each provider turns them into EndpointSlices
// with direct addresses while its Connection to the pod's cluster is Connected.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
)

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "directconn: %v\n", err)
		os.Exit(1)
	}
}

// Mode names.
const (
	modeConsumer = "consumer"
	modeProvider = "provider"
)

// options are the parsed flags.
type options struct {
	mode       string
	clusterID  string
	kubeconfig string
	providers  []providerFlag // consumer only
	namespaces []string       // consumer only
	workers    int
	logLevel   int
}

// providerFlag is one --provider CLUSTER_ID=KUBECONFIG.
type providerFlag struct{ clusterID, kubeconfig string }

func flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "mode", Required: true, Usage: "consumer (reflect EndpointSlices into providers) or provider (ShadowEndpointSlice controller)"},
		&cli.StringFlag{Name: "cluster-id", Required: true, Usage: "this cluster's ID, as other clusters' liqo.io/remote-cluster-id labels name it"},
		&cli.StringFlag{Name: "kubeconfig", Usage: "kubeconfig of this cluster (default: in-cluster config)"},
		&cli.StringSliceFlag{Name: "provider", Usage: "consumer mode: a provider to reflect to, as CLUSTER_ID=KUBECONFIG (repeat for each)"},
		&cli.StringSliceFlag{Name: "namespace", Usage: "consumer mode: reflect only this namespace (repeatable; default all)"},
		&cli.IntFlag{Name: "workers", Value: 2, Usage: "number of sync workers"},
		&cli.IntFlag{Name: "loglevel", Value: 2, Usage: "klog verbosity"},
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:            "directconn",
		Usage:           "direct connections between provider clusters: consumer-side reflection or provider-side ShadowEndpointSlice controller",
		Flags:           flags(),
		HideHelpCommand: true,
		Action: func(c *cli.Context) error {
			opts, err := parseOptions(c)
			if err != nil {
				return err
			}
			setupLogging(opts.logLevel)
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return run(ctx, opts)
		},
	}
}

// parseOptions validates the flags.
func parseOptions(c *cli.Context) (options, error) {
	if c.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q", c.Args().First())
	}
	o := options{
		mode:       c.String("mode"),
		clusterID:  c.String("cluster-id"),
		kubeconfig: c.String("kubeconfig"),
		namespaces: c.StringSlice("namespace"),
		workers:    c.Int("workers"),
		logLevel:   c.Int("loglevel"),
	}
	if errs := validation.IsValidLabelValue(o.clusterID); o.clusterID == "" || len(errs) > 0 {
		return o, fmt.Errorf("--cluster-id %q must be a non-empty label value: %s", o.clusterID, strings.Join(errs, "; "))
	}
	if o.workers < 1 {
		return o, fmt.Errorf("--workers must be at least 1, not %d", o.workers)
	}
	switch o.mode {
	case modeConsumer:
		seen := map[string]bool{o.clusterID: true}
		for _, p := range c.StringSlice("provider") {
			id, path, ok := strings.Cut(p, "=")
			if !ok || id == "" || path == "" {
				return o, fmt.Errorf("--provider %q: want CLUSTER_ID=KUBECONFIG", p)
			}
			if seen[id] {
				return o, fmt.Errorf("--provider %q: cluster %s given twice (or is this cluster)", p, id)
			}
			seen[id] = true
			o.providers = append(o.providers, providerFlag{clusterID: id, kubeconfig: path})
		}
		if len(o.providers) == 0 {
			return o, fmt.Errorf("--mode consumer needs at least one --provider CLUSTER_ID=KUBECONFIG")
		}
	case modeProvider:
		if len(c.StringSlice("provider")) > 0 || len(o.namespaces) > 0 {
			return o, fmt.Errorf("--provider and --namespace are for --mode consumer")
		}
	default:
		return o, fmt.Errorf("--mode must be %s or %s, not %q", modeConsumer, modeProvider, o.mode)
	}
	return o, nil
}

func setupLogging(level int) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", strconv.Itoa(level))
}
