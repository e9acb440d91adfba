"""What IAM authorizes for one API request: the actions, the resources they act on, the condition context.

AWS does not authorize "the request"; it authorizes each (action, resource) pair the request implies, with
that resource's condition context, and refuses the request if any pair is denied. Most requests imply one
pair (``dynamodb:PutItem`` on the table). Some imply several, with different actions:

- ``ec2:CreateFleet`` and ``ec2:RunInstances`` are authorized on every resource the launch creates
  (fleet, instance, volume, network interface: their ``aws:RequestTag/*`` are the tags the request, or the
  launch template, puts on that type) and every one it uses (launch template with its tags, subnets,
  security groups, image); tagging on create is ``ec2:CreateTags`` with ``ec2:CreateAction``; the instance
  profile's role is passed to EC2 (``iam:PassRole`` with ``iam:PassedToService``);
- ``ec2:CreateLaunchTemplate`` likewise tags on create;
- SQS's batch calls are authorized as their single-message action, DynamoDB's batch calls as the item
  action on each table they name.

Resource ARNs follow the Service Authorization Reference; an action EC2 grants on ``*`` only (its
``Describe*``) is evaluated on ``*``, and so is any action this module does not model, so that a policy
naming its resources does not silently allow it. The moto backends are read for what an existing resource
is tagged with (``aws:ResourceTag/*``, ``ec2:ResourceTag/*``) and for the role inside an instance profile.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

# EC2 resource types by the prefix of their ids.
_EC2_ID_TYPES = {
    "i": "instance",
    "lt": "launch-template",
    "vol": "volume",
    "sg": "security-group",
    "subnet": "subnet",
    "eni": "network-interface",
    "ami": "image",
    "snap": "snapshot",
    "fleet": "fleet",
    "sir": "spot-instances-request",
    "vpc": "vpc",
}
# What a launch creates; CreateFleet adds the fleet itself.
_LAUNCH_CREATED_TYPES = ("instance", "volume", "network-interface")
EC2_SERVICE_PRINCIPAL = "ec2.amazonaws.com"
# Batch calls authorized as their single-item action.
_SQS_BATCH_ACTIONS = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}
_DYNAMODB_BATCH_ACTIONS = {"BatchGetItem": "BatchGetItem", "BatchWriteItem": "BatchWriteItem"}
_DYNAMODB_TRANSACTION_ITEM_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}
# Calls that need no permission at all.
_UNAUTHORIZED_ACTIONS = frozenset({"sts:GetCallerIdentity"})


@dataclass(frozen=True)
class Authorization:
    """One (action, resource) pair with its condition context (keys lower case, as the evaluator reads)."""

    action: str
    resource: str
    context: Mapping[str, Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """A request as moto parsed it."""

    service: str  # moto's name of the service ("ec2", "dynamodb", ...), also IAM's prefix for ours
    operation: str  # "CreateFleet"
    params: Mapping[str, Any]
    region: str
    account: str
    partition: str = "aws"

    def arn(
        self, service: str, resource: str, *, region: str | None = None, account: str | None = None
    ) -> str:
        region = self.region if region is None else region
        account = self.account if account is None else account
        return f"arn:{self.partition}:{service}:{region}:{account}:{resource}"


def _tags(tags: Iterable[Mapping[str, Any]] | None) -> dict[str, str]:
    return {str(t.get("Key")): str(t.get("Value", "")) for t in tags or []}


def request_tag_context(tags: Mapping[str, str]) -> dict[str, list[str]]:
    context = {f"aws:requesttag/{k}".lower(): [v] for k, v in tags.items()}
    if tags:
        context["aws:tagkeys"] = list(tags)
    return context


def resource_tag_context(tags: Mapping[str, str], service: str) -> dict[str, list[str]]:
    context = {f"aws:resourcetag/{k}".lower(): [v] for k, v in tags.items()}
    if service == "ec2":
        context.update({f"ec2:resourcetag/{k}".lower(): [v] for k, v in tags.items()})
    return context


def authorizations(call: Call) -> list[Authorization]:
    """Every pair IAM must allow for ``call``; none for a call that needs no permission."""
    action = f"{call.service}:{call.operation}"
    if action in _UNAUTHORIZED_ACTIONS:
        return []
    base = {"aws:requestedregion": [call.region]}
    handler = _HANDLERS.get(call.service)
    pairs = handler(call) if handler else [Authorization(action, "*")]
    return [Authorization(p.action, p.resource, {**base, **p.context}) for p in pairs]


# -- EC2 -------------------------------------------------------------------------------------------------


def _ec2_backend(call: Call) -> Any:
    from moto.ec2.models import ec2_backends

    return ec2_backends[call.account][call.region]


def _ec2_arn(call: Call, resource_type: str, resource_id: str = "*") -> str:
    # Images and snapshots can be another account's (public AMIs): their ARNs carry no account.
    account = "" if resource_type in ("image", "snapshot") else None
    return call.arn("ec2", f"{resource_type}/{resource_id}", account=account)


def _ec2_existing(call: Call, action: str, resource_id: str) -> Authorization:
    resource_type = _EC2_ID_TYPES.get(resource_id.split("-", 1)[0], "")
    if not resource_type:
        return Authorization(action, "*")
    tags = dict(_ec2_backend(call).tags.get(resource_id, {}))
    return Authorization(
        action, _ec2_arn(call, resource_type, resource_id), resource_tag_context(tags, "ec2")
    )


def _tag_specifications(specifications: Iterable[Mapping[str, Any]] | None) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for spec in specifications or []:
        out.setdefault(str(spec.get("ResourceType")), {}).update(_tags(spec.get("Tags")))
    return out


def _launch_template(call: Call, spec: Mapping[str, Any]) -> Any | None:
    backend = _ec2_backend(call)
    template_id = spec.get("LaunchTemplateId") or backend.launch_template_name_to_ids.get(
        spec.get("LaunchTemplateName") or ""
    )
    return backend.launch_templates.get(template_id) if template_id else None


def _template_data(template: Any, version: str | None) -> Mapping[str, Any]:
    if version in (None, "", "$Default"):
        chosen = template.default_version()
    elif version == "$Latest":
        chosen = template.latest_version()
    else:
        chosen = template.get_version(version)
    return dict(chosen.data or {})


def _profile_roles(call: Call, profile: Mapping[str, Any] | None) -> list[str]:
    """The ARNs of the roles in the instance profile a launch names (by name or ARN)."""
    if not profile:
        return []
    from moto.iam.models import iam_backends

    backend = iam_backends[call.account][call.partition]
    name = profile.get("Name") or str(profile.get("Arn") or "").rsplit("/", 1)[-1]
    for candidate in backend.get_instance_profiles():
        if candidate.name == name:
            return [role.arn for role in candidate.roles]
    return []


def _launch(
    call: Call, create_action: str, configs: Sequence[tuple[Any, Mapping[str, Any]]]
) -> list[Authorization]:
    """RunInstances / CreateFleet: ``configs`` are (launch template or None, the launch's own parameters)."""
    pairs: list[Authorization] = []
    run = "ec2:RunInstances"
    request_tags: dict[str, dict[str, str]] = {}
    subnets: set[str] = set()
    groups: set[str] = set()
    images: set[str] = set()
    profiles: list[Mapping[str, Any]] = []
    for template, launch in configs:
        data: Mapping[str, Any] = {}
        if template is not None:
            data = _template_data(template, launch.get("Version"))
            tags = dict(_ec2_backend(call).tags.get(template.id, {}))
            arn = _ec2_arn(call, "launch-template", template.id)
            context = resource_tag_context(tags, "ec2")
            pairs.append(Authorization(f"ec2:{create_action}", arn, context))
            if create_action != "RunInstances":
                pairs.append(Authorization(run, arn, context))
        for resource_type, tags in _tag_specifications(data.get("TagSpecifications")).items():
            request_tags.setdefault(resource_type, {}).update(tags)
        interfaces = list(data.get("NetworkInterfaces") or []) + list(launch.get("NetworkInterfaces") or [])
        groups.update(data.get("SecurityGroupIds") or [])
        groups.update(launch.get("SecurityGroupIds") or [])
        for interface in interfaces:
            groups.update(interface.get("Groups") or [])
            if interface.get("SubnetId"):
                subnets.add(str(interface["SubnetId"]))
        for override in launch.get("Overrides") or [{}]:
            subnet = override.get("SubnetId") or launch.get("SubnetId") or data.get("SubnetId")
            if subnet:
                subnets.add(str(subnet))
            image = override.get("ImageId") or launch.get("ImageId") or data.get("ImageId")
            if image:
                images.add(str(image))
        profile = launch.get("IamInstanceProfile") or data.get("IamInstanceProfile")
        if profile:
            profiles.append(profile)
    for resource_type, tags in _tag_specifications(call.params.get("TagSpecifications")).items():
        request_tags.setdefault(resource_type, {}).update(tags)

    created = list(_LAUNCH_CREATED_TYPES)
    if create_action == "CreateFleet":
        pairs.append(
            Authorization(
                "ec2:CreateFleet", _ec2_arn(call, "fleet"), request_tag_context(request_tags.get("fleet", {}))
            )
        )
    for resource_type in created:
        context = request_tag_context(request_tags.get(resource_type, {}))
        pairs.append(Authorization(run, _ec2_arn(call, resource_type), context))
        if create_action == "CreateFleet":
            pairs.append(Authorization("ec2:CreateFleet", _ec2_arn(call, resource_type), context))
    for resource_id in sorted(subnets | groups | images):
        existing = _ec2_existing(call, run, resource_id)
        pairs.append(existing)
        if create_action == "CreateFleet":
            pairs.append(Authorization("ec2:CreateFleet", existing.resource, existing.context))
    for resource_type, tags in sorted(request_tags.items()):
        fleet = resource_type == "fleet" and create_action == "CreateFleet"
        if tags and (resource_type in created or fleet):
            context = {**request_tag_context(tags), "ec2:createaction": [create_action]}
            pairs.append(Authorization("ec2:CreateTags", _ec2_arn(call, resource_type), context))
    for profile in profiles:
        for role in _profile_roles(call, profile):
            pairs.append(
                Authorization("iam:PassRole", role, {"iam:passedtoservice": [EC2_SERVICE_PRINCIPAL]})
            )
    return pairs


def _ec2(call: Call) -> list[Authorization]:
    operation, params = call.operation, call.params
    action = f"ec2:{operation}"
    if operation == "CreateFleet":
        configs = [
            (
                _launch_template(call, c.get("LaunchTemplateSpecification") or {}),
                {
                    **(c.get("LaunchTemplateSpecification") or {}),
                    "Overrides": c.get("Overrides") or [],
                },
            )
            for c in params.get("LaunchTemplateConfigs") or []
        ]
        return _launch(call, "CreateFleet", configs)
    if operation == "RunInstances":
        spec = params.get("LaunchTemplate") or {}
        template = _launch_template(call, spec) if spec else None
        return _launch(call, "RunInstances", [(template, {**params, "Version": spec.get("Version")})])
    if operation == "CreateLaunchTemplate":
        tags = _tag_specifications(params.get("TagSpecifications")).get("launch-template", {})
        arn = _ec2_arn(call, "launch-template")
        pairs = [Authorization(action, arn, request_tag_context(tags))]
        if tags:
            context = {**request_tag_context(tags), "ec2:createaction": ["CreateLaunchTemplate"]}
            pairs.append(Authorization("ec2:CreateTags", arn, context))
        return pairs
    if operation in ("DeleteLaunchTemplate", "CreateLaunchTemplateVersion", "ModifyLaunchTemplate"):
        template = _launch_template(call, params)
        if template is None:
            return [Authorization(action, _ec2_arn(call, "launch-template"))]
        return [_ec2_existing(call, action, template.id)]
    if operation in ("CreateTags", "DeleteTags"):
        request = request_tag_context(_tags(params.get("Tags")))
        return [
            Authorization(p.action, p.resource, {**p.context, **request})
            for p in (_ec2_existing(call, action, str(r)) for r in params.get("Resources") or [])
        ]
    if params.get("InstanceIds") and not operation.startswith("Describe"):
        return [_ec2_existing(call, action, str(i)) for i in params["InstanceIds"]]
    # Describe* and what is not modelled: EC2 grants them on "*" only.
    return [Authorization(action, "*")]


# -- IAM -------------------------------------------------------------------------------------------------

_INSTANCE_PROFILE_OPERATIONS = frozenset(
    {
        "GetInstanceProfile",
        "CreateInstanceProfile",
        "DeleteInstanceProfile",
        "AddRoleToInstanceProfile",
        "RemoveRoleFromInstanceProfile",
        "TagInstanceProfile",
        "UntagInstanceProfile",
        "ListInstanceProfileTags",
    }
)


def _iam(call: Call) -> list[Authorization]:
    from moto.iam.models import iam_backends

    operation, params = call.operation, call.params
    action = f"iam:{operation}"
    backend = iam_backends[call.account][call.partition]
    if operation in _INSTANCE_PROFILE_OPERATIONS:
        name = str(params.get("InstanceProfileName") or "")
        profile = next((p for p in backend.get_instance_profiles() if p.name == name), None)
        path = profile.path if profile is not None else str(params.get("Path") or "/")
        arn = call.arn("iam", f"instance-profile{path}{name}", region="")
        context: dict[str, list[str]] = {}
        if profile is not None:
            context.update(resource_tag_context(_tags(profile.tags), "iam"))
        if operation in ("CreateInstanceProfile", "TagInstanceProfile"):
            context.update(request_tag_context(_tags(params.get("Tags"))))
        if operation == "UntagInstanceProfile":
            context["aws:tagkeys"] = [str(k) for k in params.get("TagKeys") or []]
        return [Authorization(action, arn, context)]
    if params.get("RoleName"):
        return [Authorization(action, call.arn("iam", f"role/{params['RoleName']}", region=""))]
    return [Authorization(action, "*")]


# -- the JSON services -----------------------------------------------------------------------------------


def _dynamodb(call: Call) -> list[Authorization]:
    operation, params = call.operation, call.params

    def table(name: str, index: str | None = None) -> str:
        return call.arn("dynamodb", f"table/{name}" + (f"/index/{index}" if index else ""))

    if operation in _DYNAMODB_BATCH_ACTIONS:
        return [Authorization(f"dynamodb:{operation}", table(t)) for t in params.get("RequestItems") or {}]
    if operation in ("TransactWriteItems", "TransactGetItems"):
        pairs = []
        for item in params.get("TransactItems") or []:
            for kind, body in item.items():
                pairs.append(
                    Authorization(
                        f"dynamodb:{_DYNAMODB_TRANSACTION_ITEM_ACTIONS[kind]}", table(body["TableName"])
                    )
                )
        return pairs
    if params.get("TableName"):
        return [Authorization(f"dynamodb:{operation}", table(params["TableName"], params.get("IndexName")))]
    return [Authorization(f"dynamodb:{operation}", "*")]


def _sqs(call: Call) -> list[Authorization]:
    operation, params = call.operation, call.params
    action = f"sqs:{_SQS_BATCH_ACTIONS.get(operation, operation)}"
    if params.get("QueueUrl"):
        parts = urlparse(str(params["QueueUrl"])).path.strip("/").split("/")
        account, name = (parts[-2], parts[-1]) if len(parts) >= 2 else (call.account, parts[-1])
        return [Authorization(action, call.arn("sqs", name, account=account))]
    if params.get("QueueName"):
        account = str(params.get("QueueOwnerAWSAccountId") or call.account)
        return [Authorization(action, call.arn("sqs", str(params["QueueName"]), account=account))]
    return [Authorization(action, "*")]


def _ssm(call: Call) -> list[Authorization]:
    operation, params = call.operation, call.params
    names = [params["Name"]] if params.get("Name") else list(params.get("Names") or [])
    if not names:
        return [Authorization(f"ssm:{operation}", "*")]
    out = []
    for name in names:
        path = str(name).lstrip("/")
        # AWS's public parameters (/aws/service/...) are owned by no account of ours.
        account = "" if path.startswith("aws/") else None
        out.append(Authorization(f"ssm:{operation}", call.arn("ssm", f"parameter/{path}", account=account)))
    return out


def _eks(call: Call) -> list[Authorization]:
    name = call.params.get("name") or call.params.get("clusterName")
    resource = call.arn("eks", f"cluster/{name}") if name else "*"
    return [Authorization(f"eks:{call.operation}", resource)]


def _lambda(call: Call) -> list[Authorization]:
    name = str(call.params.get("FunctionName") or "")
    if not name:
        return [Authorization(f"lambda:{call.operation}", "*")]
    arn = name if name.startswith("arn:") else call.arn("lambda", f"function:{name}")
    return [Authorization(f"lambda:{call.operation}", arn)]


_HANDLERS = {
    "ec2": _ec2,
    "iam": _iam,
    "dynamodb": _dynamodb,
    "sqs": _sqs,
    "ssm": _ssm,
    "eks": _eks,
    "lambda": _lambda,
}
