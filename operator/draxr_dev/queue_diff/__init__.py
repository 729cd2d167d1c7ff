"""The queue differential: draxr's scheduling queue (fed by its watch handlers) against
kube-scheduler 1.37.2's own PriorityQueue (tests/scheduler_harness, ``-queue``), step by step
(casegen: the sequences; runner: both sides; compare: missing, late and extra pods)."""
