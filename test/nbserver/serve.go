package nbserver

import (
	"errors"
	"net"
	"sync"

	"github.com/cenkalti/rpc2"
	"github.com/cenkalti/rpc2/jsonrpc"
	"github.com/ovn-org/libovsdb/server"
)

// serveInMemory serves the OVSDB methods of srv on l until l is closed, as
// libovsdb's OvsdbServer.Serve does, but with each connection's writes serialized
// (serialCodec): rpc2 answers each request in its own goroutine, and its JSON
// codec encodes two answers at once without a lock (a client's echo answered
// beside a transaction), a data race inside the test server that go test -race
// reports against whichever test runs then.
func serveInMemory(srv *server.OvsdbServer, l net.Listener) error {
	rs := rpc2.NewServer()
	rs.Handle("list_dbs", srv.ListDatabases)
	rs.Handle("get_schema", srv.GetSchema)
	rs.Handle("transact", srv.Transact)
	rs.Handle("cancel", srv.Cancel)
	rs.Handle("monitor", srv.Monitor)
	rs.Handle("monitor_cond", srv.MonitorCond)
	rs.Handle("monitor_cond_since", srv.MonitorCondSince)
	rs.Handle("monitor_cancel", srv.MonitorCancel)
	rs.Handle("steal", srv.Steal)
	rs.Handle("unlock", srv.Unlock)
	rs.Handle("echo", srv.Echo)
	for {
		conn, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		go rs.ServeCodec(&serialCodec{Codec: jsonrpc.NewJSONCodec(conn)})
	}
}

// serialCodec is an rpc2.Codec whose writes (answers and notifications) happen
// one at a time, as rpc2.Codec documents they must be safe to call concurrently.
type serialCodec struct {
	rpc2.Codec
	mu sync.Mutex
}

func (c *serialCodec) WriteRequest(r *rpc2.Request, x interface{}) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Codec.WriteRequest(r, x)
}

func (c *serialCodec) WriteResponse(r *rpc2.Response, x interface{}) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Codec.WriteResponse(r, x)
}
