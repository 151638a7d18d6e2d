package master

import (
	"context"
	"fmt"
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
)

// nbClient is what a sync needs of the NB connection.
type nbClient interface {
	nbstate.Client
	Connected() bool
}

// countingNB counts the transactions sent (metric ovnkube_master_egress_ip_nb_transactions_total).
type countingNB struct {
	client.Client
	txns prometheus.Counter
}

func (c countingNB) Transact(ctx context.Context, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	c.txns.Inc()
	return c.Client.Transact(ctx, ops...)
}

// newNBClient builds (does not connect) a libovsdb client whose cache holds only
// the tables the master reads: Logical_Router (name, policies, nat),
// Logical_Router_Policy, NAT and Address_Set. It reconnects by itself with an
// exponential backoff (100 ms to 5 s, forever) and re-establishes its monitor;
// with several endpoints it only uses the RAFT leader.
func newNBClient(s settings) (client.Client, error) {
	dbModel, err := model.NewClientDBModel("OVN_Northbound", map[string]model.Model{
		nbdb.LogicalRouterTable:       &nbdb.LogicalRouter{},
		nbdb.LogicalRouterPolicyTable: &nbdb.LogicalRouterPolicy{},
		nbdb.NATTable:                 &nbdb.NAT{},
		nbdb.AddressSetTable:          &nbdb.AddressSet{},
	})
	if err != nil {
		return nil, err
	}
	logger := klog.Background().WithName("libovsdb-nb")
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval = 100 * time.Millisecond
	retry.MaxInterval = 5 * time.Second
	retry.MaxElapsedTime = 0 // never give up (libovsdb panics when the backoff stops)
	opts := []client.Option{client.WithLogger(&logger), client.WithReconnect(s.NBTimeout, retry)}
	for _, ep := range s.endpoints {
		opts = append(opts, client.WithEndpoint(ep))
	}
	if len(s.endpoints) > 1 {
		opts = append(opts, client.WithLeaderOnly(true))
	}
	if s.NBTLS != nil {
		opts = append(opts, client.WithTLSConfig(s.NBTLS))
	}
	return client.NewOVSDBClient(dbModel, opts...)
}

// connectNB connects c and starts its monitor, retrying the connection (backoff up
// to 5 s) until it succeeds or ctx ends. A monitor that cannot be set up (schema
// mismatch) is a fatal error.
func connectNB(ctx context.Context, c client.Client, timeout time.Duration, addr string) error {
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
	lr := &nbdb.LogicalRouter{}
	mctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := c.Monitor(mctx, c.NewMonitor(
		client.WithTable(lr, &lr.Name, &lr.Policies, &lr.Nat),
		client.WithTable(&nbdb.LogicalRouterPolicy{}),
		client.WithTable(&nbdb.NAT{}),
		client.WithTable(&nbdb.AddressSet{}),
	))
	if err != nil {
		return fmt.Errorf("monitor OVN Northbound at %s: %w", addr, err)
	}
	klog.InfoS("Connected to OVN Northbound", "address", c.CurrentEndpoint())
	return nil
}

// watchNB queues a full sync when a logical router appears or disappears (a
// gateway router we could not write to may now exist) and when the connection comes
// back after a loss (the cache was rebuilt; rows may have changed meanwhile).
func watchNB(ctx context.Context, c client.Client, resync func()) {
	c.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc: func(table string, _ model.Model) {
			if table == nbdb.LogicalRouterTable {
				resync()
			}
		},
		DeleteFunc: func(table string, _ model.Model) {
			if table == nbdb.LogicalRouterTable {
				resync()
			}
		},
	})
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		was := true
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now := c.Connected()
			switch {
			case was && !now:
				klog.InfoS("Lost the OVN Northbound connection; reconnecting")
			case !was && now:
				klog.InfoS("Reconnected to OVN Northbound; full resync", "address", c.CurrentEndpoint())
				resync()
			}
			was = now
		}
	}()
}
