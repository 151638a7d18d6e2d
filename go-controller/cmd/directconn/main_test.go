package main

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// parse runs the app's flag parsing on args and returns what parseOptions made of them.
func parse(t *testing.T, args ...string) (options, error) {
	t.Helper()
	var (
		got    options
		gotErr error
	)
	app := newApp()
	app.Action = func(c *cli.Context) error {
		got, gotErr = parseOptions(c)
		return nil
	}
	if err := app.Run(append([]string{"directconn"}, args...)); err != nil {
		return options{}, err
	}
	return got, gotErr
}

func TestParseOptions(t *testing.T) {
	got, err := parse(t, "--mode", "consumer", "--cluster-id", "cluster-a", "--kubeconfig", "/a",
		"--provider", "cluster-b=/b", "--provider", "cluster-c=/c", "--namespace", "demo")
	if err != nil {
		t.Fatal(err)
	}
	want := options{mode: "consumer", clusterID: "cluster-a", kubeconfig: "/a", workers: 2, logLevel: 2,
		providers:  []providerFlag{{"cluster-b", "/b"}, {"cluster-c", "/c"}},
		namespaces: []string{"demo"},
		election: election{enabled: true, namespace: "kube-system", leaseName: "ovn-egressip-directconn-consumer",
			leaseDuration: 15 * time.Second, renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	got, err = parse(t, "--mode", "provider", "--cluster-id", "cluster-b")
	if err != nil {
		t.Fatalf("provider mode: %v", err)
	}
	if got.election.leaseName != "ovn-egressip-directconn-provider" || got.deny {
		t.Errorf("provider's default Lease name = %q, deny %v", got.election.leaseName, got.deny)
	}
	if got, err = parse(t, "--mode", "provider", "--cluster-id", "cluster-b", "--deny-direct-connections"); err != nil || !got.deny {
		t.Errorf("--deny-direct-connections: %+v, %v", got, err)
	}

	got, err = parse(t, "--mode", "provider", "--cluster-id", "cluster-b", "--leader-elect-namespace", "ovn-egressip",
		"--leader-elect-lease-name", "dc", "--leader-elect-lease-duration", "4s", "--leader-elect-renew-deadline", "3s",
		"--leader-elect-retry-period", "500ms")
	if err != nil {
		t.Fatal(err)
	}
	wantElection := election{enabled: true, namespace: "ovn-egressip", leaseName: "dc",
		leaseDuration: 4 * time.Second, renewDeadline: 3 * time.Second, retryPeriod: 500 * time.Millisecond}
	if got.election != wantElection {
		t.Errorf("election = %+v, want %+v", got.election, wantElection)
	}
	// Off: no election, and the election flags are not checked.
	got, err = parse(t, "--mode", "provider", "--cluster-id", "cluster-b", "--leader-elect=false", "--leader-elect-retry-period", "0s")
	if err != nil || got.election != (election{}) {
		t.Errorf("--leader-elect=false: %+v, %v; want no election", got.election, err)
	}
}

func TestLeaderIdentity(t *testing.T) {
	host := func() (string, error) { return "node1", nil }
	if id, err := leaderIdentity("directconn-provider-7d9f-abcde", host); err != nil || id != "directconn-provider-7d9f-abcde" {
		t.Errorf("with a pod name: %q, %v; want the pod name", id, err)
	}
	a, err := leaderIdentity("", host)
	if err != nil {
		t.Fatal(err)
	}
	b, err := leaderIdentity("", host)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a, "node1_") || len(a) != len("node1_")+8 || a == b {
		t.Errorf("without a pod name: %q and %q; want node1_ and 8 random characters, different each time", a, b)
	}
	if _, err := leaderIdentity("", func() (string, error) { return "", errors.New("no uts") }); err == nil ||
		!strings.Contains(err.Error(), "POD_NAME") {
		t.Errorf("no pod name and no host name: %v; want an error naming $POD_NAME", err)
	}
}

func TestParseOptionsErrors(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--cluster-id", "a"}, "mode"},
		{[]string{"--mode", "both", "--cluster-id", "a"}, "--mode must be consumer or provider"},
		{[]string{"--mode", "provider", "--cluster-id", "not a label"}, "--cluster-id"},
		{[]string{"--mode", "consumer", "--cluster-id", "a"}, "at least one --provider"},
		{[]string{"--mode", "consumer", "--cluster-id", "a", "--provider", "b=/x", "--deny-direct-connections"}, "--deny-direct-connections is for --mode provider"},
		{[]string{"--mode", "consumer", "--cluster-id", "a", "--provider", "b"}, "want CLUSTER_ID=KUBECONFIG"},
		{[]string{"--mode", "consumer", "--cluster-id", "a", "--provider", "b=/x", "--provider", "b=/y"}, "given twice"},
		{[]string{"--mode", "consumer", "--cluster-id", "a", "--provider", "a=/x"}, "given twice (or is this cluster)"},
		{[]string{"--mode", "provider", "--cluster-id", "b", "--provider", "c=/x"}, "for --mode consumer"},
		{[]string{"--mode", "provider", "--cluster-id", "b", "--workers", "0"}, "--workers"},
		{[]string{"--mode", "provider", "--cluster-id", "b", "extra"}, "unexpected argument"},
		{[]string{"--mode", "provider", "--cluster-id", "b", "--leader-elect-namespace", "Kube_System"}, `--leader-elect-namespace "Kube_System" is not a namespace name`},
		{[]string{"--mode", "provider", "--cluster-id", "b", "--leader-elect-lease-name", "a/b"}, `--leader-elect-lease-name "a/b" is not a Lease name`},
		{[]string{"--mode", "provider", "--cluster-id", "b", "--leader-elect-retry-period", "0s"}, "--leader-elect-retry-period 0s must be positive"},
		{[]string{"--mode", "provider", "--cluster-id", "b", "--leader-elect-renew-deadline", "2s"}, "--leader-elect-renew-deadline 2s must exceed 1.2 × --leader-elect-retry-period 2s"},
		{[]string{"--mode", "provider", "--cluster-id", "b", "--leader-elect-lease-duration", "10s"}, "--leader-elect-lease-duration 10s must exceed --leader-elect-renew-deadline 10s"},
		{[]string{"--mode", "provider", "--cluster-id", "b", "--leader-elect-lease-duration", "soon"}, "leader-elect-lease-duration"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parse(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}
