package kube

import (
	"context"
	gosync "sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// NewQueue returns a rate-limited work queue of object keys named name.
func NewQueue(name string) workqueue.TypedRateLimitingInterface[cache.ObjectName] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
		workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: name})
}

// RunWorkers runs n workers that call sync for each key taken from queue, and blocks until ctx is done; it then
// shuts queue down and returns once every worker has returned, so that no sync (no write) outlives the call. A
// failed sync is retried with the queue's rate limiting; AlreadyExists and Conflict errors (our cache behind a write
// of ours, expected now and then) are logged at V(2) only. keyName names the key in log lines.
func RunWorkers(ctx context.Context, queue workqueue.TypedRateLimitingInterface[cache.ObjectName], n int,
	sync func(context.Context, cache.ObjectName) error, log klog.Logger, keyName string) {
	var wg gosync.WaitGroup
	for range n {
		wg.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for processNext(ctx, queue, sync, log, keyName) {
				}
			}, time.Second)
		})
	}
	<-ctx.Done()
	queue.ShutDown()
	wg.Wait()
}

func processNext(ctx context.Context, queue workqueue.TypedRateLimitingInterface[cache.ObjectName],
	sync func(context.Context, cache.ObjectName) error, log klog.Logger, keyName string) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	err := sync(ctx, key)
	switch {
	case err == nil:
		queue.Forget(key)
		return true
	case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
		log.V(2).Info("Sync raced with a write, will retry", keyName, key, "err", err.Error())
	default:
		log.Error(err, "Sync failed, will retry", keyName, key)
	}
	queue.AddRateLimited(key)
	return true
}
