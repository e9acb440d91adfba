"""The single DynamoDB table: its keys, indexes and item families.

Shared by the DynamoDB adapters and the CDK stack, so that the table the stack creates is the table the
code reads. Every access is a GetItem, a Query on one partition, or a Query on a GSI: nothing scans.
"""

from __future__ import annotations

PARTITION_KEY = "pk"
SORT_KEY = "sk"
TTL_ATTRIBUTE = "expires_at"

# Sparse GSIs: only NodeClaim items carry these attributes.
INSTANCE_ID_ATTRIBUTE = "instance_id"
NODE_NAME_ATTRIBUTE = "node_name"
INSTANCE_ID_INDEX = "by-instance-id"
NODE_NAME_INDEX = "by-node-name"
GLOBAL_SECONDARY_INDEXES: dict[str, str] = {
    INSTANCE_ID_INDEX: INSTANCE_ID_ATTRIBUTE,
    NODE_NAME_INDEX: NODE_NAME_ATTRIBUTE,
}

# Item families (partition key values). A family is one partition, listed by Query.
NODECLAIM_PARTITION = "NODECLAIM"  # sk = NodeClaim name
LEASE_PARTITION = "LEASE"  # sk = lease name, e.g. "provisioner"
UNAVAILABLE_OFFERING_PARTITION = "UNAVAILABLE_OFFERING"  # sk = capacity-type#instance-type#zone
CATALOG_PARTITION = "CATALOG"  # sk = cache key; persisted instance-type catalog for cold starts
# Powertools Idempotency writes its own items with pk "idempotency#<function>" and sk the payload hash.
IDEMPOTENCY_EXPIRY_ATTRIBUTE = TTL_ATTRIBUTE


def table_definition(table_name: str) -> dict[str, object]:
    """CreateTable arguments for this schema: for the local simulator and tests (CDK builds its own)."""
    return {
        "TableName": table_name,
        "BillingMode": "PAY_PER_REQUEST",
        "KeySchema": [
            {"AttributeName": PARTITION_KEY, "KeyType": "HASH"},
            {"AttributeName": SORT_KEY, "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": [
            {"AttributeName": name, "AttributeType": "S"}
            for name in (PARTITION_KEY, SORT_KEY, INSTANCE_ID_ATTRIBUTE, NODE_NAME_ATTRIBUTE)
        ],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": index,
                "KeySchema": [{"AttributeName": attribute, "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
            for index, attribute in GLOBAL_SECONDARY_INDEXES.items()
        ],
    }
