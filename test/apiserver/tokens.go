package apiserver

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// NodeNameExtra is the user-info extra key under which the apiserver passes the name of the Node a service account
// token is bound to (a TokenRequest bound to a Node, or a Pod-bound token of a pod scheduled on a node).
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// ServiceAccountToken asks the apiserver (TokenRequest, as admin cs) for a token of the ServiceAccount namespace/name
// valid for ttl. When node is not "", the token is bound to that Node, as a kubelet's tokens are: every request made
// with it carries the Node's name in its user info (NodeNameExtra), and the apiserver stops accepting it once that
// Node is deleted. The Node must exist.
func ServiceAccountToken(ctx context.Context, cs kubernetes.Interface, namespace, name, node string, ttl time.Duration) (string, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(ttl / time.Second)),
	}}
	if node != "" {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("token for %s/%s bound to node %s: %w", namespace, name, node, err)
		}
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID}
	}
	out, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		if node != "" {
			return "", fmt.Errorf("token for %s/%s bound to node %s: %w", namespace, name, node, err)
		}
		return "", fmt.Errorf("token for %s/%s: %w", namespace, name, err)
	}
	return out.Status.Token, nil
}

// TokenConfig returns a copy of base (same server and CA) that authenticates with the bearer token only: no client
// certificate, no impersonation.
func TokenConfig(base *rest.Config, token string) *rest.Config {
	cfg := rest.AnonymousClientConfig(base)
	cfg.BearerToken = token
	return cfg
}
