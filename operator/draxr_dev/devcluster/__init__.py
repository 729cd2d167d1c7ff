"""A real local control plane (etcd, kube-apiserver, kube-controller-manager, optional kube-scheduler
and kwok) on loopback, built from the Go module proxy, plus a fake DRA driver for tests, demo and bench.

Developer tooling: the operator itself never imports this package.
"""
