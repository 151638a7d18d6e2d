package scale

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/ovn-org/libovsdb/cache"
	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
	k8scache "k8s.io/client-go/tools/cache"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	eipclient "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	eipinformers "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/informers/externalversions"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// rowTables are the tables whose rows the master owns.
func rowTables() []string {
	return []string{nbdb.LogicalRouterPolicyTable, nbdb.NATTable, nbdb.AddressSetTable}
}

// nbMonitor is the harness' NB client. It monitors our rows (and router and
// address set names; the full check, converged, reads the rest with a select:
// readCurrent) and passes each event on a row of rowTables, stamped
// with its arrival time, to onRows from its own goroutine. libovsdb drops events
// when its buffer (64k) is full; drops are counted (from libovsdb's log) and make
// the monitor hand the whole cache to onReset instead.
type nbMonitor struct {
	client.Client
	drops atomic.Int64
	// dbFile, when set, is read instead of the server for readCurrent (fileQuerier).
	dbFile string

	mu    sync.Mutex
	queue []rowEvent
	wake  chan struct{}
}

// startMonitor connects to addr, monitors our rows and delivers row events to
// onRows (and, after drops, the cache's rows to onReset) until ctx is done.
func startMonitor(ctx context.Context, t testing.TB, addr string, onRows func([]rowEvent), onReset func(map[string]model.Model)) *nbMonitor {
	t.Helper()
	m := &nbMonitor{wake: make(chan struct{}, 1)}
	clientModel, err := nbdb.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	c := connectNB(ctx, t, addr, clientModel, logr.New(dropCounter{n: &m.drops}))
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m.Client = c
	c.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc:    func(table string, row model.Model) { m.push(table, row, row) },
		UpdateFunc: func(table string, _, row model.Model) { m.push(table, row, row) },
		DeleteFunc: func(table string, row model.Model) { m.push(table, row, nil) },
	})
	// Only what the tracker reads: our rows, and address sets' identities. Not the
	// routers' policies/nat nor the sets' addresses (20,000-element sets whose every
	// change would cost this cache a pass over the whole set, on the machine whose
	// time is being measured); the full check reads those once with a select.
	lr, as := &nbdb.LogicalRouter{}, &nbdb.AddressSet{}
	if _, err := c.Monitor(cctx, c.NewMonitor(
		client.WithTable(lr, &lr.Name),
		client.WithTable(&nbdb.LogicalRouterPolicy{}),
		client.WithTable(&nbdb.NAT{}),
		client.WithTable(as, &as.Name, &as.ExternalIDs),
	)); err != nil {
		t.Fatalf("scale: monitor NB %s: %v", addr, err)
	}
	go m.deliver(ctx, onRows, onReset)
	return m
}

// connectNB connects a libovsdb client of clientModel to the NB at addr (closed at
// cleanup); logger receives libovsdb's log.
func connectNB(ctx context.Context, t testing.TB, addr string, clientModel model.ClientDBModel, logger logr.Logger) client.Client {
	t.Helper()
	return nbserver.Connect(ctx, t, addr, clientModel, 10*time.Second, client.WithLogger(&logger))
}

// push queues one event (libovsdb's event goroutine: must be quick).
func (m *nbMonitor) push(table string, row, after model.Model) {
	if table != nbdb.LogicalRouterPolicyTable && table != nbdb.NATTable && table != nbdb.AddressSetTable {
		return
	}
	ev := rowEvent{uuid: nbserver.UUIDOf(row), row: after, at: time.Now()}
	m.mu.Lock()
	m.queue = append(m.queue, ev)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *nbMonitor) deliver(ctx context.Context, onRows func([]rowEvent), onReset func(map[string]model.Model)) {
	var drops int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		}
		m.mu.Lock()
		batch := m.queue
		m.queue = nil
		m.mu.Unlock()
		if d := m.drops.Load(); d != drops {
			// The cache holds the effect of every event queued or dropped so far.
			drops = d
			onReset(m.rows())
			continue
		}
		if len(batch) > 0 {
			onRows(batch)
		}
	}
}

// rows returns every row of rowTables in the cache (uuid -> row, read only).
func (m *nbMonitor) rows() map[string]model.Model {
	out := map[string]model.Model{}
	for _, table := range rowTables() {
		if rc := m.Cache().Table(table); rc != nil {
			for uuid, row := range rc.RowsShallow() {
				out[uuid] = row
			}
		}
	}
	return out
}

// dropCounter is a logr sink that only counts libovsdb's "dropping event because
// event buffer is full" (logged at V(0)); everything else is discarded.
type dropCounter struct{ n *atomic.Int64 }

func (d dropCounter) Init(logr.RuntimeInfo)          {}
func (d dropCounter) Enabled(level int) bool         { return level == 0 }
func (d dropCounter) Error(error, string, ...any)    {}
func (d dropCounter) WithValues(...any) logr.LogSink { return d }
func (d dropCounter) WithName(string) logr.LogSink   { return d }
func (d dropCounter) Info(_ int, msg string, _ ...any) {
	if strings.HasPrefix(msg, "dropping event") {
		d.n.Add(1)
	}
}

// watchEgressIPs runs an EgressIP informer that hands every EgressIP it sees (nil:
// deleted), stamped with its arrival, to set (tracker.setEgressIP) until ctx is done.
func watchEgressIPs(ctx context.Context, cs eipclient.Interface, set func(name string, e *egressipv1.EgressIP, at time.Time)) error {
	f := eipinformers.NewSharedInformerFactory(cs, 0)
	inf := f.K8s().V1().EgressIPs().Informer()
	add := func(obj any) {
		if e, ok := obj.(*egressipv1.EgressIP); ok {
			set(e.Name, e, time.Now())
		}
	}
	if _, err := inf.AddEventHandler(k8scache.ResourceEventHandlerFuncs{
		AddFunc:    add,
		UpdateFunc: func(_, obj any) { add(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(k8scache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if e, ok := obj.(*egressipv1.EgressIP); ok {
				set(e.Name, nil, time.Now())
			}
		},
	}); err != nil {
		return fmt.Errorf("EgressIP informer: %w", err)
	}
	f.Start(ctx.Done())
	if !k8scache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("EgressIP informer: not synced: %w", context.Cause(ctx))
	}
	go func() {
		<-ctx.Done()
		f.Shutdown()
	}()
	return nil
}

// Query runs read-only operations (nbstate.Querier).
func (m *nbMonitor) Query(ctx context.Context, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	return m.Transact(ctx, ops...)
}

// readCurrent reads every row we own and the routers' references to them, once,
// with a select (the monitor does not cache the routers' reference sets).
func (m *nbMonitor) readCurrent(ctx context.Context) (nbstate.Current, error) {
	if m.dbFile != "" {
		return nbstate.ReadCurrentLive(ctx, m, fileQuerier{db: m.dbFile})
	}
	return nbstate.ReadCurrentLive(ctx, m, m)
}
