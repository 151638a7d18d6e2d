package provider

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	corev1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/core/v1beta1"
	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/kube"
)

// errConflict is returned by write when the EndpointSlice exists and is another controller's (see ownedByShadow).
var errConflict = errors.New("EndpointSlice exists and is managed by another controller")

// sync converges the EndpointSlice namespace/name with the ShadowEndpointSlice of the same name: created or
// updated when the shadow exists, deleted when it is gone (only if a ShadowEndpointSlice controls it). Problems
// that retrying cannot solve (no origin label, a slice of another controller, a template the API server rejects)
// are reported as Warning Events on the shadow and not retried until the objects change; an existing slice is
// then left as it was.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	shadow := kube.Get[offv1beta1.ShadowEndpointSlice](c.shadows.GetStore(), key.Namespace, key.Name)
	existing, err := c.slices.EndpointSlices(key.Namespace).Get(key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading EndpointSlice %s from the cache: %w", key, err)
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
	if existing != nil && !ownedByShadow(existing) {
		c.reportConflict(shadow, existing)
		return nil
	}

	origin := shadow.Labels[directconn.OriginClusterIDLabel]
	var state *directconn.OriginState
	if c.fcs != nil {
		state = directconn.OriginFromForeignClusters(kube.List[corev1beta1.ForeignCluster](c.fcs.GetStore()), origin)
	}
	desired, problems, err := directconn.BuildEndpointSlice(directconn.SliceInput{
		LocalClusterID: c.clusterID,
		Shadow:         shadow,
		Peers: directconn.Peers(
			kube.List[netv1beta1.Configuration](c.cfgs.GetStore()),
			kube.List[netv1beta1.Connection](c.conns.GetStore())),
		Origin:                state,
		DenyDirectConnections: c.deny,
	})
	if errors.Is(err, directconn.ErrNoOrigin) {
		c.log.Error(err, "ShadowEndpointSlice ignored until it changes", "shadowEndpointSlice", key)
		c.recorder.Eventf(shadow, corev1.EventTypeWarning, ReasonNoOrigin,
			"ShadowEndpointSlice %s has no label %s naming the consumer cluster: no EndpointSlice written",
			key, directconn.OriginClusterIDLabel)
		return nil
	}
	if err != nil {
		return err
	}
	written, err := c.write(ctx, existing, desired)
	var conflict *conflictError
	switch {
	case errors.As(err, &conflict):
		c.reportConflict(shadow, conflict.live)
		return nil
	case apierrors.IsInvalid(err):
		// The shadow's template is not a valid EndpointSlice (e.g. no addressType): retrying cannot help until
		// the ShadowEndpointSlice changes, which queues it again. Say so where its owner looks.
		c.log.Error(err, "EndpointSlice rejected by the API server; not retried until the ShadowEndpointSlice changes",
			"shadowEndpointSlice", key)
		c.recorder.Eventf(shadow, corev1.EventTypeWarning, ReasonEndpointSliceRejected,
			"ShadowEndpointSlice %s: spec.template is not a valid EndpointSlice: %v", key, err)
		return nil
	case err != nil:
		return err
	}
	for _, p := range problems {
		c.log.Info("Address mapping problem", "endpointSlice", key, "reason", p.Reason, "message", p.Message)
		c.recorder.Event(written, corev1.EventTypeWarning, p.Reason, p.Message)
	}
	return nil
}

// reportConflict says, on the shadow, that the EndpointSlice of its name belongs to another controller.
func (c *Controller) reportConflict(shadow *offv1beta1.ShadowEndpointSlice, live *discoveryv1.EndpointSlice) {
	key := klogKey(live)
	c.log.Info("EndpointSlice managed by another controller: left alone, not retried until it changes",
		"endpointSlice", key, "managedBy", live.Labels[discoveryv1.LabelManagedBy])
	c.recorder.Eventf(shadow, corev1.EventTypeWarning, ReasonEndpointSliceConflict,
		"EndpointSlice %s is managed by another controller (%s=%q, controller %s): left alone; "+
			"this ShadowEndpointSlice goes through once that slice is deleted",
		key, discoveryv1.LabelManagedBy, live.Labels[discoveryv1.LabelManagedBy], controllerOf(live))
}

func controllerOf(s *discoveryv1.EndpointSlice) string {
	if writtenByLiqo(s) {
		return "Liqo's ShadowEndpointSlice controller (field manager " + LiqoFieldManager + ")"
	}
	ref := metav1.GetControllerOf(s)
	if ref == nil {
		return "none"
	}
	return ref.Kind + "/" + ref.Name
}

// conflictError carries the live EndpointSlice of another controller found while creating ours.
type conflictError struct{ live *discoveryv1.EndpointSlice }

func (e *conflictError) Error() string { return errConflict.Error() + ": " + klogKey(e.live) }
func (e *conflictError) Unwrap() error { return errConflict }

// write creates or updates the EndpointSlice; the address type is immutable, so a change of it recreates the
// slice. It returns the slice as written (or as it was when already up to date), or a *conflictError when a
// slice of another controller holds the name.
func (c *Controller) write(ctx context.Context, existing, desired *discoveryv1.EndpointSlice) (*discoveryv1.EndpointSlice, error) {
	client := c.kube.DiscoveryV1().EndpointSlices(desired.Namespace)
	if existing != nil && existing.AddressType != desired.AddressType {
		c.log.Info("Address type changed, recreating EndpointSlice", "endpointSlice", klogKey(desired),
			"from", existing.AddressType, "to", desired.AddressType)
		if err := ignoreNotFound(client.Delete(ctx, existing.Name, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{UID: &existing.UID}})); err != nil {
			return nil, fmt.Errorf("deleting EndpointSlice %s: %w", klogKey(existing), err)
		}
		existing = nil
	}
	if existing == nil {
		created, err := client.Create(ctx, desired, metav1.CreateOptions{FieldManager: FieldManager})
		if apierrors.IsAlreadyExists(err) {
			live, gerr := client.Get(ctx, desired.Name, metav1.GetOptions{})
			if gerr == nil && !ownedByShadow(live) {
				return nil, &conflictError{live: live}
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
	out, err := client.Update(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager})
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

// ownedByShadow reports whether the slice is ours to write: a ShadowEndpointSlice of its name controls it, and
// Liqo's ShadowEndpointSlice controller (which makes slices of the same shape from the same shadows) has not
// written it. A slice Liqo's controller writes stays Liqo's, so that the two never rewrite each other's work.
func ownedByShadow(s *discoveryv1.EndpointSlice) bool {
	ref := metav1.GetControllerOf(s)
	return ref != nil && ref.Kind == "ShadowEndpointSlice" && ref.Name == s.Name &&
		ref.APIVersion == offv1beta1.SchemeGroupVersion.String() && !writtenByLiqo(s)
}

// writtenByLiqo reports whether Liqo's ShadowEndpointSlice controller has written the slice (its field manager
// appears in managedFields).
func writtenByLiqo(s *discoveryv1.EndpointSlice) bool {
	for _, f := range s.ManagedFields {
		if f.Manager == LiqoFieldManager {
			return true
		}
	}
	return false
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func klogKey(s *discoveryv1.EndpointSlice) string { return s.Namespace + "/" + s.Name }
