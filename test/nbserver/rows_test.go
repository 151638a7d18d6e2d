package nbserver

import (
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

func TestRowFields(t *testing.T) {
	nat := &nbdb.NAT{UUID: "u1", ExternalIDs: map[string]string{"k": "v"}}
	if UUIDOf(nat) != "u1" || ExternalIDsOf(nat)["k"] != "v" {
		t.Errorf("NAT: UUID %q external_ids %v", UUIDOf(nat), ExternalIDsOf(nat))
	}
	if UUIDOf(&nbdb.LogicalRouterPolicy{UUID: "u2"}) != "u2" {
		t.Error("Logical_Router_Policy UUID not read")
	}
	if UUIDOf(nbdb.NAT{UUID: "u3"}) != "" || UUIDOf(nil) != "" || ExternalIDsOf((*nbdb.NAT)(nil)) != nil {
		t.Error("not a pointer to a row: want nothing")
	}
}
