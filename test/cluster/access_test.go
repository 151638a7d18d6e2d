package cluster

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// The harness applies who-may-do-what from the shipped manifest, and nothing that would run ovnkube.
func TestAccessManifestKeepsAccessKindsOnly(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "dist", "manifests", "ovnkube-egressip.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := accessManifest(string(data))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, m := range regexp.MustCompile(`(?m)^kind:\s*(\S+)`).FindAllStringSubmatch(docs, -1) {
		kinds = append(kinds, m[1])
	}
	for _, want := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("kind %s not applied; kept %v", want, kinds)
		}
	}
	for _, not := range []string{"Deployment", "DaemonSet", "ConfigMap"} {
		if slices.Contains(kinds, not) {
			t.Errorf("kind %s applied; kept %v", not, kinds)
		}
	}
	if _, err := accessManifest("apiVersion: v1\nkind: ConfigMap\n"); err == nil {
		t.Error("a manifest without access objects gave no error")
	}
}
