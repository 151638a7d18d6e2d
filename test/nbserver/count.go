package nbserver

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"
	"github.com/ovn-org/libovsdb/database"
)

// countingDB is libovsdb's in-memory database counting the transactions the
// server commits that change at least one row (the server commits read-only
// transactions too, with no table updated).
type countingDB struct {
	database.Database
	mu     sync.Mutex
	tables []map[string]bool // tables changed, per write transaction
}

func (d *countingDB) Commit(db string, id uuid.UUID, update database.Update) error {
	if tables := update.GetUpdatedTables(); len(tables) > 0 {
		changed := map[string]bool{}
		for _, t := range tables {
			changed[t] = true
		}
		d.mu.Lock()
		d.tables = append(d.tables, changed)
		d.mu.Unlock()
	}
	return d.Database.Commit(db, id, update)
}

// Transactions counts the write transactions committed so far that changed a row
// of one of tables (of any table when none is given): the in-memory server's
// commits, or the records of a standalone ovsdb-server's database file
// (FileTransactions). A RAFT cluster is not supported.
func (s *Server) Transactions(tables ...string) int {
	s.t.Helper()
	if s.commits != nil {
		s.commits.mu.Lock()
		defer s.commits.mu.Unlock()
		n := 0
		for _, changed := range s.commits.tables {
			if touches(changed, tables) {
				n++
			}
		}
		return n
	}
	if s.DBFile() == "" {
		s.t.Fatal("Transactions: not supported for a RAFT cluster")
	}
	n, err := FileTransactions(s.DBFile(), tables...)
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

func touches(changed map[string]bool, tables []string) bool {
	if len(tables) == 0 {
		return len(changed) > 0
	}
	for _, t := range tables {
		if changed[t] {
			return true
		}
	}
	return false
}

// FileTransactions counts the transactions in a standalone ovsdb-server's
// database file (its log of records "OVSDB JSON <length> <hash>", the schema
// first, then one record per committed transaction) that changed a row of one of
// tables (any table when none is given). The file is read as it is: a server
// compacting it meanwhile (which rewrites it as one record) makes the count
// smaller, never larger.
func FileTransactions(path string, tables ...string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	n, first := 0, true
	for {
		header, err := r.ReadString('\n')
		if errors.Is(err, io.EOF) && header == "" {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("%s: record header: %w", path, err)
		}
		fields := strings.Fields(header)
		if len(fields) != 4 || fields[0] != "OVSDB" || fields[1] != "JSON" {
			return n, fmt.Errorf("%s: not a standalone database record header: %q", path, header)
		}
		size, err := strconv.Atoi(fields[2])
		if err != nil {
			return n, fmt.Errorf("%s: record length %q: %w", path, fields[2], err)
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(r, body); err != nil {
			return n, fmt.Errorf("%s: record body: %w", path, err)
		}
		if b, err := r.Peek(1); err == nil && b[0] == '\n' {
			if _, err := r.ReadByte(); err != nil {
				return n, fmt.Errorf("%s: record end: %w", path, err)
			}
		}
		if first { // the schema
			first = false
			continue
		}
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(body, &rec); err != nil {
			return n, fmt.Errorf("%s: record: %w", path, err)
		}
		changed := map[string]bool{}
		for k := range rec {
			if !strings.HasPrefix(k, "_") {
				changed[k] = true
			}
		}
		if touches(changed, tables) {
			n++
		}
	}
}
