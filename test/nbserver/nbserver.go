// Package nbserver starts OVN Northbound databases for tests: a 3-member RAFT
// cluster of real ovsdb-servers (StartCluster, see raft.go), a real standalone
// ovsdb-server (Debian ovn-central / openvswitch) on a unix socket in a temp dir
// (Start), or libovsdb's in-memory server (StartInMemory). All are stopped by
// t.Cleanup; clients connect over unix sockets, only RAFT members talk to each
// other on free loopback ports, and no fixed path is used, so any number may run
// at once.
package nbserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/database/inmemory"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/server"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/ports"
)

// Server is a running NB database.
type Server struct {
	// Addr is the libovsdb/ovn-nbctl address, "unix:<dir>/nb.sock".
	Addr string
	// Dir holds the socket, and for a real server its database file and log.
	Dir string
	// SSLAddr is "ssl:127.0.0.1:PORT" for a server started by StartSSL ("" otherwise).
	SSLAddr string

	t      testing.TB
	mu     sync.Mutex
	cmd    *exec.Cmd // real server only
	extra  []string  // more ovsdb-server arguments (StartSSL)
	waited chan struct{}
	mem    *server.OvsdbServer // in-memory server only
	// memListener is the in-memory server's socket (serveInMemory).
	memListener net.Listener
	// commits counts the in-memory server's committed transactions that changed a
	// row (countingDB).
	commits *countingDB
	// cluster is set for a RAFT cluster seen as one server (StartClusterServer).
	cluster *Cluster
}

// Start runs a real ovsdb-server with a fresh OVN_Northbound database created from
// the schema our model was generated from. It skips the test when ovsdb-server or
// ovsdb-tool is not installed (apt-get install ovn-central).
func Start(t testing.TB) *Server { return start(t, nil) }

// SSL is the PKI of a server started by StartSSL: its key and certificate, and the
// CA certificate its clients' certificates must be signed by (ovsdb-server always
// asks for and verifies a client certificate).
type SSL struct {
	PrivateKey, Certificate, CACert string
}

// StartSSL is Start with the server also listening on pssl: on a free loopback
// port (SSLAddr), with the files of ssl. Tests still set it up over Addr (unix).
func StartSSL(t testing.TB, ssl SSL) *Server {
	t.Helper()
	addr := ports.FreeLoopbackAddr(t)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, []string{"--remote=pssl:" + port + ":" + host,
		"--private-key=" + ssl.PrivateKey, "--certificate=" + ssl.Certificate, "--ca-cert=" + ssl.CACert})
	s.SSLAddr = "ssl:" + addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_ = c.Close()
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("NB server not listening on %s after 10 s: %v\n%s", s.SSLAddr, err, logText(filepath.Join(s.Dir, "nb.log")))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func start(t testing.TB, extra []string) *Server {
	t.Helper()
	needTools(t, "ovsdb-server", "ovsdb-tool")
	s := &Server{t: t, Dir: shortTempDir(t), extra: extra}
	s.Addr = "unix:" + s.socket()
	schemaPath := writeSchema(t, s.Dir)
	if out, err := exec.Command("ovsdb-tool", "create", s.dbFile(), schemaPath).CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create: %v: %s", err, out)
	}
	s.startProcess()
	t.Cleanup(s.Stop)
	return s
}

// StartInMemory runs libovsdb's in-memory OVSDB server with the NB schema.
func StartInMemory(t testing.TB) *Server {
	t.Helper()
	clientModel, err := nbdb.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	dbModel, errs := model.NewDatabaseModel(nbdb.Schema(), clientModel)
	if len(errs) > 0 {
		t.Fatalf("NB database model: %v", errs)
	}
	db := &countingDB{Database: inmemory.NewDatabase(map[string]model.ClientDBModel{clientModel.Name(): clientModel})}
	srv, err := server.NewOvsdbServer(db, dbModel)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, Dir: shortTempDir(t), mem: srv, commits: db}
	s.Addr = "unix:" + s.socket()
	l, err := net.Listen("unix", s.socket())
	if err != nil {
		t.Fatal(err)
	}
	s.memListener = l
	served := make(chan error, 1)
	go func() { served <- serveInMemory(srv, l) }()
	s.waitReady()
	t.Cleanup(func() {
		s.Stop()
		if err := <-served; err != nil {
			t.Errorf("in-memory NB server: %v", err)
		}
	})
	return s
}

func (s *Server) socket() string { return filepath.Join(s.Dir, "nb.sock") }
func (s *Server) dbFile() string { return filepath.Join(s.Dir, "nb.db") }

// DBFile is the standalone server's database file ("" for the in-memory server
// and a RAFT cluster).
func (s *Server) DBFile() string {
	if s.mem != nil || s.cluster != nil {
		return ""
	}
	return s.dbFile()
}

// shortTempDir returns a temp dir with a short path (unix socket paths are limited
// to 107 bytes; t.TempDir() paths grow with the test name). Removed at cleanup.
func shortTempDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "nb")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func (s *Server) startProcess() {
	s.t.Helper()
	cmd, waited := startOvsdbServer(s.t, "ovsdb-server", s.Dir, append([]string{s.dbFile(),
		"--remote=punix:" + s.socket(),
		"--unixctl=" + filepath.Join(s.Dir, "nb.ctl"),
		"--log-file=" + filepath.Join(s.Dir, "nb.log"),
		"--no-chdir", "-vconsole:off"}, s.extra...))
	s.mu.Lock()
	s.cmd, s.waited = cmd, waited
	s.mu.Unlock()
	s.waitReady()
}

// Pid is the ovsdb-server process' ID (0 for the in-memory server or when stopped).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// waitReady waits until the socket accepts connections (10 s at most).
func (s *Server) waitReady() {
	s.t.Helper()
	waitSocket(s.t, "NB server", s.socket(), filepath.Join(s.Dir, "nb.log"))
}

// Stop stops a real server (SIGTERM, then SIGKILL after 5 s) and waits for it to
// exit. The database file stays, so Restart can bring the same data back. Calling
// it twice is fine. For an in-memory server it closes the listener.
func (s *Server) Stop() {
	if s.cluster != nil {
		s.cluster.Stop()
		return
	}
	if s.mem != nil {
		s.mem.Close()
		if err := s.memListener.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.t.Errorf("in-memory NB server: close %s: %v", s.socket(), err)
		}
		return
	}
	s.mu.Lock()
	cmd, waited := s.cmd, s.waited
	s.cmd = nil
	s.mu.Unlock()
	stopProcess(cmd, waited, syscall.SIGTERM, s.socket())
}

// Restart stops a real server and starts it again on the same socket and database
// file: clients see the connection drop and come back with the data intact.
func (s *Server) Restart() {
	s.t.Helper()
	if s.mem != nil || s.cluster != nil {
		s.t.Fatal("Restart is only supported for a real standalone ovsdb-server (restart a cluster's members)")
	}
	s.Stop()
	s.startProcess()
}

// Client returns a connected libovsdb client monitoring every NB table, for tests
// to write the topology and read results. It is closed at cleanup.
func (s *Server) Client(t testing.TB) client.Client {
	t.Helper()
	c := s.Conn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.MonitorAll(ctx); err != nil {
		t.Fatalf("monitor %s: %v", s.Addr, err)
	}
	return c
}

// Conn returns a connected libovsdb client with no monitor (an empty cache): it
// can build and commit operations but reads nothing. It is closed at cleanup.
func (s *Server) Conn(t testing.TB) client.Client {
	t.Helper()
	if s.cluster != nil {
		return s.cluster.leaderConn(t)
	}
	clientModel, err := nbdb.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	return Connect(context.Background(), t, s.Addr, clientModel, 10*time.Second)
}

// String is the address, for logs.
func (s *Server) String() string { return fmt.Sprintf("NB %s", s.Addr) }
