"""Scheduling cases for the differential test of draxr's kube-scheduler filters and scores against
kube-scheduler 1.37.2's own Go plugins (tests/scheduler_harness): the seeded case generator
(casegen), the API server's create-time pod mutation as the scheduler sees it (casegen.as_stored)
and the runner of the Go harness (harness).

A case (JSON, Kubernetes objects in their v1 JSON form)::

    {"name": str, "family": str, "tags": [str],
     "nodes": [Node], "pods": [Pod: existing, spec.nodeName set],
     "namespaces": [Namespace], "services": [Service],
     "replicationControllers": [ReplicationController], "replicaSets": [ReplicaSet],
     "statefulSets": [StatefulSet],
     # optional (volume cases): "persistentVolumes", "persistentVolumeClaims", "storageClasses",
     # "csiNodes", "csiDrivers", "csiStorageCapacities", "volumeAttachments": lists of the v1 /
     # storage/v1 objects; (claim cases) "deviceClasses", "resourceSlices", "resourceClaims",
     # "resourceClaimTemplates": lists of the resource.k8s.io/v1 objects; (preemption cases,
     # casegen_preemption) "podDisruptionBudgets": policy/v1 objects and "preempt": true, and for
     # its device family "draPreemption": true (the harness's DRA preemption reference); (large
     # cases, casegen_mixed) "partialScoring": true: the harness also reports "partial", the
     # search stopped after numFeasibleNodesToFind feasible nodes in name order
     "pod": Pod (to place)}

Pods are written as users write them (pod affinity matchLabelKeys / mismatchLabelKeys and
topology spread matchLabelKeys not merged into labelSelector): the Go harness stores every pod
through kube-apiserver's own PrepareForCreate first; ``casegen.as_stored(case)`` does the same
in Python (checked against the harness's ``-print-stored``), and is what the Python side is
given. No other API defaulting happens: cases carry defaulted values (requests, not limits
alone; allocatable set on every node). Like kube-scheduler's cache, the harness only counts the
existing pods that are bound (spec.nodeName) to a node of the case and not terminal (phase
Succeeded or Failed are filtered out by its pod informer); terminating pods (deletionTimestamp) do
count. Cases contain the other kinds on purpose.

A result (the harness's output per case; the Python side returns the same, "weights" and
"total" optional)::

    {"name": str,
     "filter": {node: None | {"plugin": str, "code": str, "reasons": [str]}},
     "scores": {score plugin: {feasible node: int (normalised, unweighted)}},
     "weights": {score plugin: int},
     "total": {feasible node: int (weighted sum)}}

or ``{"name": str, "error": str}``. A preemption case where no node is feasible also gets
"preemption" (PostFilter's outcome, see tests/scheduler_harness/preemption.go); its Python side is
evaluate_preemption.
"""
