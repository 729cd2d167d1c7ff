"""Crash points for the crash-safety tests: ``DRAXR_CRASH_AFTER=<step>`` makes the process SIGKILL
itself right after that write step of a binding (create-claim, write-allocation, pod-status, bind),
or of a pod's volumes (write-volumes: the PV claimRefs and PVC selected-node annotations are
written; volumes-bound: the claims are Bound, the Binding not written yet), or of the pod's own
ResourceClaims (pod-claim-finalizer: the delete-protection finalizer added, the allocation not yet
written; pod-claim: allocation and reservedFor written, the special claim and the Binding not).
Unset in production; reading it costs one dict lookup per step."""

from __future__ import annotations

import os
import signal

STEPS = ("create-claim", "write-allocation", "pod-status", "bind")
VOLUME_STEPS = ("write-volumes", "volumes-bound")
POD_CLAIM_STEPS = ("pod-claim-finalizer", "pod-claim")


def crash_point(step: str) -> None:
    if os.environ.get("DRAXR_CRASH_AFTER") == step:
        os.kill(os.getpid(), signal.SIGKILL)
