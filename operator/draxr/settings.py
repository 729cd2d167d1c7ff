"""Operator settings: environment variables (DRAXR_*) or `draxr run` flags."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, PrivateAttr
from pydantic_settings import BaseSettings, SettingsConfigDict

from draxr.core.gc import ForeignClaims, ReleasePolicy
from draxr.core.plugins.node_resources_fit import Scoring
from draxr.core.profile import DEFAULT_PROFILE, SchedulerProfile
from draxr.core.scheduler_config import ConfigError, LoadedConfig, load

# What a KubeSchedulerConfiguration sets, and the flag each replaces.
_FROM_CONFIG = {
    "backoff_initial_seconds": "podInitialBackoffSeconds",
    "backoff_max_seconds": "podMaxBackoffSeconds",
    "percentage_of_nodes_to_score": "percentageOfNodesToScore",
    "volume_bind_timeout_seconds": "VolumeBinding's bindTimeoutSeconds",
}
REMOVED = {
    "scoring": "--scoring / DRAXR_SCORING",
    "device_scoring": "--device-scoring / DRAXR_DEVICE_SCORING",
}
MIGRATION = (
    "was removed in favour of kube-scheduler's configuration file: run draxr with --config FILE, a "
    "KubeSchedulerConfiguration whose profile (schedulerName: the --scheduler-name) sets NodeResourcesFit's "
    "scoringStrategy (type MostAllocated for --scoring MostAllocated; for the old --device-scoring default, "
    "add your extended resources to scoringStrategy.resources); see docs/reference/configuration.md"
)


def profile_of(config: str | None, scheduler_name: str) -> SchedulerProfile:
    """The profile a --config file gives ``scheduler_name`` (kube-scheduler's default without one),
    for the commands that explain draxr's decisions. Raises ConfigError."""
    if not config:
        return DEFAULT_PROFILE
    try:
        text = Path(config).read_text()
    except OSError as e:
        raise ConfigError([f"cannot read it: {e}"], config) from e
    return load(text, scheduler_name, config).profile


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DRAXR_", extra="ignore")

    scheduler_name: str = Field("draxr", description="spec.schedulerName of the pods draxr schedules")
    kubeconfig: str | None = Field(None, description="kubeconfig path; in-cluster configuration when unset")
    serviceaccount_dir: str = Field(
        "/var/run/secrets/kubernetes.io/serviceaccount",
        description="in-cluster token and ca.crt (tests point it elsewhere)",
    )
    config: str | None = Field(
        None,
        description="a KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1): the profile whose "
        "schedulerName is --scheduler-name (plugins, weights, plugin args), percentageOfNodesToScore, pod backoff; "
        "unset: kube-scheduler's default profile",
    )
    percentage_of_nodes_to_score: int = Field(0, ge=0, le=100, description="0: kube-scheduler's adaptive default")
    bind_concurrency: int = Field(64, ge=1, description="bindings written concurrently (each is 4 sequential writes)")
    volume_bind_timeout_seconds: float = Field(
        600.0,
        gt=0,
        description="how long a binding waits for its PersistentVolumeClaims to be bound or provisioned "
        "(kube-scheduler's VolumeBindingArgs.bindTimeoutSeconds); then the pod is retried",
    )
    backoff_initial_seconds: float = Field(1.0, gt=0)
    backoff_max_seconds: float = Field(60.0, gt=0)
    unschedulable_flush_seconds: float = Field(60.0, gt=0, description="retry unschedulable pods at least this often")
    release_sweep_seconds: float = Field(30.0, gt=0, description="periodic sweep for claims to release")
    release_foreign_claims: ForeignClaims = Field(
        ForeignClaims.AUTO,
        description="the special claims of pods draxr did not schedule (kube-scheduler's), which "
        "kube-controller-manager releases from 1.35 on: auto: release those still held after "
        "--release-foreign-grace-seconds; always: at once (no controller releases them: 1.34, or KCM "
        "without its resourceclaim controller); never: leave them to kube-controller-manager",
    )
    release_own_grace_seconds: float = Field(
        1.0,
        ge=0,
        description="auto/never: how long the claim of a finished or deleted draxr pod is left to "
        "kube-controller-manager's resourceclaim controller before draxr releases it (0: at once, racing it)",
    )
    release_foreign_grace_seconds: float = Field(
        30.0, ge=0, description="auto: how long the claim of a finished or deleted foreign pod is left to KCM"
    )
    mapping_status_seconds: float = Field(
        10.0, gt=0, description="ExtendedResourceMapping status (conditions, capacity) refreshed at least this often"
    )
    metrics_port: int = Field(8080, ge=0, description="Prometheus /metrics (0: off)")
    health_port: int = Field(8081, ge=0, description="/healthz (liveness) and /readyz (synced) (0: off)")
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
    api_compression: bool = Field(
        False,
        description="ask the API server to gzip large list responses (off, as kube-scheduler and "
        "kube-controller-manager have it: on the control plane's network gzip costs both ends CPU and saves no time)",
    )
    webhook_port: int = Field(0, ge=0, description="HTTPS port of the admission webhook (0: off; manifests/ set 9443)")
    webhook_process: bool = Field(
        False,
        description="serve the webhook from a process of its own, which the operator starts, feeds and restarts, "
        "so that admission never waits for the operator's GIL (default: a thread of the operator's process, which "
        "costs less CPU per review and measured as fast or faster on 2 cores, see bench/NOTEBOOK.md)",
    )
    webhook_namespace: str = Field(
        default_factory=lambda: os.environ.get("POD_NAMESPACE") or "draxr-system",
        description="namespace of the webhook's Service and certificate Secret (default: $POD_NAMESPACE)",
    )
    webhook_service_name: str = Field(
        "draxr-webhook", description="the Service the API server calls the webhook through"
    )
    webhook_configuration_name: str = Field(
        "draxr", description="the MutatingWebhookConfiguration whose caBundle draxr keeps current"
    )
    webhook_secret_name: str = Field("draxr-webhook-tls", description="Secret holding the webhook's CA and certificate")
    webhook_extra_hosts: str = Field(
        "",
        description="comma-separated extra DNS names or IPs for the serving certificate (e.g. for a url clientConfig)",
    )
    webhook_self_signed: bool = Field(
        True,
        description="draxr creates, rotates and trusts its own certificate; false: the Secret comes from elsewhere "
        "(the cert-manager component) and draxr only loads tls.crt/tls.key from it",
    )
    webhook_ca_validity_seconds: float = Field(5 * 365 * 86400, gt=0, description="lifetime of the self-signed CA")
    webhook_cert_validity_seconds: float = Field(90 * 86400, gt=0, description="lifetime of the serving certificate")
    webhook_rotation_grace_seconds: float = Field(
        10.0,
        ge=0,
        description="on CA rotation, wait this long after the caBundle patch before serving the new "
        "certificate (API servers pick the bundle up from a watch)",
    )
    webhook_cert_check_seconds: float = Field(
        60.0, gt=0, description="how often the Secret is checked (rotation by the leader, reload by every replica)"
    )
    adopt_unschedulable: bool = Field(
        False,
        description="also schedule default-scheduler pods that kube-scheduler marked Unschedulable and that request "
        "a mapped extended resource (kube-scheduler without DRAExtendedResource: 1.34/1.35; refused on 1.36+)",
    )
    watch_timeout_seconds: int = Field(
        300, gt=0, description="each watch request asks the server to end it after this long (then it resumes)"
    )
    watch_idle_seconds: float = Field(
        90.0, gt=0, description="a watch stream silent this long (no event, no bookmark) is re-opened"
    )
    watch_deadline_seconds: float = Field(
        180.0, gt=0, description="a watch without progress (event, bookmark, list page) this long fails liveness"
    )
    watch_streaming_list: bool = Field(
        True, description="list through the watch (sendInitialEvents) where the server offers it; else in pages"
    )
    scheduling_stall_seconds: float = Field(
        60.0, gt=0, description="liveness fails when pods are ready but the scheduling loop has not cycled this long"
    )
    scheduler_turn_seconds: float = Field(
        0.05, gt=0, description="the scheduling loop hands the event loop back after cycling this long"
    )
    liveness_exit_seconds: float = Field(
        10.0, ge=0, description="liveness failing this long ends the process (non-zero) so that it is restarted"
    )
    log_level: str = Field("info")
    log_format: str = Field("json", description="json or console")
    _loaded: LoadedConfig | None = PrivateAttr(None)

    def with_config(self) -> Settings:
        """These settings with --config read and applied (a copy; the same without one). Raises
        ConfigError when the file is refused, or names a setting that a flag also sets."""
        if not self.config:
            return self
        try:
            text = Path(self.config).read_text()
        except OSError as e:
            raise ConfigError([f"cannot read it: {e}"], self.config) from e
        loaded = load(text, self.scheduler_name, self.config)
        both = sorted(set(_FROM_CONFIG) & self.model_fields_set)
        if both:
            raise ConfigError(
                [
                    f"--{name.replace('_', '-')} (DRAXR_{name.upper()}) is set too: the file's {_FROM_CONFIG[name]} "
                    "sets it (drop one)"
                    for name in both
                ],
                self.config,
            )
        out = self.model_copy(
            update={
                "backoff_initial_seconds": float(loaded.pod_initial_backoff_seconds),
                "backoff_max_seconds": float(loaded.pod_max_backoff_seconds),
                "percentage_of_nodes_to_score": loaded.percentage_of_nodes_to_score,
                "volume_bind_timeout_seconds": float(loaded.volume_bind_timeout_seconds or 600),
            }
        )
        out._loaded = loaded
        return out

    @property
    def loaded_config(self) -> LoadedConfig | None:
        return self._loaded

    @property
    def profile(self) -> SchedulerProfile:
        """The profile draxr runs: the file's, else kube-scheduler's default."""
        return self._loaded.profile if self._loaded is not None else DEFAULT_PROFILE

    @property
    def scoring(self) -> Scoring | None:
        """None: the profile's NodeResourcesFit strategy (placement.schedule's ``scoring``)."""
        return None

    @property
    def device_scoring(self) -> Scoring | None:
        """draxr's device scoring is gone from `draxr run` (kube-scheduler's scoring only)."""
        return None

    @property
    def webhook_hosts(self) -> list[str]:
        """The serving certificate's names: the Service's DNS names, then the extra ones."""
        svc = f"{self.webhook_service_name}.{self.webhook_namespace}"
        extra = [h.strip() for h in self.webhook_extra_hosts.split(",") if h.strip()]
        return [f"{svc}.svc", f"{svc}.svc.cluster.local", svc, *extra]

    @property
    def release_policy(self) -> ReleasePolicy:
        """Whose claims are released at once, and how long the others wait (see core.gc)."""
        s = self
        return ReleasePolicy.of(
            s.scheduler_name,
            s.adopt_unschedulable,
            s.release_foreign_claims,
            s.release_foreign_grace_seconds,
            s.release_own_grace_seconds,
        )
