"""Scenario steps that act on the world as its operators and AWS do, outside our control plane:

- ``ec2: {instance, action}`` stops, starts or terminates an instance (``stop``, ``start``,
  ``terminate``) with the simulator's own EC2 client, and sends the EC2 Instance State-change
  Notifications EventBridge would (``stopping`` then ``stopped``; ``shutting-down`` then ``terminated``;
  ``pending`` then ``running``): moto changes the state but emits no event;
- ``patch: {kind, name, namespace?, patch}`` merge-patches an object in the cluster, as ``kubectl patch
  --type merge`` does;
- ``ami: {alias, arch?, image?}`` publishes a new AMI for an EC2NodeClass alias (``al2023@latest``),
  as EKS does when it releases one: ``image``, or another Amazon image of that architecture.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from serverless_karpenter import amifamily
from serverless_karpenter.interruption.rules import MessageKind

from serverless_karpenter_sim.cloud import ACCOUNT, KUBERNETES_VERSION
from serverless_karpenter_sim.cluster.objects import KubeRest
from serverless_karpenter_sim.kubeapi.kinds import KINDS, Kind

if TYPE_CHECKING:
    from serverless_karpenter_sim.simulation import Simulation

EC2_ACTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "stop": ("stop_instances", ("stopping", "stopped")),
    "start": ("start_instances", ("pending", "running")),
    "terminate": ("terminate_instances", ("shutting-down", "terminated")),
}
_EC2_ARCHITECTURES = {"amd64": "x86_64", "arm64": "arm64"}


class StepError(ValueError):
    """A step that cannot run; the message names the step and what is wrong with it."""


def ec2_action(sim: Simulation, spec: dict[str, Any]) -> str:
    instance_id = str(spec.get("instance") or "")
    action = str(spec.get("action") or "")
    if not instance_id or action not in EC2_ACTIONS:
        raise StepError(f"ec2 step {spec!r}: needs instance and action, one of {', '.join(EC2_ACTIONS)}")
    operation, states = EC2_ACTIONS[action]
    getattr(sim.ec2, operation)(InstanceIds=[instance_id])
    for state in states:
        sim.put_event(
            {
                "source": "aws.ec2",
                "detail-type": MessageKind.STATE_CHANGE.value,
                "detail": {"instance-id": instance_id, "state": state},
                "resources": [f"arn:aws:ec2:{sim.cloud.region}:{ACCOUNT}:instance/{instance_id}"],
            }
        )
    return f"ec2 {action} {instance_id}"


def _kind_named(name: str, api_version: str | None) -> Kind:
    for kind in KINDS:
        if kind.kind == name and kind.storage_of is None and api_version in (None, kind.api_version):
            return kind
    raise StepError(f"patch step: no kind {name!r}" + (f" in {api_version}" if api_version else ""))


def object_path(kind: Kind, name: str, namespace: str | None) -> str:
    root = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    scope = f"/namespaces/{namespace or 'default'}" if kind.namespaced else ""
    return f"{root}{scope}/{kind.plural}/{name}"


def patch_object(sim: Simulation, spec: dict[str, Any]) -> str:
    body = spec.get("patch")
    if not spec.get("kind") or not spec.get("name") or not isinstance(body, dict):
        raise StepError(f"patch step {spec!r}: needs kind, name and patch (a merge patch, a mapping)")
    kind = _kind_named(str(spec["kind"]), spec.get("apiVersion"))
    path = object_path(kind, str(spec["name"]), spec.get("namespace"))
    if KubeRest(sim.api_client).patch(path, body) is None:
        raise StepError(f"patch step: {kind.kind} {spec['name']} not found")
    return f"patched {kind.kind} {spec['name']}"


def publish_ami(sim: Simulation, spec: dict[str, Any]) -> str:
    alias = str(spec.get("alias") or "")
    family, _, version = alias.partition("@")
    if not family or not version:
        raise StepError(f"ami step {spec!r}: needs alias, like al2023@latest")
    arches = [str(spec["arch"])] if spec.get("arch") else list(_EC2_ARCHITECTURES)
    published = []
    for arch in arches:
        if arch not in _EC2_ARCHITECTURES:
            raise StepError(f"ami step {spec!r}: arch must be one of {', '.join(_EC2_ARCHITECTURES)}")
        parameter = amifamily.ssm_parameter_for_alias(family, version, KUBERNETES_VERSION, arch)
        current = sim.cloud.client("ssm").get_parameter(Name=parameter)["Parameter"]["Value"]
        image = str(spec.get("image") or _another_image(sim, _EC2_ARCHITECTURES[arch], current))
        sim.cloud.publish_public_parameter(parameter, image)
        published.append(f"{arch} {image}")
    return f"published a new AMI for {alias}: {', '.join(published)}"


def _another_image(sim: Simulation, architecture: str, current: str) -> str:
    images = sim.ec2.describe_images(Owners=["amazon"])["Images"]
    for image in sorted(images, key=lambda i: str(i["ImageId"])):
        if image.get("Architecture") == architecture and image["ImageId"] != current:
            return str(image["ImageId"])
    raise StepError(f"ami step: no other Amazon image for {architecture}")
