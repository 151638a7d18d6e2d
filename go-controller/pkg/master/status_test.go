package master

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	eipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
)

// TestWriteStatusesConcurrently: the status updates of one sync are sent at once
// (up to the worker count), not one round trip after another. Every update waits
// in the API until `workers` of them are in flight together; sent one by one, the
// first would never see the others and fail.
func TestWriteStatusesConcurrently(t *testing.T) {
	const workers, total = 4, 10
	var writes []statusWrite
	for i := 0; i < total; i++ {
		e := &egressipv1.EgressIP{}
		e.Name = fmt.Sprintf("e%d", i)
		writes = append(writes, statusWrite{eip: e, rv: "1", status: egressipv1.EgressIPStatus{Items: []egressipv1.EgressIPStatusItem{{Node: "node1", EgressIP: fmt.Sprintf("172.18.0.%d", 30+i)}}}})
	}

	// An API endpoint that answers PUT .../egressips/NAME/status with the object sent
	// (the fake clientset runs its reactors one at a time, so it cannot show this).
	var mu sync.Mutex
	inFlight, most := 0, 0
	together := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || !strings.HasSuffix(r.URL.Path, "/status") {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == workers {
			once.Do(func() { close(together) })
		}
		mu.Unlock()
		defer func() { mu.Lock(); inFlight--; mu.Unlock() }()
		select {
		case <-together:
		case <-time.After(5 * time.Second):
			http.Error(w, "fewer than 4 status updates in flight together", http.StatusConflict)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	client, err := eipclientset.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}

	writeStatuses(context.Background(), client, writes, workers)
	for _, w := range writes {
		if w.err != nil {
			t.Fatalf("%s: %v", w.eip.Name, w.err)
		}
		if w.updated == nil || w.updated.Name != w.eip.Name || len(w.updated.Status.Items) != 1 || w.updated.Status.Items[0] != w.status.Items[0] {
			t.Fatalf("%s: updated %+v, want status %v", w.eip.Name, w.updated, w.status.Items)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if most > workers {
		t.Fatalf("%d status updates in flight together, want at most %d", most, workers)
	}
}
