package ovsdbaddr

import (
	"slices"
	"strings"
	"testing"
)

func TestParseList(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "unix:/var/run/ovn/ovnnb_db.sock", want: []string{"unix:/var/run/ovn/ovnnb_db.sock"}},
		{in: "tcp:172.18.0.2:6641", want: []string{"tcp:172.18.0.2:6641"}},
		{in: " ssl:10.0.0.1:6641, ssl:10.0.0.2:6641 ,ssl:[fd00::3]:6641", want: []string{"ssl:10.0.0.1:6641", "ssl:10.0.0.2:6641", "ssl:[fd00::3]:6641"}},
		{in: "tcp:10.0.0.1:6641,,", want: []string{"tcp:10.0.0.1:6641"}},
		{in: "", wantErr: "empty"},
		{in: " , ", wantErr: "empty"},
		{in: "tcp:10.0.0.1", wantErr: "missing port"},
		{in: "tcp:1.2.3.4:xx", wantErr: `bad port "xx"`},
		{in: "tcp:1.2.3.4:70000", wantErr: `bad port "70000"`},
		{in: "ssl:fd00::3:6641", wantErr: "too many colons"},
		{in: "http://10.0.0.1:6641", wantErr: `unknown scheme "http"`},
		{in: "10.0.0.1:6641", wantErr: "unknown scheme"},
		{in: "unix:", wantErr: "is not tcp:HOST:PORT"},
		{in: "tcp:10.0.0.1:6641,bogus", wantErr: `"bogus" is not`},
	}
	for _, tc := range tests {
		got, err := ParseList(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseList(%q) = %v, error %v; want an error containing %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseList(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestDialTarget(t *testing.T) {
	for in, want := range map[string][2]string{
		"unix:/run/nb.sock":  {"unix", "/run/nb.sock"},
		"tcp:10.0.0.1:6641":  {"tcp", "10.0.0.1:6641"},
		"ssl:[fd00::3]:6641": {"tcp", "[fd00::3]:6641"},
	} {
		if n, a := DialTarget(in); n != want[0] || a != want[1] {
			t.Errorf("DialTarget(%q) = %q, %q; want %q, %q", in, n, a, want[0], want[1])
		}
	}
}
