# ovn-egressip. Run `make help` for the targets.
SHELL := /usr/bin/env bash
# Go from the official tarball is in /usr/local/go/bin, which a root shell's PATH often lacks.
export PATH := $(PATH):/usr/local/go/bin
GO ?= go
BIN := $(CURDIR)/_output/bin
# Packages that drive the one OVN data plane of the machine run one at a time, after the rest.
SERIAL_PKGS := ./test/cluster/... ./test/e2e/...
GOTEST_FLAGS ?= -race -count=1
TEST_TIMEOUT ?= 60m

.PHONY: help docs build manifests chart-check image kubelet-images kubelet-demo kubelet-test test-images generate verify test test-unit test-serial test-matrix lint clean bench scale scale-ic demo chaos

help:
	@echo "make demo           bring up the local cluster and run the main job (GATEWAY_MODE=local for local gateway mode)"
	@echo "make test           unit, integration and end-to-end tests (go test -race), as CI runs them"
	@echo "make test-images    the 8 end-to-end cases (shared gateway mode) with ovnkube run from the images (OVNKUBE_FROM=image)"
	@echo "make test-matrix    the end-to-end tests in every gateway mode x IP family (ipv4, ipv6, dual), failover cases included"
	@echo "make build          build _output/bin/ovnkube and _output/bin/directconn"
	@echo "make image          OCI archives of the images in _output/images (ovn-egressip: static; ovn-egressip-node: Debian + iptables), docs/images.md"
	@echo "make kubelet-demo   dist/manifests on real kubelets (containerd + kubelet per node), the demo and a DaemonSet roll on them, checked (docs/images.md)"
	@echo "make kubelet-test   the same as a Go test (test/e2e/kubelet)"
	@echo "make generate       regenerate clientset, deepcopy, CRDs, the NB model and docs/flags.md"
	@echo "make docs           regenerate docs/flags.md (the flag and config file reference) from the flag definitions"
	@echo "make manifests      render dist/manifests (both layouts) from the Helm chart dist/helm/ovnkube-egressip"
	@echo "make chart-check    helm lint and helm template of the chart in both layouts, dist/manifests up to date (in make verify)"
	@echo "make verify         generated code, docs/flags.md, go.mod/go.sum and dist/manifests are up to date"
	@echo "make lint           gofmt, go vet, staticcheck, golangci-lint (.golangci.yml: errors keep their cause, no sleeps in tests)"
	@echo "make bench          benchmarks that print numbers (NB programming speed)"
	@echo "make scale          the master process at scale on a real apiserver and NB: 100 simulated nodes, 5000 pods (SCALE_FLAGS=-scale.nodes=N ..., see docs/egressip.md)"
	@echo "make scale-ic       the interconnect layout at scale: cluster manager + 3 real zones (own NB, zone controller) of 100 nodes, 5000 pods (SCALE_FLAGS, docs/interconnect.md)"
	@echo "make chaos          random changes and faults on the local cluster (NB as RAFT) for CHAOS_DURATION (10m), checked against the documented semantics (docs/reliability.md); CHAOS_GATEWAY_MODE=local for local gateway mode, CHAOS_LAYOUT=interconnect for one OVN zone per node"
	@echo "make demo-down      stop the demo's ovnkube processes and the local cluster"
	@echo "make cluster-up / cluster-down   the local cluster alone (cluster-down also stops the demo)"
	@echo "make clean          remove build outputs"

# ovnkube --version: the git version, stamped at link time.
VERSION_LDFLAGS = -X github.com/ovn-egressip/ovn-egressip/go-controller/pkg/version.gitVersion=$(shell git describe --tags --always --dirty 2>/dev/null)

build:
	@mkdir -p $(BIN)
	$(GO) build -ldflags "$(VERSION_LDFLAGS)" -o $(BIN)/ovnkube ./go-controller/cmd/ovnkube
	$(GO) build -o $(BIN)/directconn ./go-controller/cmd/directconn

image: install-deps
	./contrib/image/build.sh

# The sandbox (pause) and prober images of the kubelet mode, beside the product's (docs/images.md, "Real kubelets").
kubelet-images: image
	./contrib/kubelet/images.sh

# dist/manifests on kubelets: pods Running and Ready, Lease held, the demo, a DaemonSet roll under probing. It needs
# the kubelet, kube-controller-manager and kube-scheduler builds (about 11 minutes cold, cached).
kubelet-demo: kubelet-images
	@KUBELET=1 ./contrib/install-deps.sh
	./contrib/kubelet/demo.sh

# The same checks as a Go test (test/e2e/kubelet), and the Helm chart installed and upgraded on kubelets in each
# layout (TestChartOnKubelets/centralized and /interconnect, each on a cluster of that layout); a stage of make test. It builds what it needs; E2E_KUBELETS=required makes a missing part fail instead of skip.
kubelet-test: kubelet-images
	@KUBELET=1 ./contrib/install-deps.sh
	@KUBE_EXTRA="kubelet kube-controller-manager kube-scheduler" ./contrib/build-kube.sh >/dev/null
	E2E_KUBELETS=required $(GO) test $(GOTEST_FLAGS) -timeout 25m -v -run 'Test(Manifests|Chart)OnKubelets' ./test/e2e/kubelet/

generate: docs
	./hack/update-codegen.sh
	@if [ -x hack/update-liqo-crds.sh ]; then ./hack/update-liqo-crds.sh; fi

# docs/flags.md from the flag definitions (go-controller/cmd/ovnkube/flagsdoc_test.go).
docs:
	$(GO) test -count=1 -run '^TestFlagReference$$' ./go-controller/cmd/ovnkube -args -update

verify:
	./hack/verify.sh

# dist/manifests is rendered from the chart (helm from contrib/build-helm.sh, cached like kubectl).
manifests:
	./hack/update-manifests.sh

chart-check:
	./hack/verify-chart.sh

# Each stage prints its time (CI's budget is 60 minutes).
test:
	@for t in build image test-unit test-serial test-images kubelet-test; do s=$$(date +%s); $(MAKE) --no-print-directory $$t || exit 1; \
	  echo "== make test: $$t took $$(( $$(date +%s) - s ))s"; done

test-unit:
	$(GO) test $(GOTEST_FLAGS) -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v -e /test/cluster -e /test/e2e -e /test/chaos)

test-serial:
	@mkdir -p _output && rm -f _output/e2e-results.txt _output/chaos-results-*.txt
	$(GO) test $(GOTEST_FLAGS) -timeout $(TEST_TIMEOUT) -p 1 ./test/cluster/...
	@# A case that failed while the test bed's ovs-vswitchd crashed (OVS 3.1's conntrack assertion) runs once more.
	./hack/rerun-after-bed-crash.sh ./test/e2e/ $(GOTEST_FLAGS) -timeout $(TEST_TIMEOUT) -p 1
	$(GO) test $(GOTEST_FLAGS) -timeout 30m -run TestChaos ./test/chaos/ -args -chaos.duration=$(CHAOS_CI_DURATION) -chaos.gateway-mode=shared
	$(GO) test $(GOTEST_FLAGS) -timeout 30m -run TestChaos ./test/chaos/ -args -chaos.duration=$(CHAOS_CI_DURATION) -chaos.gateway-mode=local
	$(GO) test $(GOTEST_FLAGS) -timeout 30m -run TestChaos ./test/chaos/ -args -chaos.duration=$(CHAOS_CI_DURATION) -chaos.gateway-mode=shared -chaos.layout=interconnect
	$(GO) test $(GOTEST_FLAGS) -timeout 30m -run TestChaos ./test/chaos/ -args -chaos.duration=$(CHAOS_CI_DURATION) -chaos.gateway-mode=local -chaos.layout=interconnect
	@if [ -f _output/e2e-results.txt ]; then echo "== measured by the end-to-end tests"; cat _output/e2e-results.txt; fi
	@for m in shared local interconnect-shared interconnect-local; do if [ -f _output/chaos-results-$$m.txt ]; then echo "== chaos, $$m gateway mode ($(CHAOS_CI_DURATION), docs/reliability.md)" | sed 's/interconnect-\([a-z]*\) gateway mode/interconnect layout, \1 gateway mode/'; grep -v ' round ' _output/chaos-results-$$m.txt; fi; done

# The end-to-end cases with the master and node pods of dist/manifests run from the images (docs/images.md).
test-images: image
	@mkdir -p _output && rm -f _output/e2e-results.txt
	OVNKUBE_FROM=image E2E_IP_FAMILIES=ipv4 $(GO) test $(GOTEST_FLAGS) -timeout $(TEST_TIMEOUT) -run 'TestEgressIP/shared' ./test/e2e/
	@if [ -f _output/e2e-results.txt ]; then cat _output/e2e-results.txt; fi
# CI (make test) runs the 8 end-to-end cases in every gateway mode x IP family and the failover cases in IPv4 and
# IPv6-only clusters; this runs the failover cases in dual-stack clusters too, and the local cluster test in all six.
test-matrix: build
	@mkdir -p _output && rm -f _output/e2e-results.txt
	E2E_MATRIX=full $(GO) test $(GOTEST_FLAGS) -timeout $(TEST_TIMEOUT) -p 1 $(SERIAL_PKGS)
	@if [ -f _output/e2e-results.txt ]; then echo "== measured by the end-to-end tests"; cat _output/e2e-results.txt; fi

bench:
	$(GO) test -run '^$$' -bench . -benchtime 3x ./go-controller/pkg/master/...

# The 20,000- and 50,000-pod sizes of docs/dev/benchmarks.md (SCALE_FLAGS) take minutes per phase.
SCALE_TIMEOUT ?= 120m
scale:
	$(GO) test -run '^$$' -bench 'Scale$$' -benchtime 1x -timeout $(SCALE_TIMEOUT) ./test/scale/ -args $(SCALE_FLAGS)

# The interconnect layout: the cluster manager and a sample of 3 real zones (docs/interconnect.md "Scale").
scale-ic:
	$(GO) test -run '^$$' -bench ScaleInterconnect -benchtime 1x -timeout $(SCALE_TIMEOUT) ./test/scale/ -args $(SCALE_FLAGS)

# staticcheck skips the generated clientset/informers/listers (apis/): code-generator output is not ours to change.
# golangci-lint (built once per machine by contrib/build-golangci-lint.sh, about 4 minutes cold) runs the linters of
# .golangci.yml; a finding fails make lint.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@if GOBIN=$(BIN) $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2 2>/dev/null; then $(BIN)/staticcheck $$($(GO) list ./... | grep -v /apis/); \
	 else echo "staticcheck v0.8.2 does not install from the module proxy here: skipped"; fi
	@bin=$$(./contrib/build-golangci-lint.sh) && $$bin/golangci-lint run ./...

# The chaos soak drives the machine's one OVS data plane for its whole run (docs/reliability.md). make test runs a
# CHAOS_CI_DURATION version of it in each gateway mode and layout (about 2 minutes each in all) with the same
# assertions. CHAOS_LAYOUT=interconnect runs it with one OVN zone per node (a cluster manager and zone controllers).
CHAOS_DURATION ?= 10m
CHAOS_CI_DURATION ?= 90s
CHAOS_GATEWAY_MODE ?= shared
CHAOS_LAYOUT ?= centralized
CHAOS_FLAGS ?=
chaos:
	$(GO) test -count=1 -timeout 120m -run TestChaos -v ./test/chaos/ -args -chaos.duration=$(CHAOS_DURATION) -chaos.gateway-mode=$(CHAOS_GATEWAY_MODE) -chaos.layout=$(CHAOS_LAYOUT) $(CHAOS_FLAGS)

clean:
	rm -rf _output/bin

-include contrib/cluster.mk
-include contrib/demo.mk
