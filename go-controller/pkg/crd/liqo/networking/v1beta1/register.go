package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is Liqo's networking API group.
const GroupName = "networking.liqo.io"

// SchemeGroupVersion is networking.liqo.io/v1beta1.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1beta1"}

var (
	// ConfigurationResource is the resource (plural) of Configuration.
	ConfigurationResource = SchemeGroupVersion.WithResource("configurations")
	// ConnectionResource is the resource (plural) of Connection.
	ConnectionResource = SchemeGroupVersion.WithResource("connections")
)

var (
	// SchemeBuilder registers the types of this group.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the types of this group to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&Configuration{}, &ConfigurationList{},
		&Connection{}, &ConnectionList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
