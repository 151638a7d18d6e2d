// Command ovnkube runs the egress IP master (--init-master) and/or the node
// daemon (--init-node NODE) of ovn-egressip.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/urfave/cli/v2"
	"k8s.io/klog/v2"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/version"
)

func main() {
	app := newApp()
	if err := app.Run(normalizeArgs(os.Args)); err != nil {
		fmt.Fprintf(os.Stderr, "ovnkube: %v\n", err)
		os.Exit(1)
	}
}

func newApp() *cli.App {
	return &cli.App{
		Name:            "ovnkube",
		Version:         version.String(),
		Usage:           "egress IPs for OVN-Kubernetes-style clusters: master (assignment, status, OVN Northbound) and node daemon",
		Flags:           config.Flags(),
		HideHelpCommand: true,
		Commands:        []*cli.Command{egressIPCommand()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("unexpected argument %q", c.Args().First())
			}
			cfg, err := config.Load(c)
			if err != nil {
				return err
			}
			setupLogging(cfg.LogLevel)
			klog.InfoS("ovnkube starting", "version", version.String())
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

// normalizeArgs is config.NormalizeArgs plus, for `egressip explain`, flags
// accepted after the NAME (`explain NAME -o json`): a token not starting with "-"
// that is no flag's value is the NAME (only explain's boolean flags take no value).
func normalizeArgs(args []string) []string {
	args = config.NormalizeArgs(args)
	boolFlags := map[string]bool{"-h": true, "--help": true}
	for _, f := range egressIPCommand().Subcommands[0].Flags {
		if _, ok := f.(*cli.BoolFlag); ok {
			for _, n := range f.Names() {
				boolFlags["-"+n], boolFlags["--"+n] = true, true
			}
		}
	}
	for i := 0; i+1 < len(args); i++ {
		if args[i] != "egressip" || args[i+1] != "explain" {
			continue
		}
		head := append([]string(nil), args[:i+2]...)
		var flags, positional []string
		rest := args[i+2:]
		for j := 0; j < len(rest); j++ {
			a := rest[j]
			switch {
			case a == "--":
				positional = append(positional, rest[j+1:]...)
				j = len(rest)
			case !strings.HasPrefix(a, "-") || a == "-":
				positional = append(positional, a)
			case strings.Contains(a, "=") || boolFlags[a]:
				flags = append(flags, a)
			default:
				flags = append(flags, a)
				if j+1 < len(rest) {
					flags = append(flags, rest[j+1])
					j++
				}
			}
		}
		return append(append(head, flags...), positional...)
	}
	return args
}
