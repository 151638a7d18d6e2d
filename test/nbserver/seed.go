package nbserver

import (
	"context"
	"testing"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
)

// Transact commits ops through c in one transaction and fails t when the transaction or one of its operations fails.
func Transact(t testing.TB, c client.Client, ops ...ovsdb.Operation) {
	t.Helper()
	res, err := c.Transact(context.Background(), ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		t.Fatalf("NB transaction: %v %+v", err, res)
	}
}

// Seed creates rows (nbdb models; a row that another names by UUID gives its UUID as a named UUID) through c in one
// transaction, failing t when that fails.
func Seed(t testing.TB, c client.Client, rows ...model.Model) {
	t.Helper()
	var ops []ovsdb.Operation
	for _, m := range rows {
		o, err := c.Create(m)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o...)
	}
	Transact(t, c, ops...)
}
