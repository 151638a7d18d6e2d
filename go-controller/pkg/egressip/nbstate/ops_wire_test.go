package nbstate

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/ovn-org/libovsdb/ovsdb"
)

// TestWireMap: an operation's map column reads back as the OVSDB map it stands for.
func TestWireMap(t *testing.T) {
	for _, m := range []map[string]string{
		{},
		{"k8s.ovn.org/owner-type": "EgressIP", "k8s.ovn.org/name": "prod", "ip-family": "ip4", "quote\"d": "a\\b"},
	} {
		b, err := json.Marshal(stringMap(m))
		if err != nil {
			t.Fatal(err)
		}
		var got ovsdb.OvsMap
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		want := map[any]any{}
		for k, v := range m {
			want[k] = v
		}
		if !reflect.DeepEqual(got.GoMap, want) {
			t.Fatalf("%s reads back as %v, want %v", b, got.GoMap, want)
		}
	}
}

// TestWireUUID: an operation's UUID reads back as the row's UUID, and a row of the
// same transaction is named as such.
func TestWireUUID(t *testing.T) {
	const id = "5b3a8f0e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
	b, err := json.Marshal(ovsdb.NewCondition("_uuid", ovsdb.ConditionEqual, wireUUID{id: id}))
	if err != nil {
		t.Fatal(err)
	}
	var c ovsdb.Condition
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if got, ok := c.Value.(ovsdb.UUID); !ok || got.GoUUID != id {
		t.Fatalf("%s reads back as %#v, want the UUID %s", b, c.Value, id)
	}
	want, err := json.Marshal(ovsdb.UUID{GoUUID: id}) // libovsdb's own encoding
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		u    wireUUID
		want string
	}{{wireUUID{id: id}, string(want)}, {wireUUID{id: "egressip_row_7", named: true}, `["named-uuid","egressip_row_7"]`}} {
		got, err := json.Marshal(tc.u)
		if err != nil || string(got) != tc.want {
			t.Errorf("%+v: %s, %v; want %s", tc.u, got, err, tc.want)
		}
	}
}
