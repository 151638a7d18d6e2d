package main

import (
	"reflect"
	"strings"
	"testing"

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
		namespaces: []string{"demo"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if _, err := parse(t, "--mode", "provider", "--cluster-id", "cluster-b"); err != nil {
		t.Fatalf("provider mode: %v", err)
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
		{[]string{"--mode", "consumer", "--cluster-id", "a", "--provider", "b"}, "want CLUSTER_ID=KUBECONFIG"},
		{[]string{"--mode", "consumer", "--cluster-id", "a", "--provider", "b=/x", "--provider", "b=/y"}, "given twice"},
		{[]string{"--mode", "consumer", "--cluster-id", "a", "--provider", "a=/x"}, "given twice (or is this cluster)"},
		{[]string{"--mode", "provider", "--cluster-id", "b", "--provider", "c=/x"}, "for --mode consumer"},
		{[]string{"--mode", "provider", "--cluster-id", "b", "--workers", "0"}, "--workers"},
		{[]string{"--mode", "provider", "--cluster-id", "b", "extra"}, "unexpected argument"},
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
