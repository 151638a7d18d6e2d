package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
)

var updateFlagReference = flag.Bool("update", false, "rewrite docs/flags.md from the flag definitions (make docs)")

// upstreamFlag is each flag's counterpart in upstream OVN-Kubernetes' ovnkube ("" = none: this project's own).
func upstreamFlag(name string) string {
	switch name {
	case config.FlagConfigFile, config.FlagInitMaster, config.FlagInitNode, config.FlagInitClusterManager, config.FlagInitZone,
		config.FlagGatewayMode, config.FlagGatewayInterface, config.FlagNBAddress, config.FlagNBClientPrivKey,
		config.FlagNBClientCert, config.FlagNBClientCACert, config.FlagNBCertCommonName, config.FlagClusterSubnets,
		config.FlagHealthCheckPort, config.FlagMetricsBindAddress, config.FlagLogLevel:
		return "same name"
	case config.FlagEgressIPEnable:
		return "`--enable-egress-ip` (accepted here too)"
	case config.FlagKubeconfig:
		return "`--k8s-kubeconfig` (accepted here too)"
	case config.FlagJoinSubnet:
		return "`--gateway-v4-join-subnet` (accepted here too), `--gateway-v6-join-subnet`"
	case config.FlagReachabilityTimeout:
		return "same name, but upstream takes whole seconds (default 1); here a duration (the INI key takes either)"
	case config.FlagEnablePprof:
		return "`--metrics-enable-pprof` (accepted here too); upstream serves the profiles on the metrics port"
	}
	return ""
}

// flagRows renders flags as the rows of a Markdown table: flag, default, upstream, description.
func flagRows(b *bytes.Buffer, flags []cli.Flag, withUpstream bool) {
	cell := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ") }
	for _, f := range flags {
		d, ok := f.(cli.DocGenerationFlag)
		if !ok {
			continue
		}
		names := f.Names()
		usage := d.GetUsage()
		placeholder := ""
		if i := strings.Index(usage, "`"); i >= 0 {
			if j := strings.Index(usage[i+1:], "`"); j >= 0 {
				placeholder = usage[i+1 : i+1+j] // as --help shows it (urfave/cli's back-quoted name)
			}
		}
		name := "`--" + names[0]
		if d.TakesValue() {
			if placeholder == "" {
				switch f.(type) {
				case *cli.DurationFlag:
					placeholder = "DURATION"
				case *cli.IntFlag, *cli.Float64Flag:
					placeholder = "N"
				default:
					placeholder = "VALUE"
				}
			}
			name += " " + placeholder
		}
		name += "`"
		for _, a := range names[1:] {
			dash := "--"
			if len(a) == 1 {
				dash = "-"
			}
			name += ", `" + dash + a + "`"
		}
		def := d.GetDefaultText()
		if !d.TakesValue() {
			def = "false" // a boolean flag: given = true
			if bf, ok := f.(*cli.BoolFlag); ok && bf.Value {
				def = "true (`--" + names[0] + "=false` turns it off)"
			}
		}
		if def == "" || def == `""` {
			def = "(none)"
		} else if !strings.Contains(def, "`") {
			def = "`" + strings.Trim(def, `"`) + "`"
		}
		if withUpstream {
			up := upstreamFlag(names[0])
			if up == "" {
				up = "none"
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", name, def, cell(up), cell(usage))
		} else {
			fmt.Fprintf(b, "| %s | %s | %s |\n", name, def, cell(usage))
		}
	}
}

// flagReference is docs/flags.md, from the flag definitions of ovnkube and of
// `ovnkube egressip explain` and `migrate`, and config.FileKeys.
func flagReference() []byte {
	var b bytes.Buffer
	b.WriteString(`# Flag and config file reference

<!-- Generated from the flag definitions by ` + "`make docs`" + ` (go-controller/cmd/ovnkube/flagsdoc_test.go); do not edit.
     ` + "`make verify`" + ` and the unit tests fail when it is stale. -->

Every ` + "`ovnkube`" + ` process takes the same flags; the roles it runs are chosen with ` + "`--init-master`" + ` (the
centralized layout), ` + "`--init-cluster-manager`" + ` and ` + "`--init-ovnkube-controller NODE`" + ` (the interconnect
layout) and ` + "`--init-node NODE`" + ` (every node). A flag a role does not use is ignored by it. Durations are Go
durations (` + "`75ms`, `4s`, `1m`" + `). Bad values stop the process at start-up with one line naming the flag and value.

## ovnkube

| Flag | Default | Upstream OVN-Kubernetes | Description |
|---|---|---|---|
`)
	flagRows(&b, config.Flags(), true)
	b.WriteString(`
### NB over TLS

An ` + "`ssl:HOST:PORT`" + ` address in ` + "`--nb-address`" + ` needs ` + "`--nb-client-privkey`, `--nb-client-cert` and `--nb-client-cacert`" + `
(PEM files, read at start-up): the client's key and certificate, signed by a CA the NB ovsdb-server trusts
(its ` + "`--ca-cert`" + `), and the CA certificate(s) the server's certificate must chain to. The server's name is checked:
without ` + "`--nb-cert-common-name`" + ` the host of each address must be in the certificate's subjectAltName (an IP
address as an IP SAN); with it, that name must be in the subjectAltName, or, for a certificate without one
(as ` + "`ovs-pki`" + ` makes them), equal its Common Name. A missing or unreadable file, or an ` + "`ssl:`" + ` address without the
files, stops the process at start-up naming the flag and the file. A server that refuses the client's certificate
makes the master and the zone controller exit after ` + "`--nb-connect-timeout`" + `, saying the server ended the TLS session.
The files are read once: renewed certificates take effect when the process restarts.

### Ports

The master's metrics (` + "`/metrics`, `/healthz`, `/readyz`" + `) are on ` + "`--metrics-bind-address`" + `, which ` + "`dist/manifests`" + `
sets to ` + "`0.0.0.0:9412`" + ` (the node daemon's to ` + "`0.0.0.0:9411`" + `), apart from upstream OVN-Kubernetes' 9409 (master
metrics), 9410 (ovnkube-node metrics), 9476 (OVN metrics) and 9310 (OVS metrics). With ` + "`--enable-pprof`" + ` the Go
profiles are served, unauthenticated, only on ` + "`--pprof-bind-address`" + ` (default ` + "`" + config.DefaultPprofBindAddress + "`" + `,
loopback), never on the metrics address; reach them with ` + "`kubectl port-forward`" + ` or from the host. A master and a
node daemon on one host that both profile need two addresses.

## ovnkube egressip explain

` + "`ovnkube egressip explain NAME`" + ` or ` + "`--pod NAMESPACE/NAME`" + ` (flags may follow the name). It reads the API and,
with ` + "`--nb-address`" + ` or ` + "`--zone-nb-address`" + `, NB; it writes nothing. ` + "`--config-file`" + ` is read as by the daemons
(the keys of the flags below that it shares with them; its ` + "`--probe`" + ` settings come from the command line only).

| Flag | Default | Description |
|---|---|---|
`)
	flagRows(&b, egressIPCommand().Subcommands[0].Flags, false)
	b.WriteString(`
## ovnkube egressip migrate

` + "`ovnkube egressip migrate --from-upstream`" + ` replaces upstream OVN-Kubernetes' egress IP rows with ours, and
` + "`--to-upstream`" + ` ours with rows in upstream's shape, in one transaction per NB (docs/migration.md). It reads the API
(` + "`--from-upstream`" + ` only) and every NB given, checks every plan, and only then writes. ` + "`--config-file`" + ` is read as by explain.

| Flag | Default | Description |
|---|---|---|
`)
	flagRows(&b, egressIPCommand().Subcommands[1].Flags, false)
	b.WriteString(`
## The INI config file (` + "`--config-file`" + `)

Not every flag can come from the file. These are the only keys read (sections and keys as upstream
OVN-Kubernetes names them); a flag given on the command line wins over its key. Every other flag is
command-line only; other keys and sections in the file are ignored.

| Section | Key | Flag |
|---|---|---|
`)
	for _, k := range config.FileKeys() {
		fmt.Fprintf(&b, "| `[%s]` | `%s` | `--%s` |\n", k.Section, k.Key, k.Flag)
	}
	fmt.Fprintf(&b, `
That is %d keys. Notes:
- `+"`[gateway] v4-join-subnet`"+` is the only join subnet key (there is no v6 key): give IPv6 or dual-stack join
  subnets with `+"`--join-subnet`"+`.
- `+"`[ovnkubernetesfeature] egressip-reachability-total-timeout`"+` takes whole seconds as upstream (`+"`1`"+`) or a
  duration (`+"`300ms`"+`).
- `+"`[metrics] enable-pprof = true`"+` turns the profiles on; the file cannot turn off `+"`--enable-pprof`"+`.
`, len(config.FileKeys()))
	return b.Bytes()
}

// TestFlagReference: docs/flags.md is what the flag definitions say (go test -run TestFlagReference -args -update
// rewrites it: make docs). Every INI key names a real flag.
func TestFlagReference(t *testing.T) {
	flags := map[string]bool{}
	for _, f := range config.Flags() {
		flags[f.Names()[0]] = true
	}
	for _, k := range config.FileKeys() {
		if k.Key == "" || !flags[k.Flag] {
			t.Errorf("INI key [%s] %q: flag %q is not an ovnkube flag", k.Section, k.Key, k.Flag)
		}
	}
	root, err := apiserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "docs", "flags.md")
	want := flagReference()
	if *updateFlagReference {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("docs/flags.md is stale (%v): run make docs", err)
	}
}
