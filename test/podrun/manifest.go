// Package podrun runs the pods of dist/manifests from the project's OCI images (make image) with runc, on one
// machine and without a kubelet: it is what a kubelet and its container runtime would do with the pod templates,
// reduced to what our pods use. The command line, environment (values and the fieldRefs spec.nodeName,
// metadata.name, metadata.namespace, status.hostIP, status.podIP), user, capabilities, volumes (configMap,
// hostPath, the ServiceAccount token a kubelet projects), resource requests and limits and the readiness probe are
// read from the manifests, not from a second copy; the caller says only where the pod runs (the network namespace
// of a hostNetwork pod), which image archive an image name means, and which ConfigMaps the API server holds.
//
// What differs from a kubelet (docs/images.md): the API server is reached at its own address rather than through
// the kubernetes Service (KUBERNETES_SERVICE_HOST/PORT are set to it, there is no kube-proxy); each pod gets its own
// UTS namespace named after the pod, so two masters on one machine have different Lease identities; no seccomp
// profile is applied; liveness probes are not acted on; the image's root is shared read-only between the pods of one
// image, with tmpfs on /run and /tmp.
package podrun

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
)

// Manifests are the objects of the YAML files of a directory (dist/manifests), decoded into their Go types.
type Manifests struct {
	Objects []runtime.Object
	// Files holds the path of each object's file, by index of Objects.
	Files []string
}

// LoadManifests decodes every document of the *.yaml files of dir, in file name order. A document that does not
// decode is an error naming the file.
func LoadManifests(dir string) (*Manifests, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no *.yaml in %s", dir)
	}
	sort.Strings(files)
	m := &Manifests{}
	dec := scheme.Codecs.UniversalDeserializer()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		r := yaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", f, i, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 || isOnlyComments(doc) {
				continue
			}
			obj, _, err := dec.Decode(doc, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", f, i, err)
			}
			m.Objects = append(m.Objects, obj)
			m.Files = append(m.Files, f)
		}
	}
	return m, nil
}

func isOnlyComments(doc []byte) bool {
	for _, l := range bytes.Split(doc, []byte("\n")) {
		l = bytes.TrimSpace(l)
		if len(l) > 0 && l[0] != '#' {
			return false
		}
	}
	return true
}

// Workload is the pod template of a Deployment or DaemonSet.
type Workload struct {
	Kind, Namespace, Name string
	Template              corev1.PodTemplateSpec
}

// Workload returns the pod template of the Deployment or DaemonSet namespace/name.
func (m *Manifests) Workload(kind, namespace, name string) (*Workload, error) {
	for _, o := range m.Objects {
		switch w := o.(type) {
		case *appsv1.Deployment:
			if kind == "Deployment" && w.Namespace == namespace && w.Name == name {
				return &Workload{Kind: kind, Namespace: namespace, Name: name, Template: *w.Spec.Template.DeepCopy()}, nil
			}
		case *appsv1.DaemonSet:
			if kind == "DaemonSet" && w.Namespace == namespace && w.Name == name {
				return &Workload{Kind: kind, Namespace: namespace, Name: name, Template: *w.Spec.Template.DeepCopy()}, nil
			}
		}
	}
	return nil, fmt.Errorf("no %s %s/%s in the manifests", kind, namespace, name)
}

// ConfigMap returns the ConfigMap namespace/name of the manifests (a copy).
func (m *Manifests) ConfigMap(namespace, name string) (*corev1.ConfigMap, error) {
	for _, o := range m.Objects {
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Namespace == namespace && cm.Name == name {
			return cm.DeepCopy(), nil
		}
	}
	return nil, fmt.Errorf("no ConfigMap %s/%s in the manifests", namespace, name)
}
