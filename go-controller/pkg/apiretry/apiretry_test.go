package apiretry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// refusedAddr returns a loopback address where nothing listens (connections to it are refused).
func refusedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// attempts counts the requests that reach the network and the ones refused there.
type attempts struct {
	next         http.RoundTripper
	sent, refuse atomic.Int64
}

func (a *attempts) RoundTrip(req *http.Request) (*http.Response, error) {
	a.sent.Add(1)
	resp, err := a.next.RoundTrip(req)
	if err != nil && utilnet.IsConnectionRefused(err) {
		a.refuse.Add(1)
	}
	return resp, err
}

// newClient is a clientset for addr whose transport is Wrap over a, as ovnkube builds it (rest.Config.Wrap).
func newClient(t *testing.T, addr string, a *attempts) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: "http://" + addr}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { a.next = rt; return a })
	cfg.Wrap(Wrap)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// serveNodes starts, on addr, an apiserver stand-in that lists one Node, refuses watch-list streams (as an
// apiserver without the feature does, so the reflector lists) and holds plain watches open with no event.
func serveNodes(t *testing.T, addr string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		q := r.URL.Query()
		switch {
		case q.Get("sendInitialEvents") == "true":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400,"message":"no watch-list here"}`)
		case q.Get("watch") == "true":
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			_, _ = fmt.Fprint(w, `{"kind":"NodeList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"n1","resourceVersion":"1"}}]}`)
		}
	}))
	if err := srv.Listener.Close(); err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
}

// An informer started under Informing keeps asking while the apiserver's port is closed and syncs as soon as
// it opens. Without the retry its reflector takes one backoff step per refusal (0.8 s doubling, jittered up to
// twice that): after the fourth refusal it waits at least 6.4 s before it tries again.
func TestInformerSyncsAsSoonAsTheAPIServerListens(t *testing.T) {
	addr := refusedAddr(t)
	a := &attempts{}
	f := informers.NewSharedInformerFactory(newClient(t, addr, a), 0)
	inf := f.Core().V1().Nodes().Informer()
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		f.Shutdown()
	}()
	f.StartWithContext(Informing(ctx))

	waitfor.True(t, 60*time.Second, 5*time.Millisecond, "four requests refused", func() (bool, string) {
		return a.refuse.Load() >= 4, fmt.Sprintf("%d refused", a.refuse.Load())
	})
	serveNodes(t, addr)
	took := waitfor.True(t, 60*time.Second, 10*time.Millisecond, "informer synced", func() (bool, string) {
		return inf.HasSynced(), fmt.Sprintf("%d requests, %d refused", a.sent.Load(), a.refuse.Load())
	})
	if took > 3*time.Second {
		t.Fatalf("informer synced %s after the apiserver listened (%d requests, %d refused), want within 3 s",
			took.Round(time.Millisecond), a.sent.Load(), a.refuse.Load())
	}
	t.Logf("synced %s after the apiserver listened; %d requests, %d refused", took.Round(time.Millisecond), a.sent.Load(), a.refuse.Load())
}

// Requests outside an informer's context, and writes, fail at once as before: the caller decides.
func TestUnmarkedGETAndWritesAreNotRetried(t *testing.T) {
	addr := refusedAddr(t)
	a := &attempts{}
	cs := newClient(t, addr, a)
	ctx := context.Background()
	if _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !utilnet.IsConnectionRefused(err) {
		t.Fatalf("unmarked list: err %v, want connection refused", err)
	}
	if _, err := cs.CoreV1().Nodes().Create(Informing(ctx), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		metav1.CreateOptions{}); !utilnet.IsConnectionRefused(err) {
		t.Fatalf("create under Informing: err %v, want connection refused", err)
	}
	if got := a.sent.Load(); got != 2 {
		t.Fatalf("%d requests sent, want 2 (one each, no retry)", got)
	}
}

// A marked GET whose context ends while the port is still closed returns the refusal (the cause) and stops.
func TestMarkedGETStopsWithItsContext(t *testing.T) {
	addr := refusedAddr(t)
	a := &attempts{}
	cs := newClient(t, addr, a)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CoreV1().Nodes().List(Informing(ctx), metav1.ListOptions{})
		done <- err
	}()
	waitfor.True(t, 10*time.Second, 10*time.Millisecond, "refused twice", func() (bool, string) {
		return a.refuse.Load() >= 2, fmt.Sprintf("%d refused", a.refuse.Load())
	})
	cancel()
	err := <-done
	if err == nil || !(utilnet.IsConnectionRefused(err) || errors.Is(err, context.Canceled)) {
		t.Fatalf("err %v, want the refusal or the context's end", err)
	}
	n := a.sent.Load()
	if n < 2 {
		t.Fatalf("%d requests sent, want at least 2", n)
	}
}
