"""The single DynamoDB table, built from the same schema constants the DynamoDB adapter reads."""

from __future__ import annotations

# mypy does not resolve `from serverless_karpenter import state_schema` through the editable install.
import serverless_karpenter.state_schema as state_schema  # noqa: PLR0402
from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct


class StateTable(Construct):
    """NodeClaims, the provisioner lease, the unavailable-offerings cache and idempotency records."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.table = dynamodb.Table(
            self,
            "Table",
            partition_key=dynamodb.Attribute(
                name=state_schema.PARTITION_KEY, type=dynamodb.AttributeType.STRING
            ),
            sort_key=dynamodb.Attribute(name=state_schema.SORT_KEY, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute=state_schema.TTL_ATTRIBUTE,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            # AWS-managed KMS key: explicit in the template and auditable in CloudTrail, at no key cost.
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            # NodeClaim records map to running instances; deleting the stack must not lose them.
            removal_policy=RemovalPolicy.RETAIN,
        )
        for index_name, attribute in state_schema.GLOBAL_SECONDARY_INDEXES.items():
            self.table.add_global_secondary_index(
                index_name=index_name,
                partition_key=dynamodb.Attribute(name=attribute, type=dynamodb.AttributeType.STRING),
                projection_type=dynamodb.ProjectionType.ALL,
            )
