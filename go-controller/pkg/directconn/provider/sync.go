package provider

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/kube"
)

// sync converges the EndpointSlice namespace/name with the ShadowEndpointSlice of the same name: created or
// updated when the shadow exists, deleted when it is gone (only if a ShadowEndpointSlice owns it).
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	shadow := kube.Get[offv1beta1.ShadowEndpointSlice](c.shadows.GetStore(), key.Namespace, key.Name)
	existing, err := c.slices.EndpointSlices(key.Namespace).Get(key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if apierrors.IsNotFound(err) {
		existing = nil
	}
	if shadow == nil {
		if existing == nil || !ownedByShadow(existing) {
			return nil
		}
		c.log.V(2).Info("Deleting EndpointSlice of a deleted ShadowEndpointSlice", "endpointSlice", key)
		return ignoreNotFound(c.kube.DiscoveryV1().EndpointSlices(key.Namespace).Delete(ctx, key.Name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &existing.UID}}))
	}

	desired, problems := directconn.BuildEndpointSlice(directconn.SliceInput{
		LocalClusterID: c.clusterID,
		Shadow:         shadow,
		Peers: directconn.Peers(
			kube.List[netv1beta1.Configuration](c.cfgs.GetStore()),
			kube.List[netv1beta1.Connection](c.conns.GetStore())),
	})
	written, err := c.write(ctx, existing, desired)
	if apierrors.IsInvalid(err) {
		// The shadow's template is not a valid EndpointSlice (e.g. no addressType): retrying cannot help until
		// the ShadowEndpointSlice changes, which queues it again. Say so where its owner looks.
		c.log.Error(err, "EndpointSlice rejected by the API server; not retried until the ShadowEndpointSlice changes",
			"shadowEndpointSlice", key)
		c.recorder.Eventf(shadow, corev1.EventTypeWarning, ReasonEndpointSliceRejected,
			"ShadowEndpointSlice %s: spec.template is not a valid EndpointSlice: %v", key, err)
		return nil
	}
	if err != nil {
		return err
	}
	for _, p := range problems {
		c.log.Info("Direct connection not used", "endpointSlice", key, "reason", p.Reason, "message", p.Message)
		c.recorder.Event(written, corev1.EventTypeWarning, p.Reason, p.Message)
	}
	return nil
}

// write creates or updates the EndpointSlice; the address type is immutable, so a change of it recreates the
// slice. It returns the slice as written (or as it was when already up to date).
func (c *Controller) write(ctx context.Context, existing, desired *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error) {
	client := c.kube.DiscoveryV1().EndpointSlices(desired.Namespace)
	if existing != nil && existing.AddressType != desired.AddressType {
		c.log.Info("Address type changed, recreating EndpointSlice", "endpointSlice", klogKey(desired),
			"from", existing.AddressType, "to", desired.AddressType)
		if err := ignoreNotFound(client.Delete(ctx, existing.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &existing.UID}})); err != nil {
			return nil, err
		}
		existing = nil
	}
	if existing == nil {
		created, err := client.Create(ctx, desired, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			live, gerr := client.Get(ctx, desired.Name, metav1.GetOptions{})
			if gerr == nil && live.Labels[discoveryv1.LabelManagedBy] != directconn.ManagedBy {
				return nil, fmt.Errorf("EndpointSlice %s exists and is not managed by %s: not touching it",
					klogKey(desired), directconn.ManagedBy)
			}
			return nil, err // ours, not in the cache yet: retried
		}
		if err == nil {
			c.log.V(2).Info("Created EndpointSlice", "endpointSlice", klogKey(created))
		}
		return created, err
	}
	if sameContent(existing, desired) {
		return existing, nil
	}
	updated := existing.DeepCopy()
	updated.Labels = desired.Labels
	updated.Annotations = desired.Annotations
	updated.OwnerReferences = desired.OwnerReferences
	updated.Endpoints = desired.Endpoints
	updated.Ports = desired.Ports
	out, err := client.Update(ctx, updated, metav1.UpdateOptions{})
	if err == nil {
		c.log.V(2).Info("Updated EndpointSlice", "endpointSlice", klogKey(out))
	}
	return out, err
}

func sameContent(a, b *discoveryv1.EndpointSlice) bool {
	return equality.Semantic.DeepEqual(a.Labels, b.Labels) &&
		equality.Semantic.DeepEqual(a.Annotations, b.Annotations) &&
		equality.Semantic.DeepEqual(a.OwnerReferences, b.OwnerReferences) &&
		equality.Semantic.DeepEqual(a.Endpoints, b.Endpoints) &&
		equality.Semantic.DeepEqual(a.Ports, b.Ports)
}

func ownedByShadow(s *discoveryv1.EndpointSlice) bool {
	ref := metav1.GetControllerOf(s)
	return ref != nil && ref.Kind == "ShadowEndpointSlice" && ref.APIVersion == offv1beta1.SchemeGroupVersion.String()
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func klogKey(s *discoveryv1.EndpointSlice) string { return s.Namespace + "/" + s.Name }
