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
	"google.golang.org/grpc/metadata"
	"k8s.io/klog/v2"
)

// ServiceName is the gRPC health service name the node serves and the master checks.
const ServiceName = "Service_Egress_IP"

// DaemonIDHeader is the gRPC response header that carries the node daemon run's identity (the value it publishes
// in annotations.EgressDaemonID) with every health answer. Checkers that do not read it (upstream's) are unaffected.
const DaemonIDHeader = "ovn-egressip-daemon-id"

// Serve runs the gRPC health service on addr:port until ctx is done. It reports
// ServiceName (and the overall server, "") as SERVING and, when daemonID is set,
// sends it in the DaemonIDHeader of every answer. It returns an error when it
// cannot listen (address not configured, port in use).
func Serve(ctx context.Context, addr netip.Addr, port int, daemonID string) error {
	lis, err := net.Listen("tcp", net.JoinHostPort(addr.String(), strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("egress health server: listen on %s port %d: %w", addr, port, err)
	}
	return ServeListener(ctx, lis, daemonID)
}

// ServeListener is Serve on an existing listener, which it closes when done.
func ServeListener(ctx context.Context, lis net.Listener, daemonID string) error {
	var opts []grpc.ServerOption
	if daemonID != "" {
		opts = append(opts, grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo,
			handler grpc.UnaryHandler) (any, error) {
			if err := grpc.SetHeader(ctx, metadata.Pairs(DaemonIDHeader, daemonID)); err != nil {
				return nil, fmt.Errorf("egress health server: set header %s: %w", DaemonIDHeader, err)
			}
			return handler(ctx, req)
		}))
	}
	srv := grpc.NewServer(opts...)
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
