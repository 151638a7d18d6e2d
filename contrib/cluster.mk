# Local cluster targets (included by the root Makefile). See docs/local-cluster.md.
#   make install-deps                       Debian packages when missing + kube-apiserver/kubectl v1.37.2 (cached build)
#   make cluster-up [GATEWAY_MODE=local] [CLUSTER_IP_FAMILY=ipv4|ipv6|dual] [CLUSTER_NB=raft] [CLUSTER_LAYOUT=interconnect] [CLUSTER_NODES=N] [CLUSTER_STATE=dir]
#   make cluster-down [CLUSTER_STATE=dir]
GO ?= go
CLUSTER_STATE ?= $(CURDIR)/_output/cluster
CLUSTER_NODES ?= 3
GATEWAY_MODE ?= shared
CLUSTER_IP_FAMILY ?= ipv4
CLUSTER_NB ?= standalone
# Empty: each tool's default (make demo: interconnect; make cluster-up, clusterctl: centralized).
CLUSTER_LAYOUT ?=
CLUSTERCTL := $(CURDIR)/_output/bin/clusterctl
export CLUSTER_STATE CLUSTER_NODES GATEWAY_MODE CLUSTER_IP_FAMILY CLUSTER_NB CLUSTER_LAYOUT

.PHONY: install-deps cluster-up cluster-down clusterctl

install-deps:
	@$(CURDIR)/contrib/install-deps.sh

clusterctl:
	@mkdir -p $(dir $(CLUSTERCTL))
	@$(GO) build -o $(CLUSTERCTL) ./test/cluster/cmd/clusterctl || { echo "cluster: failed to build clusterctl"; exit 1; }

cluster-up: install-deps clusterctl
	@$(CLUSTERCTL) up

cluster-down: clusterctl
	@$(CLUSTERCTL) down
