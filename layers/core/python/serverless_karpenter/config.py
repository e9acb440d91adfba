"""Runtime settings, read from the environment the CDK stack gives each Lambda."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ModelWrapValidatorHandler, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob has the name of its environment variable; the stack sets them (infra/functions.py)."""

    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore")

    cluster_name: str = Field(description="EKS cluster name (CLUSTER_NAME)")
    aws_region: str = Field(default="us-east-1", description="AWS_REGION, set by Lambda")
    # Set by Lambda: names this invocation's sandbox in the lease holders ("local" elsewhere).
    aws_lambda_log_stream_name: str = "local"
    # An emulated AWS (the local simulation's moto) that the AWS SDK reaches through this endpoint.
    aws_endpoint_url: str | None = None
    state_table_name: str = Field(default="", description="DynamoDB table for NodeClaims and leases")
    interruption_queue_url: str = Field(default="", description="SQS interruption queue URL")
    interruption_dlq_url: str = Field(
        default="", description="where malformed messages go, with their reason"
    )
    provisioner_function_name: str = Field(default="", description="what the watcher invokes")
    node_role_name: str = Field(default="", description="IAM role of the nodes (for access checks)")
    interruption_rebalance: Literal["event", "replace"] = Field(
        default="event",
        description="rebalance recommendations: post an event, or replace the node before draining",
    )
    # Termination work (issue 6): while drains are under way the termination function re-queues itself
    # with a message delayed this long; without a queue the schedule alone resumes them.
    termination_queue_url: str = Field(default="", description="SQS termination-work queue URL")
    termination_requeue_seconds: int = Field(default=5, ge=0, le=900)
    # rebalance: replace holds evictions until the replacement is initialized, at most this long.
    rebalance_replace_timeout_seconds: int = Field(default=600, ge=0)
    # Where to reach the API server, when not the endpoint DescribeCluster returns (a private proxy,
    # or the local simulator).
    kubernetes_api_url: str | None = None
    kubernetes_verify_tls: bool = True
    # Every API request's connect and read timeouts: a Lambda fails a call to a stuck API server, and
    # retries on its next invocation, rather than hang until Lambda kills it mid-step.
    kubernetes_connect_timeout_seconds: float = Field(default=5.0, gt=0)
    kubernetes_read_timeout_seconds: float = Field(default=30.0, gt=0)

    # Batching of pending pods, as Karpenter's batchIdleDuration / batchMaxDuration.
    batch_idle_seconds: float = 1.0
    batch_max_seconds: float = 10.0
    # How long one watcher invocation watches the pending pods; the schedule starts one every minute.
    # While pods are pending, its loop wakes the batcher every watcher_poll_interval_seconds.
    watcher_poll_seconds: float = 55.0
    watcher_poll_interval_seconds: float = 1.0

    # Lifecycle timeouts (docs/architecture.md §2).
    launch_timeout_seconds: int = 300
    registration_timeout_seconds: int = 900
    garbage_collection_grace_seconds: int = 300
    # How often unused launch templates are looked for (and how old one must be to go).
    launch_template_sweep_seconds: int = 300

    # How long one disruption invocation keeps evaluating (the schedule starts one every minute), and
    # Karpenter's polling period between passes when nothing falls due sooner.
    disruption_loop_seconds: float = Field(default=50.0, ge=0, le=240)
    disruption_poll_interval_seconds: float = Field(default=10.0, gt=0)

    # Disruption. Karpenter's feature gate SpotToSpotConsolidation, off as there.
    spot_to_spot_consolidation: bool = False
    # Beyond Karpenter, off by default: a replacement must save this much (Karpenter: strictly cheaper),
    # and emptiness and consolidation leave nodes younger than this alone (Karpenter: consolidateAfter).
    min_savings_percent: float = Field(default=0.0, ge=0, lt=100)
    min_node_age_seconds: int = Field(default=0, ge=0)
    # Off by default: replacing a node by its own instance type and capacity type is churn.
    same_type_replacement: bool = False

    @property
    def kubernetes_timeouts(self) -> tuple[float, float]:
        """(connect, read) seconds for one Kubernetes API request."""
        return (self.kubernetes_connect_timeout_seconds, self.kubernetes_read_timeout_seconds)

    @model_validator(mode="wrap")
    @classmethod
    def _name_the_variables(cls, data: Any, handler: ModelWrapValidatorHandler[Settings]) -> Settings:
        """A bad value is reported by the environment variable that holds it, which is what the user set
        (pydantic names the field)."""
        try:
            return handler(data)
        except ValidationError as error:
            problems = []
            for item in error.errors():
                name = "_".join(str(part) for part in item["loc"]).upper() or "settings"
                value = f"={item['input']!r}" if not isinstance(item["input"], dict) else ""
                problems.append(f"{name}{value}: {item['msg']}")
            raise ValueError("invalid settings: " + "; ".join(problems)) from None


def load_settings() -> Settings:
    # cluster_name comes from the environment (CLUSTER_NAME).
    return Settings()
