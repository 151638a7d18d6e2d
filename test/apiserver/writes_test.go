package apiserver

import "testing"

func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces":             "namespaces",
		"/api/v1/namespaces/demo":        "namespaces",
		"/api/v1/namespaces/demo/events": "events",
		"/api/v1/nodes/n1":               "nodes",
		"/apis/discovery.k8s.io/v1/namespaces/demo/endpointslices":                    "endpointslices",
		"/apis/discovery.k8s.io/v1/namespaces/demo/endpointslices/web-1":              "endpointslices",
		"/apis/offloading.liqo.io/v1beta1/namespaces/demo/shadowendpointslices/web-1": "shadowendpointslices",
		"/apis/networking.liqo.io/v1beta1/namespaces/t/connections/gw/status":         "connections",
		"/apis/rbac.authorization.k8s.io/v1/clusterroles/x":                           "clusterroles",
		"/healthz": "",
		"/apis":    "",
	} {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}
