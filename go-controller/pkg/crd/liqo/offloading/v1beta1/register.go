package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is Liqo's offloading API group.
const GroupName = "offloading.liqo.io"

// SchemeGroupVersion is offloading.liqo.io/v1beta1.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta1"}

// ShadowEndpointSliceResource is the resource (plural) of ShadowEndpointSlice.
var ShadowEndpointSliceResource = SchemeGroupVersion.WithResource("shadowendpointslices")

var (
	// SchemeBuilder registers the types of this group.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this group to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &ShadowEndpointSlice{}, &ShadowEndpointSliceList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
