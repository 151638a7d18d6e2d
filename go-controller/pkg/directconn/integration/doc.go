// Package integration holds the direct-connections test against real kube-apiservers: one per cluster (consumer
// A, providers B and C), started with test/apiserver, with the consumer and provider controllers running in the
// test process.
package integration
