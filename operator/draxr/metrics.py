"""Prometheus metrics (names follow kube-scheduler's where they mean the same thing)."""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter, Gauge, Histogram

from draxr.cluster_metrics import ClusterCollector

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

RESOURCECLAIM_CREATES = Counter(
    "draxr_resourceclaim_creates_total", "Special ResourceClaims created, by result", ["status"]
)
SCHEDULE_ATTEMPTS = Counter(
    "draxr_schedule_attempts_total", "Scheduling attempts by result", ["result"]
)  # scheduled | unschedulable | error
POD_SCHEDULING_SECONDS = Histogram(
    "draxr_pod_scheduling_duration_seconds", "Pod creation until bound", buckets=_LATENCY_BUCKETS
)
BINDING_SECONDS = Histogram(
    "draxr_binding_duration_seconds", "Decision until the pod is bound (all API writes)", buckets=_LATENCY_BUCKETS
)
CYCLE_SECONDS = Histogram(
    "draxr_scheduling_cycle_duration_seconds", "In-memory scheduling cycle of one pod", buckets=_LATENCY_BUCKETS
)
QUEUE_PENDING = Gauge("draxr_pending_pods", "Pods waiting to be scheduled, by queue", ["queue"])
CLAIMS_RELEASED = Counter("draxr_resourceclaims_released_total", "Special claims released or rolled back", ["reason"])
API_ERRORS = Counter("draxr_api_errors_total", "Failed API calls by operation and HTTP status", ["operation", "code"])
WEBHOOK_ADMISSIONS = Counter(
    "draxr_webhook_admissions_total", "Pod admission reviews by result", ["result"]
)  # steered | unchanged | not-synced | ignored | bad-request | error
WEBHOOK_SECONDS = Histogram(
    "draxr_webhook_duration_seconds",
    "Time to answer one admission review",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1),
)
EVENTS_DROPPED = Counter(
    "draxr_events_dropped_total", "Scheduled Events not written: too many were waiting for the event writer"
)
PREEMPTION_ATTEMPTS = Counter(
    "draxr_preemption_attempts_total", "Preemption attempts: pods no node fit, tried with evictions (upstream's name)"
)
PREEMPTION_VICTIMS = Histogram(
    "draxr_preemption_victims",
    "Pods evicted per preemption (upstream's preemption_victims)",
    buckets=(1, 2, 4, 8, 16, 32, 64),
)
ADOPTED_PODS = Counter("draxr_adopted_pods_total", "Default-scheduler pods adopted (adoption mode)")
ADOPTED_DEVICES = Gauge(
    "draxr_adopted_devices",
    "Devices of running device-plugin pods held for them by adoption claims (device plugin -> DRA migration)",
    ["resource"],
)
UNMATCHED_DEVICE_IDS = Gauge(
    "draxr_unmatched_device_ids",
    "Device-plugin IDs of running pods that match no DRA device, or several (their pods are not adopted)",
    ["resource"],
)

# ---- reliability: loops, watches, the event loop ----------------------------------------------------
LOOP_ERRORS = Counter(
    "draxr_loop_errors_total", "Failed steps of long-running loops, by loop and error kind", ["loop", "kind"]
)
WATCH_RESTARTS = Counter(
    "draxr_watch_restarts_total",
    "Watch streams re-opened from the last resourceVersion, by watch and why",
    ["watch", "reason"],
)
WATCH_RELISTS = Counter(
    "draxr_watch_relists_total",
    "Full re-lists of a watched kind (state reconciled), by watch and why",
    ["watch", "reason"],
)
WATCH_EVENTS = Counter("draxr_watch_events_total", "Watch events applied, by watch and type", ["watch", "type"])
WATCH_LAST_EVENT_AGE = Gauge(
    "draxr_watch_last_event_age_seconds",
    "Seconds since a watch last made progress (event, bookmark, list page)",
    ["watch"],
)
EVENT_LOOP_LAG = Histogram(
    "draxr_event_loop_lag_seconds",
    "How late the main event loop ran a timer (time other work held the loop)",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
SCHEDULER_YIELDS = Counter(
    "draxr_scheduler_yields_total", "Times the scheduling loop handed the event loop back after its time budget"
)

# ---- what the alerts of manifests/components/monitoring need --------------------------------------
LEADER = Gauge(
    "draxr_leader_election_master_status",
    "1 on the replica that leads (holds the Lease and runs the leader's duties), 0 on the others "
    "(client-go's leader_election_master_status)",
    ["name"],
)
WEBHOOK_CERT_EXPIRY = Gauge(
    "draxr_webhook_certificate_expiration_timestamp_seconds",
    "Expiry (notAfter, unix seconds) of the webhook serving certificate this replica serves, by Secret",
    ["secret"],
)
# Capacity per extended resource, pending pods per resource, orphaned special claims: computed from
# the state when scraped (draxr.cluster_metrics); the operator attaches itself.
CLUSTER = ClusterCollector()
REGISTRY.register(CLUSTER)
