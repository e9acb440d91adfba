"""Constants of the synthesized test app and helpers to walk CloudFormation templates."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

CLUSTERS = ("demo", "staging_2")
ALARM_EMAIL = "oncall@example.com"
PROVISIONER_MEMORY_MB = 2048
CONTEXT: dict[str, object] = {
    "clusterNames": ",".join(CLUSTERS),
    "alarmEmail": ALARM_EMAIL,
    "provisionerMemoryMb": str(PROVISIONER_MEMORY_MB),
}


def resources_of_type(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {name: res for name, res in template["Resources"].items() if res["Type"] == resource_type}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def policy_documents(template: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(logical id, kind, document) for every policy document in the template: identity policies,
    role inline and trust policies, and resource policies (queues, topics, keys)."""
    for logical_id, resource in template["Resources"].items():
        properties = resource.get("Properties", {})
        kind = resource["Type"]
        if kind == "AWS::IAM::Policy":
            yield logical_id, "identity", properties["PolicyDocument"]
        elif kind == "AWS::IAM::Role":
            yield logical_id, "trust", properties["AssumeRolePolicyDocument"]
            for inline in properties.get("Policies", []):
                yield logical_id, "identity", inline["PolicyDocument"]
        elif kind in ("AWS::SQS::QueuePolicy", "AWS::SNS::TopicPolicy"):
            yield logical_id, "resource", properties["PolicyDocument"]
        elif kind == "AWS::KMS::Key":
            yield logical_id, "resource", properties["KeyPolicy"]


def statements(template: dict[str, Any], kind: str | None = None) -> list[tuple[str, dict[str, Any]]]:
    """Every policy statement of the template (of one ``kind``: identity, trust, resource), never none: a
    security check that loops over no statement would pass whatever the stack grants."""
    found = [
        (logical_id, statement)
        for logical_id, document_kind, document in policy_documents(template)
        if kind is None or document_kind == kind
        for statement in document["Statement"]
    ]
    assert found, f"the template has no {kind or ''} policy statement: the check would test nothing"
    return found


def render(value: Any) -> str:
    """A CloudFormation value as a readable string: Refs and GetAtts become <Name> / <Name.Attr>."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return "<{}.{}>".format(*value["Fn::GetAtt"])
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(render(part) for part in parts)
    return repr(value)


def role_of_function(template: dict[str, Any], function_logical_id: str) -> str:
    role = template["Resources"][function_logical_id]["Properties"]["Role"]
    return str(role["Fn::GetAtt"][0])


def identity_statements_of_role(template: dict[str, Any], role_logical_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for resource in resources_of_type(template, "AWS::IAM::Policy").values():
        roles = [r["Ref"] for r in resource["Properties"].get("Roles", [])]
        if role_logical_id in roles:
            found.extend(resource["Properties"]["PolicyDocument"]["Statement"])
    assert found, f"role {role_logical_id} has no identity policy statement: the check would test nothing"
    return found
