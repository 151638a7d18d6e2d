package master

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/ovn-org/libovsdb/cache"
	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/ovsdbaddr"
)

// deadAfterSilentProbes unanswered probes in a row (each waiting at least 2 s)
// make watchNB drop the connection.
const deadAfterSilentProbes = 10

// nbClient is what a sync needs of the NB connection.
type nbClient interface {
	nbstate.Client
	nbstate.Querier
	// Connected reports whether the last liveness probe succeeded.
	Connected() bool
	// Guard returns a context that is also canceled when the connection is found
	// lost, so that a sync does not wait for libovsdb to reconnect.
	Guard(ctx context.Context) (context.Context, context.CancelFunc)
}

// nbConn wraps the libovsdb client: it counts transactions (metric
// ovnkube_master_egress_ip_nb_transactions_total) and tracks liveness itself,
// because libovsdb's Connected() stays true while it reconnects.
type nbConn struct {
	client.Client
	txns prometheus.Counter
	up   atomic.Bool

	mu   sync.Mutex
	lost chan struct{} // closed when the connection is found lost; replaced when it is back
}

func newNBConn(c client.Client, txns prometheus.Counter) *nbConn {
	conn := &nbConn{Client: c, txns: txns, lost: make(chan struct{})}
	conn.up.Store(true)
	return conn
}

// Transact fails at once when the connection is known to be lost (libovsdb would
// block until it reconnects, then send operations computed from a cache that may
// be stale).
func (c *nbConn) Transact(ctx context.Context, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	if !c.up.Load() {
		return nil, client.ErrNotConnected
	}
	c.txns.Inc()
	return c.Client.Transact(ctx, ops...)
}

// Query runs read-only operations (a full sync's selects): not counted as
// transactions, and failing at once when the connection is known to be lost.
func (c *nbConn) Query(ctx context.Context, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	if !c.up.Load() {
		return nil, client.ErrNotConnected
	}
	return c.Client.Transact(ctx, ops...)
}

func (c *nbConn) Guard(ctx context.Context) (context.Context, context.CancelFunc) {
	c.mu.Lock()
	lost := c.lost
	c.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-lost:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

func (c *nbConn) Connected() bool { return c.up.Load() }

// setUp records a probe result and reports the previous state.
func (c *nbConn) setUp(up bool) (was bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	was = c.up.Swap(up)
	switch {
	case was && !up:
		close(c.lost)
	case !was && up:
		c.lost = make(chan struct{})
	}
	return was
}

// newNBClient builds (does not connect) a libovsdb client for the tables the
// master writes; its cache holds only Logical_Router names and Address_Set names
// and external_ids (see connectNB). It reconnects by itself with an
// exponential backoff (100 ms to 5 s, forever) and re-establishes its monitor;
// with several endpoints it only uses the RAFT leader.
func newNBClient(s settings) (client.Client, error) {
	dbModel, err := model.NewClientDBModel("OVN_Northbound", map[string]model.Model{
		nbdb.LogicalRouterTable:       &nbdb.LogicalRouter{},
		nbdb.LogicalRouterPolicyTable: &nbdb.LogicalRouterPolicy{},
		nbdb.NATTable:                 &nbdb.NAT{},
		nbdb.AddressSetTable:          &nbdb.AddressSet{},
		nbdb.NBGlobalTable:            &nbdb.NBGlobal{},
	})
	if err != nil {
		return nil, err
	}
	logger := klog.Background().WithName("libovsdb-nb")
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval = 100 * time.Millisecond
	retry.MaxInterval = 5 * time.Second
	retry.MaxElapsedTime = 0 // never give up (libovsdb panics when the backoff stops)
	// Not WithInactivityCheck: in this libovsdb version its traffic channel is
	// closed on disconnect while Transact may still send on it (a data race, and a
	// possible panic). watchNB probes the connection instead.
	// libovsdb's reconnect purges the cache (TableCache.Purge replaces its database model) while other goroutines
	// may use it; its Mapper() reads that model without the cache's lock, and every libovsdb API call that builds
	// operations from models (Where, Create, List, ...) goes through it: the data race the test harness met
	// (test/cluster/nb.go dials again instead). The master is not exposed: it reads the cache only through
	// TableCache.Table and RowCache.RowsShallow (under the cache's locks, nbstate.EachRow), and builds every
	// operation itself (nbstate.Ops, ReadCurrentLive's selects) for Transact. TestNBRestartsDuringSyncs restarts NB
	// under syncs with -race.
	opts := append(ovsdbaddr.ClientOptions(&logger, s.endpoints, s.NBTLS, true), client.WithReconnect(s.NBTimeout, retry))
	return client.NewOVSDBClient(dbModel, opts...)
}

// connectNB connects c and starts its monitor, retrying the connection (backoff up
// to 5 s) until it succeeds or ctx ends. A monitor that cannot be set up (schema
// mismatch) is a fatal error. A writer that waits for the data plane (dataPlane;
// settings.watchesDataPlane) also monitors NB_Global's nb_cfg and hv_cfg
// (nbstate.DataPlane).
func connectNB(ctx context.Context, c client.Client, timeout time.Duration, addr string, dataPlane bool) error {
	delay := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := c.Connect(cctx)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		klog.InfoS("Cannot connect to OVN Northbound yet; retrying", "address", addr, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
	// Routers: names only (their appearance triggers a full sync); address sets:
	// names and external_ids (a set of that name that is not ours is never
	// written). Not our policies and NAT rows: the Mirror indexes them, and a full
	// sync reads them, and the routers' references to them, with one transaction
	// of selects (nbstate.ReadCurrentLive). A cache of them would hold a second
	// copy of every row and decode every update of our own transactions, and a
	// cache of the large set columns (a router's policies and nat, a served-pods
	// set's addresses: 20,000 elements in a large cluster) would cost a pass over
	// the whole set on every change.
	lr, as, g := &nbdb.LogicalRouter{}, &nbdb.AddressSet{}, &nbdb.NBGlobal{}
	tables := []client.MonitorOption{client.WithTable(lr, &lr.Name), client.WithTable(as, &as.Name, &as.ExternalIDs)}
	if dataPlane {
		tables = append(tables, client.WithTable(g, &g.NbCfg, &g.HvCfg))
	}
	mctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.Monitor(mctx, c.NewMonitor(tables...))
	if err != nil {
		return fmt.Errorf("monitor OVN Northbound at %s: %w", addr, err)
	}
	klog.InfoS("Connected to OVN Northbound", "address", c.CurrentEndpoint())
	return nil
}

// watchNB queues a full sync when a logical router appears or disappears (a
// gateway router we could not write to may now exist) and when the connection comes
// back after a loss (the cache was rebuilt; rows may have changed meanwhile). The
// connection is probed with an OVSDB echo every probeInterval; it counts as lost
// only when libovsdb reports it is not connected. dataPlane, when set, is called
// when NB_Global changes (ovn-northd has written a new hv_cfg).
func watchNB(ctx context.Context, c *nbConn, probeInterval time.Duration, resync, dataPlane func()) {
	c.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc: func(table string, _ model.Model) {
			switch {
			case table == nbdb.LogicalRouterTable:
				resync()
			case table == nbdb.NBGlobalTable && dataPlane != nil:
				dataPlane()
			}
		},
		UpdateFunc: func(table string, _, _ model.Model) {
			if table == nbdb.NBGlobalTable && dataPlane != nil {
				dataPlane()
			}
		},
		DeleteFunc: func(table string, _ model.Model) {
			if table == nbdb.LogicalRouterTable {
				resync()
			}
		},
	})
	go func() {
		tick := time.NewTicker(probeInterval)
		defer tick.Stop()
		silent := 0 // consecutive probes without an answer
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			pctx, cancel := context.WithTimeout(ctx, max(2*time.Second, probeInterval))
			err := c.Echo(pctx)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err != nil && !errors.Is(err, client.ErrNotConnected) {
				// A slow answer (the server is busy with a large transaction) is not a
				// lost connection. Many in a row are (a peer gone without a TCP
				// reset): drop the connection so that libovsdb reconnects.
				if silent++; silent == deadAfterSilentProbes {
					klog.InfoS("OVN Northbound does not answer; reconnecting", "probes", silent, "err", err)
					c.Disconnect()
				}
				continue
			}
			silent = 0
			was := c.setUp(err == nil)
			switch {
			case was && err != nil:
				klog.InfoS("Lost the OVN Northbound connection; reconnecting", "err", err)
			case !was && err == nil:
				klog.InfoS("Reconnected to OVN Northbound; full resync", "address", c.CurrentEndpoint())
				resync()
			}
		}
	}()
}
