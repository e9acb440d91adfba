"""The instance provider's answer carries what drift by network compares: the subnet and security groups
(the disruption pass is given this provider instead of building its own EC2 client)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber
from serverless_karpenter import amifamily
from serverless_karpenter.adapters.providers.errors import CloudError
from serverless_karpenter.adapters.providers.fleet import FleetLauncher

CLUSTER = amifamily.ClusterInfo("c1", "https://example.invalid", "")


def _raw(instance_id: str) -> dict[str, Any]:
    return {
        "InstanceId": instance_id,
        "InstanceType": "m5.large",
        "Placement": {"AvailabilityZone": "us-east-1a"},
        "State": {"Name": "running", "Code": 16},
        "LaunchTime": datetime(2026, 1, 1, tzinfo=UTC),
        "SubnetId": "subnet-1",
        "SecurityGroups": [{"GroupId": "sg-2", "GroupName": "b"}, {"GroupId": "sg-1", "GroupName": "a"}],
        "InstanceLifecycle": "spot",
    }


def test_described_instances_carry_their_subnet_and_security_groups() -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    launcher = FleetLauncher(ec2, "c1", CLUSTER)
    with Stubber(ec2) as stubber:
        stubber.add_response(
            "describe_instances",
            {"Reservations": [{"Instances": [_raw("i-0000000000000000a")]}]},
            {"InstanceIds": ["i-0000000000000000a"]},
        )
        (instance,) = launcher.describe_many(["i-0000000000000000a"])
        assert (instance.subnet_id, instance.security_group_ids) == ("subnet-1", frozenset({"sg-1", "sg-2"}))
        assert (instance.capacity_type, instance.provider_id) == (
            "spot",
            "aws:///us-east-1a/i-0000000000000000a",
        )
        stubber.add_client_error("describe_instances", service_error_code="InvalidInstanceID.NotFound")
        with pytest.raises(CloudError) as raised:
            launcher.describe_many(["i-0000000000000000b"])
    assert raised.value.code == "InvalidInstanceID.NotFound" and raised.value.not_found
