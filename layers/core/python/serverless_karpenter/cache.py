"""How long what we read from AWS is trusted before it is read again: every cache's TTL in one place, as
karpenter-provider-aws keeps them in ``pkg/cache/cache.go``.

Pure constants (no AWS import), so the domain (the in-memory unavailable-offerings cache) and the adapters
read the same figures. Each says why it is what it is; change one only with the reason beside it.
"""

from __future__ import annotations

from datetime import timedelta

# What subnet, security-group and AMI selectors resolve to (Karpenter's DefaultTTL): a change in EC2 (a new
# AMI behind an alias, a newly tagged subnet) is seen within a minute, and a pass that resolves every
# EC2NodeClass (the provisioner each invocation, the lifecycle reconcile again) costs no API calls between.
RESOLUTION_TTL = timedelta(minutes=1)

# An offering CreateFleet found without capacity is skipped this long (Karpenter's UnavailableOfferingsTTL).
UNAVAILABLE_OFFERINGS_TTL = timedelta(minutes=3)
# How often an invocation re-reads the shared unavailable-offerings partition from DynamoDB: one Query per
# invocation, while a long-running poller still sees other writers' marks within seconds.
UNAVAILABLE_OFFERINGS_REFRESH = timedelta(seconds=10)

# Instance types and their offerings from DescribeInstanceTypes(/Offerings) (Karpenter's
# InstanceTypesZonesAndOfferingsTTL).
INSTANCE_TYPES_TTL = timedelta(minutes=5)
# A catalog persisted in the state table is used at a cold start if younger than this; older, EC2 is asked.
PERSISTED_CATALOG_MAX_AGE = timedelta(hours=6)

# On-demand prices from the Pricing API, spot prices from DescribeSpotPriceHistory: refreshed twice a day
# (Karpenter's pricing controller), retried sooner after a failure, and much later when the Pricing API
# cannot even be reached (a VPC without NAT: each try would cost connect timeouts).
PRICES_TTL = timedelta(hours=12)
PRICES_RETRY = timedelta(minutes=5)
PRICES_UNREACHABLE_RETRY = timedelta(hours=1)

# The subnet and security groups of running instances, read for drift by network: a user changes them
# rarely (ModifyInstanceAttribute), so they are described again every 5 minutes, not every disruption pass:
# Karpenter's NodeClaim drift check requeues every 5 minutes too (nodeclaim/disruption/drift.go). At 1,000
# nodes a DescribeInstances of every one took 2.6 s; a change to the EC2NodeClass is still seen at once.
INSTANCE_NETWORK_TTL = timedelta(minutes=5)
