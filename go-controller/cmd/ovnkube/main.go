// Command ovnkube runs the egress IP master (--init-master) and/or the node
// daemon (--init-node NODE) of ovn-egressip.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/urfave/cli/v2"
	"k8s.io/klog/v2"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
)

func main() {
	app := newApp()
	if err := app.Run(config.NormalizeArgs(os.Args)); err != nil {
		fmt.Fprintf(os.Stderr, "ovnkube: %v\n", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:            "ovnkube",
		Usage:           "egress IPs for OVN-Kubernetes-style clusters: master (assignment, status, OVN Northbound) and node daemon",
		Flags:           config.Flags(),
		HideHelpCommand: true,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("unexpected argument %q", c.Args().First())
			}
			cfg, err := config.Load(c)
			if err != nil {
				return err
			}
			setupLogging(cfg.LogLevel)
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			rc, err := restConfig(cfg)
			if err != nil {
				return err
			}
			return run(ctx, cfg, rc)
		},
	}
}

func setupLogging(level int) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", strconv.Itoa(level))
}
