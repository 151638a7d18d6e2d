package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// nbConn is a libovsdb connection to the cluster's NB database with Logical_Switch and Logical_Switch_Port monitored.
type nbConn struct {
	c    client.Client
	lost atomic.Bool // the server dropped the connection (libovsdb's Connected stays true then)
	done chan struct{}
}

// dialNB connects to the NB database at address; with several (a RAFT cluster's members) it talks to the leader
// only. It does not reconnect by itself: libovsdb's reconnect purges the cache, writing the cache's database model
// while an API call of ours reads it (TableCache.Purge vs Mapper, a data race the race detector reported in the
// chaos test); Cluster.nbConn dials again instead once the connection is lost (the leader changed or went away).
func dialNB(ctx context.Context, address string) (*nbConn, error) {
	dbm, err := nbdb.FullDatabaseModel()
	if err != nil {
		return nil, err
	}
	c, err := nbserver.NewClient(address, dbm)
	if err != nil {
		return nil, err
	}
	n := &nbConn{c: c, done: make(chan struct{})}
	disconnected := c.DisconnectNotify()
	go func() {
		select {
		case <-disconnected: // the server went away
			n.lost.Store(true)
		case <-n.done:
		}
	}()
	if err := c.Connect(ctx); err != nil {
		n.close()
		return nil, fmt.Errorf("connect to NB %s: %w", address, err)
	}
	if _, err := c.Monitor(ctx, c.NewMonitor(
		client.WithTable(&nbdb.LogicalSwitch{}),
		client.WithTable(&nbdb.LogicalSwitchPort{}))); err != nil {
		n.close()
		return nil, fmt.Errorf("monitor NB: %w", err)
	}
	return n, nil
}

// createRowsAt writes rows in one transaction through a connection of its own (see atNB), for up to 30 s.
func createRowsAt(ctx context.Context, address string, rows []model.Model) error {
	return atNB(ctx, address, time.Now().Add(30*time.Second), func(nb *nbConn) error { return nb.createRows(ctx, rows) })
}

// atNB runs f on a connection of its own to address. A RAFT cluster that has just formed may move its leadership
// once more, dropping the connection before a transaction is sent (ErrNotConnected: not sent, so not written): it
// dials again then and runs f again, until deadline (zero: until ctx ends).
func atNB(ctx context.Context, address string, deadline time.Time, f func(*nbConn) error) error {
	for {
		err := func() error {
			nb, err := dialNB(ctx, address)
			if err != nil {
				return err
			}
			defer nb.close()
			return f(nb)
		}()
		if err == nil || !errors.Is(err, client.ErrNotConnected) || ctx.Err() != nil || (!deadline.IsZero() && time.Now().After(deadline)) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (n *nbConn) close() {
	close(n.done)
	n.c.Close()
}

func (n *nbConn) transact(ctx context.Context, ops []ovsdb.Operation) error {
	res, err := n.c.Transact(ctx, ops...)
	if err != nil {
		if errors.Is(err, client.ErrNotConnected) {
			n.lost.Store(true) // in case the notification came before anyone listened
		}
		return err
	}
	_, err = ovsdb.CheckOperationResults(res, ops)
	return err
}

// createRows inserts rows (with named-uuid references between them) in one transaction.
func (n *nbConn) createRows(ctx context.Context, rows []model.Model) error {
	ops, err := n.c.Create(rows...)
	if err != nil {
		return err
	}
	return n.transact(ctx, ops)
}

func (n *nbConn) switchByName(name string) (*nbdb.LogicalSwitch, error) {
	var found []nbdb.LogicalSwitch
	err := n.c.WhereCache(func(ls *nbdb.LogicalSwitch) bool { return ls.Name == name }).List(context.Background(), &found)
	if err != nil {
		return nil, err
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("logical switch %q: %d rows", name, len(found))
	}
	return &found[0], nil
}

func (n *nbConn) portByName(name string) (*nbdb.LogicalSwitchPort, bool, error) {
	var found []nbdb.LogicalSwitchPort
	if err := n.c.WhereCache(func(p *nbdb.LogicalSwitchPort) bool { return p.Name == name }).List(context.Background(), &found); err != nil {
		return nil, false, fmt.Errorf("logical switch port %s: %w", name, err)
	}
	if len(found) == 0 {
		return nil, false, nil
	}
	return &found[0], true, nil
}

// usedIPs returns the IPv4 addresses of every port of switch sw.
func (n *nbConn) usedIPs(sw *nbdb.LogicalSwitch) (map[netip.Addr]bool, error) {
	used := map[netip.Addr]bool{}
	ports := map[string]bool{}
	for _, u := range sw.Ports {
		ports[u] = true
	}
	var lsps []nbdb.LogicalSwitchPort
	if err := n.c.WhereCache(func(p *nbdb.LogicalSwitchPort) bool { return ports[p.UUID] }).List(context.Background(), &lsps); err != nil {
		return nil, fmt.Errorf("ports of switch %s: %w", sw.Name, err)
	}
	for _, p := range lsps {
		for _, a := range p.Addresses {
			for _, f := range strings.Fields(a) {
				if ip, err := netip.ParseAddr(f); err == nil {
					used[ip] = true
				}
			}
		}
	}
	return used, nil
}

// addPort creates port lsp on switch sw in one transaction.
func (n *nbConn) addPort(ctx context.Context, sw *nbdb.LogicalSwitch, lsp *nbdb.LogicalSwitchPort) error {
	lsp.UUID = uuidName("lsp", lsp.Name)
	ops, err := n.c.Create(lsp)
	if err != nil {
		return err
	}
	mut, err := n.mutatePorts(sw, ovsdb.MutateOperationInsert, lsp.UUID)
	if err != nil {
		return err
	}
	return n.transact(ctx, append(ops, mut...))
}

// mutatePorts is the operation that inserts the port with UUID uuid into switch sw's ports, or deletes it from them.
func (n *nbConn) mutatePorts(sw *nbdb.LogicalSwitch, mutator ovsdb.Mutator, uuid string) ([]ovsdb.Operation, error) {
	return n.c.Where(sw).Mutate(sw, model.Mutation{Field: &sw.Ports, Mutator: mutator, Value: []string{uuid}})
}

// deletePort removes the port named name from its switch (the row is garbage-collected by the database).
func (n *nbConn) deletePort(ctx context.Context, switchName, name string) error {
	p, ok, err := n.portByName(name)
	if err != nil || !ok {
		return err
	}
	sw, err := n.switchByName(switchName)
	if err != nil {
		return err
	}
	ops, err := n.mutatePorts(sw, ovsdb.MutateOperationDelete, p.UUID)
	if err != nil {
		return err
	}
	return n.transact(ctx, ops)
}

// waitPortsUp waits until ovn-controller has bound every named port (Logical_Switch_Port up=true).
func (n *nbConn) waitPortsUp(ctx context.Context, names ...string) error {
	var down []string
	err := poll(ctx, 20*time.Millisecond, func() (bool, error) {
		down = down[:0]
		for _, name := range names {
			p, ok, err := n.portByName(name)
			if err != nil {
				return false, err
			}
			if !ok || p.Up == nil || !*p.Up {
				down = append(down, name)
			}
		}
		if len(down) > 0 && n.lost.Load() {
			return false, client.ErrNotConnected // the cache no longer follows NB
		}
		return len(down) == 0, nil
	})
	if errors.Is(err, client.ErrNotConnected) {
		return err
	}
	if err != nil {
		return fmt.Errorf("logical switch ports not up (ovn-controller did not bind them): %s", strings.Join(down, " "))
	}
	return nil
}

// waitPortsUpAt is waitPortsUp through a connection of its own, dialled again when NB drops it (see atNB).
func waitPortsUpAt(ctx context.Context, address string, names ...string) error {
	return atNB(ctx, address, time.Time{}, func(nb *nbConn) error { return nb.waitPortsUp(ctx, names...) })
}

// NBDBFile is the database file of a standalone NB ovsdb-server, to count its transactions
// (nbserver.FileTransactions): the cluster's NB in the centralized layout (node ignored), node's zone's in the
// interconnect layout; "" for an NB RAFT cluster (its files are RAFT logs).
func (c *Cluster) NBDBFile(node string) string {
	if c.Layout() == LayoutInterconnect {
		return zoneDBFile(c.p, node, "nb")
	}
	if c.st.nbLayout() != NBStandalone {
		return ""
	}
	return filepath.Join(c.p.db(), "ovnnb.db")
}
