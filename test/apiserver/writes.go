package apiserver

import (
	"net/http"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// Writes records the write requests (POST, PUT, PATCH, DELETE) sent by the clients of the configs it wraps, so
// that a test can assert that a controller leaves an object alone. The zero value is ready to use.
type Writes struct {
	mu   sync.Mutex
	seen []write
}

type write struct{ method, resource, path string }

// Wrap returns a copy of cfg whose clients record their write requests in w.
func (w *Writes) Wrap(cfg *rest.Config) *rest.Config {
	out := rest.CopyConfig(cfg)
	out.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			switch req.Method {
			case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
				w.mu.Lock()
				w.seen = append(w.seen, write{req.Method, resourceOf(req.URL.Path), req.URL.Path})
				w.mu.Unlock()
			}
			return rt.RoundTrip(req)
		})
	})
	return out
}

// Of returns the write requests sent so far to resource (plural name, such as "endpointslices"), as
// "METHOD path" lines in the order they were sent.
func (w *Writes) Of(resource string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, s := range w.seen {
		if s.resource == resource {
			out = append(out, s.method+" "+s.path)
		}
	}
	return out
}

// Reset forgets the requests recorded so far.
func (w *Writes) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = nil
}

// resourceOf extracts the resource from a request path: /api/v1/[namespaces/NS/]RESOURCE/... or
// /apis/GROUP/VERSION/[namespaces/NS/]RESOURCE/... ("namespaces" for the namespaces themselves).
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return ""
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		return rest[2]
	}
	if len(rest) > 0 {
		return rest[0]
	}
	return ""
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
