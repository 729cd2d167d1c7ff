"""Prometheus metrics (names follow kube-scheduler's where they mean the same thing)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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
ADOPTED_PODS = Counter("draxr_adopted_pods_total", "Default-scheduler pods adopted (adoption mode)")
