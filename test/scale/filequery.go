package scale

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"

	"github.com/ovn-org/libovsdb/ovsdb"
)

// fileQuerier answers read-only transactions (nbstate.Querier) from the NB
// server's database file with `ovsdb-tool query`, in a process of its own, not
// through the server. A select of the 60,000 rows we own makes ovsdb-server build
// and free a reply of as many JSON objects; glibc keeps the freed chunks unsorted,
// and the server's next transactions pay for sorting them (perf: 94% of the
// server's samples in _int_malloc, its next three transactions 57, 74 and 21 ms
// instead of 2 ms at 20,000 pods). The harness' full check would so lengthen the
// first pod creations it measures; read from the file, it leaves the server as
// the master alone would.
type fileQuerier struct {
	db string // the standalone server's database file
}

func (f fileQuerier) Query(ctx context.Context, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	trns := []any{"OVN_Northbound"}
	for _, op := range ops {
		trns = append(trns, op)
	}
	arg, err := json.Marshal(trns)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "ovsdb-tool", "query", f.db, string(arg))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("ovsdb-tool query %s: %w: %s", f.db, err, strings.TrimSpace(stderr.String()))
	}
	var res []ovsdb.OperationResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("ovsdb-tool query %s: %w", f.db, err)
	}
	return res, nil
}
