package main

import (
	"strings"
	"testing"

	"k8s.io/client-go/tools/record"
)

// TestReportHold: a held node (the master suspects itself) is a Warning Event on that Node naming it and the number
// of nodes probed.
func TestReportHold(t *testing.T) {
	rec := record.NewFakeRecorder(4)
	reportHold(rec, "node2", 2, 3)
	select {
	case e := <-rec.Events:
		for _, want := range []string{"Warning", ReasonHealthCheckInconclusive, "node node2", "(3 probed)", "suspects itself"} {
			if !strings.Contains(e, want) {
				t.Errorf("event %q lacks %q", e, want)
			}
		}
	default:
		t.Fatal("no event")
	}
}
