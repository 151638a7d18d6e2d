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
