package node

import (
	"context"
	"time"

	"github.com/vishvananda/netlink"
	"k8s.io/klog/v2"
)

// Watch calls notify for every address or route change in the host's network
// namespace until ctx is done. A broken subscription is re-opened after a second
// (the periodic resync covers the gap).
func (h *linuxHost) Watch(ctx context.Context, notify func()) {
	for ctx.Err() == nil {
		done := make(chan struct{})
		addrs := make(chan netlink.AddrUpdate, 64)
		routes := make(chan netlink.RouteUpdate, 64)
		onErr := func(err error) {
			if ctx.Err() == nil {
				klog.ErrorS(err, "Netlink subscription error")
			}
		}
		addrsOpen, routesOpen := false, false
		err := h.inNetns(func() error {
			if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{ErrorCallback: onErr}); err != nil {
				return err
			}
			addrsOpen = true
			if err := netlink.RouteSubscribeWithOptions(routes, done, netlink.RouteSubscribeOptions{ErrorCallback: onErr}); err != nil {
				return err
			}
			routesOpen = true
			return nil
		})
		if err != nil {
			klog.ErrorS(err, "Netlink subscription failed; retrying")
		} else {
			h.pump(ctx, addrs, routes, notify)
		}
		close(done)
		// Drain until the library closes the channels, so its goroutines never block.
		if addrsOpen {
			go func() {
				for range addrs {
				}
			}()
		}
		if routesOpen {
			go func() {
				for range routes {
				}
			}()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// pump forwards events until ctx is done or a subscription ends.
func (h *linuxHost) pump(ctx context.Context, addrs <-chan netlink.AddrUpdate, routes <-chan netlink.RouteUpdate, notify func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-addrs:
			if !ok {
				return
			}
			notify()
		case _, ok := <-routes:
			if !ok {
				return
			}
			notify()
		}
	}
}
