package e2e

import (
	"reflect"
	"testing"
)

// TestExternalIDsFromCSV reads external_ids as ovn-nbctl --format=csv prints them: a key or value that is not a bare
// word (a digit, '/', ':') is in quotes, which CSV doubles. nbRowsOfEgressIP matched `k8s.ovn.org/name="prod"` in
// such lines before, which they never contain (the key is quoted too): it counted 0 rows whatever NB held.
func TestExternalIDsFromCSV(t *testing.T) {
	out := `"{""k8s.ovn.org/egress-ip""=""172.18.0.50"", ""k8s.ovn.org/name""=prod, ""k8s.ovn.org/owner-controller""=egressip, ""k8s.ovn.org/pod""=""prod/web1"", ""k8s.ovn.org/rule""=snat}"
{}
"{""k8s.ovn.org/id""=""default-network-controller:EgressIP:100:prod_prod/web1:ip4:default"", ""k8s.ovn.org/name""=""prod_prod/web1"", priority=""100"", ""say \""hi\"", x""=""a=b, c""}"
`
	got, err := externalIDsFromCSV(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]string{
		{"k8s.ovn.org/egress-ip": "172.18.0.50", "k8s.ovn.org/name": "prod", "k8s.ovn.org/owner-controller": "egressip",
			"k8s.ovn.org/pod": "prod/web1", "k8s.ovn.org/rule": "snat"},
		{},
		{"k8s.ovn.org/id": "default-network-controller:EgressIP:100:prod_prod/web1:ip4:default",
			"k8s.ovn.org/name": "prod_prod/web1", "priority": "100", `say "hi", x`: "a=b, c"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	for _, bad := range []string{`"{k8s=}"` + "\n", `"{""k8s""=""x}"` + "\n", "{a=b c=d}\n"} {
		if m, err := externalIDsFromCSV(bad); err == nil {
			t.Errorf("%q: no error, %v", bad, m)
		}
	}
}
