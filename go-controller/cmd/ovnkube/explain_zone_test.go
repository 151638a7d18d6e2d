package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

func TestZoneOf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		transit  bool
		gateways []string
		zone     string
		err      string
	}{
		{name: "centralized: no transit switch", gateways: []string{"GR_node1", "GR_node2"}},
		{name: "a zone's NB: the transit switch and its node's gateway router", transit: true, gateways: []string{"GR_node2"}, zone: "node2"},
		{name: "transit switch and no gateway router", transit: true, err: "0 gateway routers"},
		{name: "transit switch and two gateway routers", transit: true, gateways: []string{"GR_node1", "GR_node2"}, err: "2 gateway routers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			zone, err := zoneOf(tc.transit, tc.gateways)
			if zone != tc.zone || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("zoneOf = %q, %v; want %q, error containing %q", zone, err, tc.zone, tc.err)
			}
		})
	}
}

// TestReadNBTellsAZone: explain reads whether an NB has the transit switch and
// which gateway routers it has, from a real ovsdb-server.
func TestReadNBTellsAZone(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ovsdb-server")
	}
	srv := nbserver.Start(t)
	nbserver.Seed(t, srv.Client(t), &nbdb.LogicalSwitch{Name: transitSwitch}, &nbdb.LogicalRouter{Name: "GR_node2"},
		&nbdb.LogicalRouter{Name: "ovn_cluster_router"}, &nbdb.LogicalSwitch{Name: "node2"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nb, err := readNB(ctx, []string{srv.Addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !nb.transit || !slices.Equal(nb.gateways, []string{"GR_node2"}) {
		t.Fatalf("read transit %v, gateways %v; want true, [GR_node2]", nb.transit, nb.gateways)
	}
	if zone, err := zoneOf(nb.transit, nb.gateways); zone != "node2" || err != nil {
		t.Errorf("zoneOf = %q, %v; want node2", zone, err)
	}
}
