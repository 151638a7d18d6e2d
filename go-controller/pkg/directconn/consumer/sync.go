package consumer

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/kube"
)

// sync converges the ShadowEndpointSlice namespace/name in every provider with the consumer's EndpointSlice of
// that name: written when the slice is reflected, deleted when it is gone or no longer reflected.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) error {
	slice, err := c.slices.EndpointSlices(key.Namespace).Get(key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading EndpointSlice %s from the cache: %w", key, err)
	}
	if err != nil || !reflected(slice) {
		slice = nil
	}
	var (
		svc          *corev1.Service
		nodeClusters map[string]string
		peers        map[string]directconn.Peer
	)
	if slice != nil {
		svc, err = c.services.Services(key.Namespace).Get(slice.Labels[discoveryv1.LabelServiceName])
		switch {
		case apierrors.IsNotFound(err):
			svc = nil // no Service: reflected without direct-connections data
		case err != nil:
			return fmt.Errorf("reading the Service of EndpointSlice %s from the cache: %w", key, err)
		}
		nodes, err := c.nodes.List(labels.Everything())
		if err != nil {
			return fmt.Errorf("listing Nodes from the cache: %w", err)
		}
		nodeClusters = directconn.NodeClusters(nodes)
		peers = directconn.Peers(kube.List[netv1beta1.Configuration](c.cfgs.GetStore()), nil)
	}

	var errs []error
	for _, p := range c.providers {
		existing := kube.Get[offv1beta1.ShadowEndpointSlice](p.shadows.GetStore(), key.Namespace, key.Name)
		if slice == nil {
			if existing != nil {
				c.log.V(2).Info("Deleting ShadowEndpointSlice", "cluster", p.id, "shadowEndpointSlice", key)
				if err := p.writer.Delete(ctx, existing); err != nil && !apierrors.IsNotFound(err) {
					errs = append(errs, err)
				}
			}
			continue
		}
		desired, problems, err := directconn.BuildShadow(directconn.ShadowInput{
			ConsumerClusterID: c.clusterID, Target: p.id, Service: svc, Slice: slice,
			NodeClusters: nodeClusters, Peers: peers,
		})
		for _, pr := range problems {
			c.log.Info("Reflection problem", "cluster", p.id, "endpointSlice", key, "reason", pr.Reason, "message", pr.Message)
			c.recorder.Event(slice, corev1.EventTypeWarning, pr.Reason, pr.Message)
		}
		if errors.Is(err, directconn.ErrAnnotationsTooLarge) {
			// Retrying cannot help until the slice changes; the previous shadow stays as it was.
			c.log.Error(err, "ShadowEndpointSlice not updated", "cluster", p.id, "endpointSlice", key)
			c.recorder.Event(slice, corev1.EventTypeWarning, directconn.ReasonAnnotationTooLarge,
				err.Error()+"; the previous ShadowEndpointSlice is left as it was")
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := c.write(ctx, p, slice, existing, desired); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// write creates or updates the shadow. A shadow of the same name that the informer does not hold (it lacks our
// origin label) is adopted when an earlier version of this controller wrote it for this cluster (legacyOriginLabel),
// and otherwise left alone with a Warning Event on the consumer's slice, not retried until the slice changes.
func (c *Controller) write(ctx context.Context, p providerState, slice *discoveryv1.EndpointSlice,
	existing, desired *offv1beta1.ShadowEndpointSlice) error {
	key := desired.Namespace + "/" + desired.Name
	if existing == nil {
		err := p.writer.Create(ctx, desired)
		if err == nil {
			c.log.V(2).Info("Created ShadowEndpointSlice", "cluster", p.id, "shadowEndpointSlice", key)
		}
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		live, gerr := p.writer.Get(ctx, desired.Namespace, desired.Name)
		switch {
		case gerr != nil || live.Labels[directconn.OriginClusterIDLabel] == c.clusterID:
			return err // ours, not in the cache yet: retried
		case live.Labels[legacyOriginLabel] != c.clusterID:
			c.log.Info("ShadowEndpointSlice of another writer: left alone", "cluster", p.id, "shadowEndpointSlice", key,
				"origin", live.Labels[directconn.OriginClusterIDLabel])
			c.recorder.Eventf(slice, corev1.EventTypeWarning, ReasonShadowConflict,
				"ShadowEndpointSlice %s in cluster %s exists and was not written by this consumer (%s=%q): left alone",
				key, p.id, directconn.OriginClusterIDLabel, live.Labels[directconn.OriginClusterIDLabel])
			return nil
		}
		c.log.Info("Adopting the ShadowEndpointSlice an earlier version wrote", "cluster", p.id, "shadowEndpointSlice", key)
		existing = live
	}
	if equality.Semantic.DeepEqual(existing.Labels, desired.Labels) &&
		equality.Semantic.DeepEqual(existing.Annotations, desired.Annotations) &&
		equality.Semantic.DeepEqual(existing.Spec, desired.Spec) {
		return nil
	}
	updated := existing.DeepCopy()
	updated.Labels, updated.Annotations, updated.Spec = desired.Labels, desired.Annotations, desired.Spec
	err := p.writer.Update(ctx, updated)
	if err == nil {
		c.log.V(2).Info("Updated ShadowEndpointSlice", "cluster", p.id, "shadowEndpointSlice", key)
	}
	return err
}

// reflected reports whether a consumer EndpointSlice is reflected: it belongs to a Service and was not itself
// made from a ShadowEndpointSlice (when this cluster is also a provider), by us or by Liqo.
func reflected(s *discoveryv1.EndpointSlice) bool {
	return s.Labels[discoveryv1.LabelServiceName] != "" &&
		s.Labels[discoveryv1.LabelManagedBy] != directconn.ReflectionManagedBy &&
		s.Labels[directconn.ShadowManagedByLabel] != directconn.ShadowManagedBy
}
