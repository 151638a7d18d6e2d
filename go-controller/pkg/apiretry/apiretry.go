// Package apiretry lets an informer ride out an apiserver that is not listening without entering client-go's
// reflector backoff.
//
// A reflector whose list or watch fails waits before it tries again, and that wait doubles from 0.8 s up to a
// 30 s cap, jittered to [30 s, 60 s) once capped; its step count is reset only when a wait is asked for more than
// 2 minutes after the reflector started or last reset (k8s.io/client-go/tools/cache, wait.Backoff.DelayWithReset).
// While a kube-apiserver restarts, every watch retry that finds the port closed ("connection refused") takes one
// of those steps, so after two restarts within 2 minutes an informer could stay blind for 30 to 60 s after the
// apiserver answered again. A refused connection costs the apiserver nothing (no TLS handshake, no request), so
// Wrap retries it in place instead: a GET whose context was marked with Informing and that is refused at the dial
// is sent again after 100 ms, doubling to at most 1 s, until it connects or its context ends. Everything else (other
// methods, unmarked contexts, any other error, an HTTP error status such as 429 or 503) is left to the caller and
// the reflector's backoff as before.
package apiretry

import (
	"context"
	"net/http"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
)

const (
	firstRetry = 100 * time.Millisecond
	maxRetry   = time.Second
)

type informingKey struct{}

// Informing marks ctx: GET requests made under it (an informer's lists and watches, when ctx is the one its
// factory was started with) are retried in place while the apiserver refuses connections (Wrap).
func Informing(ctx context.Context) context.Context {
	return context.WithValue(ctx, informingKey{}, true)
}

func informing(ctx context.Context) bool {
	v, _ := ctx.Value(informingKey{}).(bool)
	return v
}

// Wrap returns rt with the retry of refused informer GETs (a transport.WrapperFunc, for rest.Config.Wrap).
func Wrap(rt http.RoundTripper) http.RoundTripper {
	return &roundTripper{next: rt, first: firstRetry, max: maxRetry}
}

type roundTripper struct {
	next       http.RoundTripper
	first, max time.Duration
}

// RoundTrip sends req; a marked GET with no body that is refused is sent again until it connects or its context
// ends (then the refusal is returned, as without the retry).
func (t *roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet || (req.Body != nil && req.Body != http.NoBody) || !informing(req.Context()) {
		return t.next.RoundTrip(req)
	}
	wait := t.first
	for {
		resp, err := t.next.RoundTrip(req)
		if err == nil || !utilnet.IsConnectionRefused(err) {
			return resp, err
		}
		timer := time.NewTimer(wait)
		select {
		case <-req.Context().Done():
			timer.Stop()
			return nil, err
		case <-timer.C:
		}
		wait = min(2*wait, t.max)
	}
}

// WrappedRoundTripper exposes the wrapped transport (k8s.io/apimachinery/pkg/util/net.RoundTripperWrapper), so
// client-go can still reach it, to close idle connections for example.
func (t *roundTripper) WrappedRoundTripper() http.RoundTripper { return t.next }
