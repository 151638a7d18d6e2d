package integration

import (
	"context"
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	corev1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/core/v1beta1"
	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
)

// The objects below are written as JSON in the shape Liqo's own components write them (field names and nesting
// from Liqo's API types and reflection code, ../shared/LIQO.md), not through our Go types, and created with strict
// server-side field validation (what kubectl applies): an unknown or misplaced field fails the test.

// liqoConfiguration is a Configuration as Liqo's IPAM writes it in cluster local for cluster remote: the remote's
// real pod and external CIDRs in spec.remote, how local sees them in status.remote, spec.local and conditions too.
func liqoConfiguration(remote, pod, podView, ext, extView string) string {
	return `{"apiVersion":"networking.liqo.io/v1beta1","kind":"Configuration",
	  "metadata":{"name":"` + remote + `","namespace":"liqo-tenant-` + remote + `",
	    "labels":{"liqo.io/remote-cluster-id":"` + remote + `","networking.liqo.io/configuration":"true"}},
	  "spec":{"local":{"cidr":{"pod":["10.244.0.0/16"],"external":["10.70.0.0/16"]}},
	          "remote":{"cidr":{"pod":["` + pod + `"],"external":["` + ext + `"]}}},
	  "status":{"remote":{"cidr":{"pod":["` + podView + `"],"external":["` + extView + `"]}},
	    "conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-12-01T07:00:00Z","reason":"Remapped","message":"CIDRs remapped"}]}}`
}

// liqoConnection is a Connection as Liqo's gateway writes it.
func liqoConnection(remote, value string) string {
	return `{"apiVersion":"networking.liqo.io/v1beta1","kind":"Connection",
	  "metadata":{"name":"gw-` + remote + `","namespace":"liqo-tenant-` + remote + `","labels":{"liqo.io/remote-cluster-id":"` + remote + `"}},
	  "spec":{"type":"Client","gatewayRef":{"apiVersion":"networking.liqo.io/v1beta1","kind":"GatewayClient",
	    "name":"gw-` + remote + `","namespace":"liqo-tenant-` + remote + `","uid":"6d1f1b7e-0000-4000-8000-000000000001"}},
	  "status":{"value":"` + value + `","latency":{"value":"1.2ms","timestamp":"2026-12-01T07:00:00Z"}}}`
}

// liqoForeignCluster is a ForeignCluster as Liqo writes it for a peered consumer, with the networking module's
// NetworkConnectionStatus and the APIServerStatus conditions given.
func liqoForeignCluster(id, network, api string) string {
	return `{"apiVersion":"core.liqo.io/v1beta1","kind":"ForeignCluster",
	  "metadata":{"name":"` + id + `","labels":{"liqo.io/remote-cluster-id":"` + id + `"}},
	  "spec":{"clusterID":"` + id + `"},
	  "status":{"role":"Consumer","apiServerUrl":"https://192.0.2.1:6443","foreignProxyUrl":"",
	    "tenantNamespace":{"local":"liqo-tenant-` + id + `","remote":"liqo-tenant-cluster-b"},
	    "modules":{
	      "networking":{"enabled":true,"conditions":[{"type":"NetworkConnectionStatus","status":"` + network + `",
	        "lastTransitionTime":"2026-12-01T07:00:00Z","reason":"ConnectionEstablished","message":"The connection is established"},
	        {"type":"NetworkConfigurationStatus","status":"Ready","lastTransitionTime":"2026-12-01T07:00:00Z"}]},
	      "authentication":{"enabled":true,"conditions":[{"type":"AuthTenantStatus","status":"Ready","lastTransitionTime":"2026-12-01T07:00:00Z"}]},
	      "offloading":{"enabled":false}},
	    "conditions":[{"type":"APIServerStatus","status":"` + api + `","lastTransitionTime":"2026-12-01T07:00:00Z",
	      "reason":"APIServerReady","message":"The API server is ready"}]}}`
}

// liqoShadow is a ShadowEndpointSlice as Liqo's virtual kubelet in consumer cluster-a writes it into provider
// target: the reflection labels, each endpoint with its Ready condition, nodeName the consumer's cluster ID and
// targetRef kind RemotePod, and, when data is not empty, the direct-connections annotation.
func liqoShadow(name, target, data string, addrs ...string) string {
	eps := make([]map[string]interface{}, 0, len(addrs))
	for i, a := range addrs {
		eps = append(eps, map[string]interface{}{
			"addresses":  []string{a},
			"conditions": map[string]interface{}{"ready": true},
			"nodeName":   "cluster-a",
			"targetRef":  map[string]interface{}{"kind": "RemotePod", "namespace": "demo", "name": name + "-" + string(rune('a'+i)), "uid": "0000-" + a},
		})
	}
	obj := map[string]interface{}{
		"apiVersion": "offloading.liqo.io/v1beta1", "kind": "ShadowEndpointSlice",
		"metadata": map[string]interface{}{"name": name, "namespace": "demo",
			"labels": map[string]interface{}{
				"kubernetes.io/service-name":             "web",
				"endpointslice.kubernetes.io/managed-by": "endpointslice.reflection.liqo.io",
				"offloading.liqo.io/origin":              "cluster-a",
				"offloading.liqo.io/destination":         target,
			}},
		"spec": map[string]interface{}{"template": map[string]interface{}{
			"addressType": "IPv4",
			"endpoints":   eps,
			"ports":       []interface{}{map[string]interface{}{"name": "http", "port": 8080, "protocol": "TCP"}},
		}},
	}
	if data != "" {
		obj["metadata"].(map[string]interface{})["annotations"] = map[string]interface{}{"liqo.io/direct-connections-data": data}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		panic(err) // a static document
	}
	return string(b)
}

// createLiqo creates the JSON object doc in cluster c with strict field validation, then writes its status
// through the status subresource (which create ignores), as Liqo's controllers do.
func (c *cluster) createLiqo(t *testing.T, doc string) {
	t.Helper()
	ctx := context.Background()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(doc)); err != nil {
		t.Fatalf("%s: bad test document: %v\n%s", c.id, err, doc)
	}
	gvr := liqoResource(t, u.GroupVersionKind())
	r := c.dyn.Resource(gvr).Namespace(u.GetNamespace())
	if u.GetNamespace() == "" {
		r = c.dyn.Resource(gvr)
	}
	if ns := u.GetNamespace(); ns != "" && ns != "demo" {
		c.ensureNamespace(t, ns)
	}
	status, hasStatus := u.Object["status"]
	created, err := r.Create(ctx, u, metav1.CreateOptions{FieldValidation: "Strict"})
	if err != nil {
		t.Fatalf("%s: create %s %s as Liqo writes it: %v", c.id, u.GetKind(), u.GetName(), err)
	}
	if !hasStatus || gvr == offv1beta1.ShadowEndpointSliceResource {
		return
	}
	created.Object["status"] = status
	if _, err := r.UpdateStatus(ctx, created, metav1.UpdateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatalf("%s: status of %s %s as Liqo writes it: %v", c.id, u.GetKind(), u.GetName(), err)
	}
}

func liqoResource(t *testing.T, gvk schema.GroupVersionKind) schema.GroupVersionResource {
	t.Helper()
	switch gvk.Kind {
	case "Configuration":
		return netv1beta1.ConfigurationResource
	case "Connection":
		return netv1beta1.ConnectionResource
	case "ForeignCluster":
		return corev1beta1.ForeignClusterResource
	case "ShadowEndpointSlice":
		return offv1beta1.ShadowEndpointSliceResource
	}
	t.Fatalf("no resource for %v", gvk)
	return schema.GroupVersionResource{}
}
