// Command directconn runs one side of direct connections between provider clusters (docs/direct-connections.md):
//
//	directconn --mode consumer --cluster-id A [--kubeconfig A.kubeconfig] --provider B=B.kubeconfig --provider C=C.kubeconfig
//	directconn --mode provider --cluster-id B [--kubeconfig B.kubeconfig]
//
// The consumer reflects EndpointSlices into the providers as ShadowEndpointSlices (with the
// liqo.io/direct-connections-data annotation for opted-in Services); each provider turns them into EndpointSlices
// with direct addresses while its Connection to the pod's cluster is Connected.
//
// With --leader-elect (the default) several replicas may run: the controller runs only in the one that holds the
// coordination.k8s.io Lease --leader-elect-namespace/--leader-elect-lease-name of this cluster, and a replica that
// loses the Lease exits with status 1.
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
	"time"

	"github.com/urfave/cli/v2"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/leaderelection"
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

// Leader election flags.
const (
	flagLeaderElect   = "leader-elect"
	flagLeaseNS       = "leader-elect-namespace"
	flagLeaseName     = "leader-elect-lease-name"
	flagLeaseDuration = "leader-elect-lease-duration"
	flagRenewDeadline = "leader-elect-renew-deadline"
	flagRetryPeriod   = "leader-elect-retry-period"
)

// podNameEnv names the environment variable that, when set (from the downward API), is the leader election
// identity.
const podNameEnv = "POD_NAME"

// flagDeny is Liqo's provider flag of the same name.
const flagDeny = "deny-direct-connections"

// options are the parsed flags.
type options struct {
	mode       string
	clusterID  string
	kubeconfig string
	providers  []providerFlag // consumer only
	namespaces []string       // consumer only
	deny       bool           // provider only
	workers    int
	logLevel   int
	election   election
}

// election is how the controller waits for leadership (zero value: no leader election).
type election struct {
	enabled                                   bool
	namespace, leaseName                      string
	leaseDuration, renewDeadline, retryPeriod time.Duration
	// identity is the Lease holder identity; not a flag (leaderIdentity sets it), required when enabled.
	identity string
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
		&cli.BoolFlag{Name: flagDeny, Usage: "provider mode: drop the endpoints listed in liqo.io/direct-connections-data instead of remapping them (as Liqo's flag of that name)"},
		&cli.IntFlag{Name: "workers", Value: 2, Usage: "number of sync workers"},
		&cli.IntFlag{Name: "loglevel", Value: 2, Usage: "klog verbosity"},
		&cli.BoolFlag{Name: flagLeaderElect, Value: true, Usage: "run the controller only while holding a coordination.k8s.io Lease in this cluster (for several replicas)"},
		&cli.StringFlag{Name: flagLeaseNS, Value: "kube-system", Usage: "namespace of the Lease"},
		&cli.StringFlag{Name: flagLeaseName, Usage: "name of the Lease (default: ovn-egressip-directconn-MODE)"},
		&cli.DurationFlag{Name: flagLeaseDuration, Value: 15 * time.Second, Usage: "how long standby replicas wait after the leader's last renewal before taking over"},
		&cli.DurationFlag{Name: flagRenewDeadline, Value: 10 * time.Second, Usage: "how long the leader retries a failing renewal before it gives up and exits"},
		&cli.DurationFlag{Name: flagRetryPeriod, Value: 2 * time.Second, Usage: "interval between attempts to acquire or renew the Lease"},
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
			if opts.election.enabled {
				if opts.election.identity, err = leaderIdentity(os.Getenv(podNameEnv), os.Hostname); err != nil {
					return err
				}
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
		if c.Bool(flagDeny) {
			return o, fmt.Errorf("--%s is for --mode provider", flagDeny)
		}
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
		o.deny = c.Bool(flagDeny)
	default:
		return o, fmt.Errorf("--mode must be %s or %s, not %q", modeConsumer, modeProvider, o.mode)
	}
	var err error
	o.election, err = parseElection(c, o.mode)
	return o, err
}

// parseElection validates the leader election flags (only when --leader-elect is on). The durations follow
// client-go's rules: lease duration > renew deadline > 1.2 × retry period > 0.
func parseElection(c *cli.Context, mode string) (election, error) {
	e := election{
		enabled:       c.Bool(flagLeaderElect),
		namespace:     c.String(flagLeaseNS),
		leaseName:     c.String(flagLeaseName),
		leaseDuration: c.Duration(flagLeaseDuration),
		renewDeadline: c.Duration(flagRenewDeadline),
		retryPeriod:   c.Duration(flagRetryPeriod),
	}
	if !e.enabled {
		return election{}, nil
	}
	if e.leaseName == "" {
		e.leaseName = "ovn-egressip-directconn-" + mode
	}
	if errs := validation.IsDNS1123Label(e.namespace); len(errs) > 0 {
		return e, fmt.Errorf("--%s %q is not a namespace name: %s", flagLeaseNS, e.namespace, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(e.leaseName); len(errs) > 0 {
		return e, fmt.Errorf("--%s %q is not a Lease name: %s", flagLeaseName, e.leaseName, strings.Join(errs, "; "))
	}
	switch {
	case e.retryPeriod <= 0:
		return e, fmt.Errorf("--%s %s must be positive", flagRetryPeriod, e.retryPeriod)
	case float64(e.renewDeadline) <= leaderelection.JitterFactor*float64(e.retryPeriod):
		return e, fmt.Errorf("--%s %s must exceed %.1f × --%s %s", flagRenewDeadline, e.renewDeadline,
			leaderelection.JitterFactor, flagRetryPeriod, e.retryPeriod)
	case e.leaseDuration <= e.renewDeadline:
		return e, fmt.Errorf("--%s %s must exceed --%s %s", flagLeaseDuration, e.leaseDuration, flagRenewDeadline, e.renewDeadline)
	}
	return e, nil
}

// leaderIdentity returns the Lease holder identity: podName when not empty (unique among a Deployment's pods; a
// restarted container takes its Lease back at once), else the host name with a random suffix,
// "<hostname>_<8 random lowercase alphanumerics>", so that two processes on one host differ. The error is
// hostname's.
func leaderIdentity(podName string, hostname func() (string, error)) (string, error) {
	if podName != "" {
		return podName, nil
	}
	h, err := hostname()
	if err != nil {
		return "", fmt.Errorf("leader election identity: no $%s and no host name: %w", podNameEnv, err)
	}
	return h + "_" + utilrand.String(8), nil
}

func setupLogging(level int) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", strconv.Itoa(level))
}
