package integration

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
)

// cluster is one running control plane and its clients.
type cluster struct {
	id   string
	env  *apiserver.Env
	kube kubernetes.Interface
	dyn  dynamic.Interface
}

func startCluster(t *testing.T, id string) *cluster {
	t.Helper()
	env := apiserver.Start(t)
	c := &cluster{id: id, env: env}
	var err error
	if c.kube, err = kubernetes.NewForConfig(env.Config); err != nil {
		t.Fatal(err)
	}
	if c.dyn, err = dynamic.NewForConfig(env.Config); err != nil {
		t.Fatal(err)
	}
	return c
}

// ensureNamespace creates namespace name unless it exists.
func (c *cluster) ensureNamespace(t *testing.T, name string) {
	t.Helper()
	_, err := c.kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("%s: namespace %s: %v", c.id, name, err)
	}
}

func (c *cluster) namespace(t *testing.T, name string) {
	t.Helper()
	if _, err := c.kube.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("%s: namespace %s: %v", c.id, name, err)
	}
}

// setConnection changes the status of this cluster's Connection to cluster remote.
func (c *cluster) setConnection(t *testing.T, remote string, v netv1beta1.ConnectionStatusValue) {
	t.Helper()
	ctx := context.Background()
	r := c.dyn.Resource(netv1beta1.ConnectionResource).Namespace("liqo-tenant-" + remote)
	u, err := r.Get(ctx, "gw-"+remote, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = map[string]interface{}{"value": string(v)}
	if _, err := r.UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("%s: Connection to %s status %s: %v", c.id, remote, v, err)
	}
}

func (c *cluster) node(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	if _, err := c.kube.CoreV1().Nodes().Create(context.Background(),
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func virtualNode(cluster string) map[string]string {
	return map[string]string{directconn.NodeTypeLabel: directconn.VirtualNodeType, directconn.RemoteClusterIDLabel: cluster}
}

func endpoint(node, addr string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr.To(node),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
}

// logObject logs obj (read back from cluster c) as indented JSON without the server-set metadata, for the
// examples in docs/direct-connections.md (go test -v).
func (c *cluster) logObject(t *testing.T, title string, u *unstructured.Unstructured) {
	t.Helper()
	u = u.DeepCopy()
	for _, f := range []string{"managedFields", "uid", "resourceVersion", "creationTimestamp", "generation"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	b, err := json.MarshalIndent(u.Object, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s\n%s", c.id, title, b)
}

// logResource logs the object name in namespace demo of resource gvr (see logObject).
func (c *cluster) logResource(t *testing.T, title string, gvr schema.GroupVersionResource, name string) {
	t.Helper()
	u, err := c.dyn.Resource(gvr).Namespace("demo").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.logObject(t, title, u)
}
