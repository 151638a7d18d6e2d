# The demo (included by the root Makefile): make demo [GATEWAY_MODE=local], make demo-down.
.PHONY: demo demo-stop demo-down

demo: install-deps build clusterctl
	@$(CURDIR)/contrib/demo.sh

demo-stop:
	@$(CURDIR)/contrib/demo-stop.sh

# cluster-down also stops the demo's ovnkube processes first.
cluster-down: demo-stop

demo-down: demo-stop cluster-down
