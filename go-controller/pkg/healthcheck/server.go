// Package healthcheck is the egress node health check: a gRPC health server on
// every node daemon and a checker in the master that probes every
// egress-assignable node and reports reachability changes.
package healthcheck

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/klog/v2"
)

// ServiceName is the gRPC health service name the node serves and the master checks.
const ServiceName = "Service_Egress_IP"

// Serve runs the gRPC health service on addr:port until ctx is done. It reports
// ServiceName (and the overall server, "") as SERVING. It returns an error when
// it cannot listen (address not configured, port in use).
func Serve(ctx context.Context, addr netip.Addr, port int) error {
	lis, err := net.Listen("tcp", net.JoinHostPort(addr.String(), strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("egress health server: listen on %s port %d: %w", addr, port, err)
	}
	return ServeListener(ctx, lis)
}

// ServeListener is Serve on an existing listener, which it closes when done.
func ServeListener(ctx context.Context, lis net.Listener) error {
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	klog.Infof("egress health server listening on %s", lis.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case <-ctx.Done():
		hs.Shutdown()
		srv.Stop()
		<-errc //nolint:errcheck // Serve returns nil once Stop was called: this only waits for it to return
		return nil
	case err := <-errc:
		return fmt.Errorf("egress health server on %s: %w", lis.Addr(), err)
	}
}
