package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/ovn-org/libovsdb/client"
	"github.com/urfave/cli/v2"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/migrate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/ovsdbaddr"
)

// migrateCommand is `ovnkube egressip migrate` (docs/migration.md).
func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "replace upstream OVN-Kubernetes' egress IP rows in NB with ours (--from-upstream), or ours with upstream-shaped rows (--to-upstream, for rollback), in one NB transaction per NB",
		Flags: append(config.ClientFlags(),
			&cli.BoolFlag{Name: "from-upstream", Usage: "delete upstream's egress IP rows (owner-controller default-network-controller, owner-type EgressIP) and write ours, as the master plans them from the EgressIPs' status"},
			&cli.BoolFlag{Name: "to-upstream", Usage: "write rows in upstream's shape from ours and delete ours (rollback); reads NB only"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would be done and write nothing"},
			&cli.BoolFlag{Name: "allow-unserved", Usage: "with --from-upstream: migrate even when upstream serves pod IPs ours would not (they change source)"},
			&cli.StringSliceFlag{Name: "zone-nb-address", Usage: "interconnect layout: the NB of zone (node) `NODE=ADDRESS`, repeated or comma-separated, one per zone (replaces --nb-address)"},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "how long to wait for the API and NB"},
		),
		Action: runMigrate,
	}
}

// zoneNB is one NB a migration works on: the centralized layout's (zone "") or a zone's.
type zoneNB struct {
	zone  string
	addrs []string
	tls   *tls.Config
}

func (z zoneNB) String() string {
	if z.zone == "" {
		return "NB " + strings.Join(z.addrs, ",")
	}
	return "zone " + z.zone + " NB " + strings.Join(z.addrs, ",")
}

func runMigrate(c *cli.Context) error {
	from, to := c.Bool("from-upstream"), c.Bool("to-upstream")
	if from == to {
		return fmt.Errorf("give one of --from-upstream or --to-upstream")
	}
	if c.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", c.Args().First())
	}
	if to && c.Bool("allow-unserved") {
		return fmt.Errorf("--allow-unserved goes with --from-upstream")
	}
	cfg, err := config.LoadClient(c)
	if err != nil {
		return err
	}
	nbs, err := migrationNBs(cfg, c.StringSlice("zone-nb-address"))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	var desired map[string]nbstate.State
	if from {
		if desired, err = plannedRows(ctx, c.App.Writer, cfg, nbs); err != nil {
			return err
		}
	}
	// Every NB is read and planned, and every plan checked, before any is written.
	var plans []migrationCommit
	defer func() {
		for _, p := range plans {
			p.conn.Close()
		}
	}()
	var refused []error
	for _, nb := range nbs {
		conn, snap, err := readMigrationNB(ctx, nb)
		if err != nil {
			return err
		}
		var plan migrate.Plan
		if from {
			plan = migrate.FromUpstream(snap, desired[nb.zone], cfg.GatewayMode)
			if err := plan.Refuse(c.Bool("allow-unserved")); err != nil {
				refused = append(refused, fmt.Errorf("%s: %w", nb, err))
			}
		} else {
			plan = migrate.ToUpstream(snap)
		}
		plans = append(plans, migrationCommit{nb: nb, conn: conn, plan: plan})
		printPlan(c.App.Writer, nb, plan)
	}
	if len(refused) > 0 {
		return fmt.Errorf("nothing written: %w", errors.Join(refused...))
	}
	if c.Bool("dry-run") {
		fmt.Fprintln(c.App.Writer, "dry run: nothing written")
		return nil
	}
	return commitMigration(ctx, c.App.Writer, plans)
}

// migrationCommit is one NB's planned migration.
type migrationCommit struct {
	nb   zoneNB
	conn client.Client
	plan migrate.Plan
}

// commitMigration commits each NB's plan in its own transaction, in order, and says what it did.
func commitMigration(ctx context.Context, w io.Writer, plans []migrationCommit) error {
	txns := 0
	for i, p := range plans {
		committed, err := migrate.Commit(ctx, p.conn, p.plan)
		if err != nil {
			var done []string
			for _, q := range plans[:i] {
				done = append(done, q.nb.String())
			}
			return fmt.Errorf("%s: %w (committed before it: %v; run the command again: it converges)", p.nb, err, done)
		}
		if committed {
			txns++
			fmt.Fprintf(w, "%s: committed in 1 transaction\n", p.nb)
		} else {
			fmt.Fprintf(w, "%s: nothing to do, no transaction\n", p.nb)
		}
	}
	fmt.Fprintf(w, "done: %d transaction(s) over %d NB(s)\n", txns, len(plans))
	return nil
}

// migrationNBs are the NBs named by --zone-nb-address (interconnect layout) or
// --nb-address (centralized layout).
func migrationNBs(cfg *config.Config, zones []string) ([]zoneNB, error) {
	if len(zones) == 0 {
		if len(cfg.NBAddresses) == 0 {
			return nil, fmt.Errorf("give --%s (centralized layout) or --zone-nb-address NODE=ADDRESS per zone (interconnect layout)", config.FlagNBAddress)
		}
		return []zoneNB{{addrs: cfg.NBAddresses, tls: cfg.NBTLS}}, nil
	}
	var out []zoneNB
	seen := map[string]bool{}
	for _, z := range zones {
		node, addr, ok := strings.Cut(z, "=")
		if !ok || node == "" || addr == "" {
			return nil, fmt.Errorf("invalid --zone-nb-address %q: want NODE=ADDRESS", z)
		}
		if seen[node] {
			return nil, fmt.Errorf("invalid --zone-nb-address %q: zone %s given twice", z, node)
		}
		seen[node] = true
		eps, err := ovsdbaddr.ParseList(addr)
		if err != nil {
			return nil, fmt.Errorf("invalid --zone-nb-address %q: %w", z, err)
		}
		tlsConf, err := cfg.NBTLSFor(eps)
		if err != nil {
			return nil, fmt.Errorf("--zone-nb-address %q: %w", z, err)
		}
		out = append(out, zoneNB{zone: node, addrs: eps, tls: tlsConf})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].zone < out[j].zone })
	return out, nil
}

// plannedRows reads the API as explain does and computes, with the master's
// planning, the rows ours would write in each NB.
func plannedRows(ctx context.Context, w io.Writer, cfg *config.Config, nbs []zoneNB) (map[string]nbstate.State, error) {
	rc, err := restConfig(cfg)
	if err != nil {
		return nil, err
	}
	cs, err := newClients(rc, cfg)
	if err != nil {
		return nil, err
	}
	apiOnly := *cfg
	apiOnly.NBAddresses = nil // NB is read below, with a monitor of its own
	in, err := readExplainInput(ctx, &apiOnly, cs)
	if err != nil {
		return nil, err
	}
	var zones []string
	for _, nb := range nbs {
		if nb.zone != "" {
			zones = append(zones, nb.zone)
		}
	}
	rows, drift, err := master.PlannedRows(in, zones)
	if err != nil {
		return nil, err
	}
	for _, d := range drift {
		fmt.Fprintf(w, "warning: %s: ours will move it at its first sync, after this migration\n", d)
	}
	return rows, nil
}

// readMigrationNB connects to one NB, monitors the tables a migration reads, and
// reads them. The connection is for the commit.
func readMigrationNB(ctx context.Context, nb zoneNB) (client.Client, migrate.Snapshot, error) {
	dbModel, err := nbdb.FullDatabaseModel()
	if err != nil {
		return nil, migrate.Snapshot{}, err
	}
	logger := logr.Discard()
	c, err := client.NewOVSDBClient(dbModel, ovsdbaddr.ClientOptions(&logger, nb.addrs, nb.tls, true)...)
	if err != nil {
		return nil, migrate.Snapshot{}, err
	}
	if err := c.Connect(ctx); err != nil {
		return nil, migrate.Snapshot{}, fmt.Errorf("%s: connect: %w", nb, err)
	}
	if _, err := c.Monitor(ctx, c.NewMonitor(
		client.WithTable(&nbdb.LogicalRouter{}), client.WithTable(&nbdb.LogicalSwitch{}),
		client.WithTable(&nbdb.LogicalRouterPolicy{}), client.WithTable(&nbdb.NAT{}), client.WithTable(&nbdb.QoS{}),
		client.WithTable(&nbdb.ACL{}), client.WithTable(&nbdb.AddressSet{}))); err != nil {
		c.Close()
		return nil, migrate.Snapshot{}, fmt.Errorf("%s: read: %w", nb, err)
	}
	snap, err := migrate.Read(ctx, c)
	if err != nil {
		c.Close()
		return nil, migrate.Snapshot{}, fmt.Errorf("%s: read: %w", nb, err)
	}
	return c, snap, nil
}

func printPlan(w io.Writer, nb zoneNB, p migrate.Plan) {
	ins, upd, del := p.Ours.Counts()
	fmt.Fprintf(w, "%s: upstream rows: %d to delete, %d kept, %d to create; ours: %d to insert, %d to update, %d to delete\n",
		nb, len(p.Remove), len(p.Kept), len(p.Create), ins, upd, del)
	for _, l := range p.Lines() {
		fmt.Fprintf(w, "  %s\n", l)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	for _, u := range p.Unserved {
		fmt.Fprintf(w, "  UNSERVED by ours: %s\n", u)
	}
}
