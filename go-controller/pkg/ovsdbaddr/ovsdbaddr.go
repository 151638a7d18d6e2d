// Package ovsdbaddr parses OVSDB remote addresses the way OVN's tools take them
// (ovn-nbctl --db, ovnkube --nb-address): tcp:HOST:PORT, ssl:HOST:PORT or
// unix:PATH, several of them comma-separated for a clustered (RAFT) database.
// It is the one parser of these addresses; config and master both use it.
package ovsdbaddr

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ParseList splits a comma-separated address list and checks every entry:
// tcp:HOST:PORT or ssl:HOST:PORT (PORT 1-65535; an IPv6 HOST in brackets) or
// unix:PATH. Blanks around entries and empty entries are ignored. It returns the
// entries in order, or an error naming the first bad entry (or saying the list is
// empty); the error does not name a flag, callers add that.
func ParseList(value string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(value, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if err := check(a); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty: no address given (want tcp:HOST:PORT, ssl:HOST:PORT or unix:PATH)")
	}
	return out, nil
}

func check(a string) error {
	scheme, rest, ok := strings.Cut(a, ":")
	if !ok || rest == "" {
		return fmt.Errorf("%q is not tcp:HOST:PORT, ssl:HOST:PORT or unix:PATH", a)
	}
	switch scheme {
	case "unix":
		return nil
	case "tcp", "ssl":
		_, port, err := net.SplitHostPort(rest)
		if err != nil {
			return fmt.Errorf("%q: %w", a, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q: bad port %q", a, port)
		}
		return nil
	default:
		return fmt.Errorf("%q: unknown scheme %q (want tcp, ssl or unix)", a, scheme)
	}
}

// DialTarget turns one checked address into net.Dial's network and address:
// ("unix", PATH) or ("tcp", HOST:PORT) (ssl: is TCP underneath).
func DialTarget(addr string) (network, address string) {
	scheme, rest, _ := strings.Cut(addr, ":")
	if scheme == "unix" {
		return "unix", rest
	}
	return "tcp", rest
}
