package kube

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
)

// NewFakeDynamic returns a fake dynamic client (for tests) holding objs, typed Liqo objects converted to
// unstructured first. The fake's scheme knows no typed kinds, so that it serves and echoes only unstructured
// objects, as an apiserver does.
func NewFakeDynamic(objs ...runtime.Object) (*dynamicfake.FakeDynamicClient, error) {
	s := Scheme()
	converted := make([]runtime.Object, 0, len(objs))
	for _, o := range objs {
		gvks, _, err := s.ObjectKinds(o)
		if err != nil {
			return nil, fmt.Errorf("fake dynamic client: %w", err)
		}
		u, err := ToUnstructured(o, gvks[0])
		if err != nil {
			return nil, err
		}
		converted = append(converted, u)
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), ListKinds(), converted...), nil
}
