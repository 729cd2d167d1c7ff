"""Operator settings: environment variables (DRAXR_*) or `draxr run` flags."""

from __future__ import annotations

import os

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from draxr.core.placement import Scoring


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DRAXR_", extra="ignore")

    scheduler_name: str = Field("draxr", description="spec.schedulerName of the pods draxr schedules")
    kubeconfig: str | None = Field(None, description="kubeconfig path; in-cluster configuration when unset")
    serviceaccount_dir: str = Field(
        "/var/run/secrets/kubernetes.io/serviceaccount",
        description="in-cluster token and ca.crt (tests point it elsewhere)",
    )
    scoring: Scoring = Field(Scoring.LEAST_ALLOCATED, description="LeastAllocated (spread) or MostAllocated (pack)")
    device_scoring: Scoring | None = Field(
        Scoring.MOST_ALLOCATED,
        description="DRA devices as a scored resource: MostAllocated packs GPUs so that whole nodes stay free "
        "for large requests (default), LeastAllocated spreads them; unset: cpu and memory only, as kube-scheduler",
    )
    percentage_of_nodes_to_score: int = Field(0, ge=0, le=100, description="0: kube-scheduler's adaptive default")
    bind_concurrency: int = Field(64, ge=1, description="bindings written concurrently (each is 4 sequential writes)")
    backoff_initial_seconds: float = Field(1.0, gt=0)
    backoff_max_seconds: float = Field(60.0, gt=0)
    unschedulable_flush_seconds: float = Field(60.0, gt=0, description="retry unschedulable pods at least this often")
    release_sweep_seconds: float = Field(30.0, gt=0, description="periodic sweep for claims to release")
    mapping_status_seconds: float = Field(
        10.0, gt=0, description="ExtendedResourceMapping status (conditions, capacity) refreshed at least this often"
    )
    metrics_port: int = Field(8080, ge=0, description="Prometheus /metrics (0: off)")
    health_port: int = Field(8081, ge=0, description="kopf liveness /healthz (0: off)")
    bind_address: str = Field("0.0.0.0", description="address of the metrics and health servers")
    leader_elect: bool = Field(True, description="Lease-based leader election (off: this replica always leads)")
    leader_election_namespace: str = Field(
        default_factory=lambda: os.environ.get("POD_NAMESPACE") or "default",
        description="namespace of the Lease (default: $POD_NAMESPACE, else default)",
    )
    leader_election_lease_name: str = Field("", description="Lease name (default: the scheduler name)")
    lease_duration_seconds: float = Field(15.0, gt=0)
    renew_deadline_seconds: float = Field(10.0, gt=0)
    retry_period_seconds: float = Field(2.0, gt=0)
    client_qps: float = Field(0.0, ge=0, description="client-side API rate limit, requests/s (0: unlimited)")
    client_burst: int = Field(0, ge=0, description="client-side API burst (0: same as --client-qps)")
    log_level: str = Field("info")
    log_format: str = Field("json", description="json or console")

    @field_validator("device_scoring", mode="before")
    @classmethod
    def _no_device_scoring(cls, value: object) -> object:
        """``--device-scoring none`` (or empty): score cpu and memory only, as kube-scheduler does."""
        return None if isinstance(value, str) and value.strip().lower() in ("", "none") else value
