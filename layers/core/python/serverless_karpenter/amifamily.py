"""User data per AMI family: where each family's bootstrap reads kubelet labels, taints and settings."""

from __future__ import annotations

import base64
import email
import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

MIME_BOUNDARY = "//"


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    endpoint: str
    certificate_authority: str
    service_cidr: str = "10.100.0.0/16"
    kubernetes_version: str = "1.31"


@dataclass(frozen=True)
class NodeBootstrap:
    labels: Mapping[str, str]
    taints: Sequence[Mapping[str, str]]  # registered with the node: karpenter.sh/unregistered + the pool's
    max_pods: int | None = None
    kubelet: Mapping[str, Any] = field(default_factory=dict)
    custom_user_data: str | None = None


def _labels_flag(labels: Mapping[str, str]) -> str:
    return "--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _taints_flag(taints: Sequence[Mapping[str, str]]) -> str:
    parts = []
    for t in taints:
        value = f"={t['value']}" if t.get("value") else ""
        parts.append(f"{t['key']}{value}:{t['effect']}")
    return "--register-with-taints=" + ",".join(parts)


# EC2NodeClass spec.kubelet fields nodeadm's KubeletConfiguration takes under the same names.
KUBELET_CONFIG_FIELDS = (
    "maxPods",
    "podsPerCore",
    "systemReserved",
    "kubeReserved",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMaxPodGracePeriod",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "cpuCFSQuota",
    "clusterDNS",
)


def kubelet_settings(node: NodeBootstrap) -> dict[str, Any]:
    """The node class's kubelet settings, with maxPods from the launch (the instance type's pod count)
    unless the user set it."""
    settings = {k: node.kubelet[k] for k in KUBELET_CONFIG_FIELDS if node.kubelet.get(k) is not None}
    if node.max_pods is not None and "maxPods" not in settings:
        settings["maxPods"] = node.max_pods
    return settings


def al2023_user_data(cluster: ClusterInfo, node: NodeBootstrap) -> str:
    """A nodeadm NodeConfig in MIME multipart, after the user's own parts (nodeadm merges them in order)."""
    kubelet_config = kubelet_settings(node)
    flags = [_labels_flag(node.labels)]
    if node.taints:
        flags.append(_taints_flag(node.taints))
    node_config = {
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": {
            "cluster": {
                "name": cluster.name,
                "apiServerEndpoint": cluster.endpoint,
                "certificateAuthority": cluster.certificate_authority,
                "cidr": cluster.service_cidr,
            },
            "kubelet": {"config": kubelet_config, "flags": flags},
        },
    }
    parts = user_mime_parts(node.custom_user_data) if node.custom_user_data else []
    parts.append("Content-Type: application/node.eks.aws\n\n" + yaml.safe_dump(node_config, sort_keys=False))
    return _mime(parts)


def _mime(parts: Sequence[str]) -> str:
    body = "".join(f"--{MIME_BOUNDARY}\n{part}\n" for part in parts)
    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"\n\n'
        f"{body}--{MIME_BOUNDARY}--\n"
    )


def user_mime_parts(user_data: str) -> list[str]:
    """The user's user data as MIME parts: a multipart archive is split into its parts (so they are merged
    into ours, not nested), anything else is one part typed by its content."""
    head = user_data.lstrip()[:512].lower()
    if head.startswith("mime-version") or "content-type: multipart/" in head:
        message = email.message_from_string(user_data.lstrip())
        parts = []
        for part in message.walk():
            if part.is_multipart():
                continue
            payload = part.get_payload(decode=True)
            text = payload.decode() if isinstance(payload, bytes) else str(part.get_payload())
            content_type = part.get("Content-Type") or part.get_content_type()
            parts.append(f"Content-Type: {content_type}\n\n{text}")
        return parts
    return [_as_mime_part(user_data)]


def _as_mime_part(user_data: str) -> str:
    if user_data.lstrip().startswith("apiVersion:"):
        return "Content-Type: application/node.eks.aws\n\n" + user_data
    return 'Content-Type: text/x-shellscript; charset="us-ascii"\n\n' + user_data


def _key_values(values: Mapping[str, Any], separator: str = "=") -> str:
    return ",".join(f"{k}{separator}{v}" for k, v in sorted(values.items()))


def al2_kubelet_args(node: NodeBootstrap) -> list[str]:
    """bootstrap.sh passes these to the kubelet (``--kubelet-extra-args``)."""
    settings = kubelet_settings(node)
    args = [_labels_flag(node.labels)]
    if node.taints:
        args.append(_taints_flag(node.taints))
    if "maxPods" in settings:
        args.append(f"--max-pods={settings['maxPods']}")
    if "podsPerCore" in settings:
        args.append(f"--pods-per-core={settings['podsPerCore']}")
    for name, flag in (
        ("systemReserved", "--system-reserved"),
        ("kubeReserved", "--kube-reserved"),
        ("evictionSoftGracePeriod", "--eviction-soft-grace-period"),
    ):
        if settings.get(name):
            args.append(f"{flag}={_key_values(settings[name])}")
    for name, flag in (("evictionHard", "--eviction-hard"), ("evictionSoft", "--eviction-soft")):
        if settings.get(name):
            args.append(f"{flag}={_key_values(settings[name], '<')}")
    for name, flag in (
        ("evictionMaxPodGracePeriod", "--eviction-max-pod-grace-period"),
        ("imageGCHighThresholdPercent", "--image-gc-high-threshold"),
        ("imageGCLowThresholdPercent", "--image-gc-low-threshold"),
    ):
        if settings.get(name) is not None:
            args.append(f"{flag}={settings[name]}")
    if settings.get("cpuCFSQuota") is not None:
        args.append(f"--cpu-cfs-quota={str(settings['cpuCFSQuota']).lower()}")
    return args


def al2_user_data(cluster: ClusterInfo, node: NodeBootstrap) -> str:
    settings = kubelet_settings(node)
    dns = (settings.get("clusterDNS") or [_dns_ip(cluster)])[0]
    # --use-max-pods false: bootstrap.sh would otherwise compute its own from the ENI table.
    use_max_pods = " --use-max-pods false" if "maxPods" in settings else ""
    return (
        "#!/bin/bash -xe\n"
        f"{node.custom_user_data or ''}\n"
        f"/etc/eks/bootstrap.sh '{cluster.name}' --apiserver-endpoint '{cluster.endpoint}' "
        f"--b64-cluster-ca '{cluster.certificate_authority}' --dns-cluster-ip '{dns}'{use_max_pods} "
        f"--kubelet-extra-args '{' '.join(al2_kubelet_args(node))}'\n"
    )


def bottlerocket_user_data(cluster: ClusterInfo, node: NodeBootstrap) -> str:
    """TOML settings: the user's, with the cluster, labels, taints and kubelet settings merged over them."""
    user = tomllib.loads(node.custom_user_data) if node.custom_user_data else {}
    settings = user.setdefault("settings", {})
    kubernetes = settings.setdefault("kubernetes", {})
    kubernetes.update(
        {
            "cluster-name": cluster.name,
            "api-server": cluster.endpoint,
            "cluster-certificate": cluster.certificate_authority,
        }
    )
    kubelet = kubelet_settings(node)
    if "maxPods" in kubelet:
        kubernetes["max-pods"] = int(kubelet["maxPods"])
    if "podsPerCore" in kubelet:
        kubernetes["pods-per-core"] = int(kubelet["podsPerCore"])
    if kubelet.get("clusterDNS"):
        kubernetes["cluster-dns-ip"] = kubelet["clusterDNS"][0]
    for name, key in (
        ("systemReserved", "system-reserved"),
        ("kubeReserved", "kube-reserved"),
        ("evictionHard", "eviction-hard"),
        ("evictionSoft", "eviction-soft"),
        ("evictionSoftGracePeriod", "eviction-soft-grace-period"),
    ):
        if kubelet.get(name):
            kubernetes[key] = {**kubernetes.get(key, {}), **{k: str(v) for k, v in kubelet[name].items()}}
    for name, key in (
        ("evictionMaxPodGracePeriod", "eviction-max-pod-grace-period"),
        ("imageGCHighThresholdPercent", "image-gc-high-threshold-percent"),
        ("imageGCLowThresholdPercent", "image-gc-low-threshold-percent"),
    ):
        if kubelet.get(name) is not None:
            kubernetes[key] = int(kubelet[name])
    if kubelet.get("cpuCFSQuota") is not None:
        kubernetes["cpu-cfs-quota-enforced"] = bool(kubelet["cpuCFSQuota"])
    kubernetes["node-labels"] = {**kubernetes.get("node-labels", {}), **dict(node.labels)}
    taints: dict[str, list[str]] = {k: list(v) for k, v in kubernetes.get("node-taints", {}).items()}
    for t in node.taints:
        value = f"{t.get('value', '')}:{t['effect']}"
        if value not in taints.setdefault(t["key"], []):
            taints[t["key"]].append(value)
    kubernetes["node-taints"] = taints
    return dump_toml(user)


def dump_toml(document: Mapping[str, Any]) -> str:
    """TOML for Bottlerocket's settings: nested tables of strings, numbers, booleans and lists."""
    lines: list[str] = []

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(i) for i in v) + "]"
        return json.dumps(str(v))  # a TOML basic string has JSON's escapes

    def key(k: str) -> str:
        bare = k.replace("-", "").replace("_", "").isalnum()
        return k if bare else json.dumps(k)

    def table(path: list[str], body: Mapping[str, Any]) -> None:
        scalars = {k: v for k, v in body.items() if not isinstance(v, Mapping)}
        if path and (scalars or not body):
            lines.append("[" + ".".join(key(p) for p in path) + "]")
        lines.extend(f"{key(k)} = {value(v)}" for k, v in scalars.items())
        for k, v in body.items():
            if isinstance(v, Mapping):
                table([*path, k], v)

    table([], document)
    return "\n".join(lines) + "\n"


def _dns_ip(cluster: ClusterInfo) -> str:
    prefix = cluster.service_cidr.split("/")[0].rsplit(".", 1)[0]
    return f"{prefix}.10"


def render_user_data(family: str, cluster: ClusterInfo, node: NodeBootstrap) -> str:
    match family:
        case "AL2023":
            return al2023_user_data(cluster, node)
        case "AL2":
            return al2_user_data(cluster, node)
        case "Bottlerocket":
            return bottlerocket_user_data(cluster, node)
        case "Custom":
            return node.custom_user_data or ""
    raise ValueError(f"amiFamily {family!r}: user data is not supported")


def encode(user_data: str) -> str:
    return base64.b64encode(user_data.encode()).decode()


# SSM parameter paths EKS publishes for its optimized AMIs, per family and arch.
def ssm_parameter_for_alias(family: str, version: str, kubernetes_version: str, arch: str) -> str:
    ssm_arch = {"amd64": "x86_64", "arm64": "arm64"}[arch]
    match family:
        case "al2023":
            release = (
                "recommended"
                if version == "latest"
                else f"amazon-eks-node-al2023-{ssm_arch}-standard-{kubernetes_version}-{version}"
            )
            prefix = f"/aws/service/eks/optimized-ami/{kubernetes_version}/amazon-linux-2023"
            return f"{prefix}/{ssm_arch}/standard/{release}/image_id"
        case "al2":
            suffix = "" if arch == "amd64" else "-arm64"
            release = (
                "recommended"
                if version == "latest"
                else f"amazon-eks{suffix}-node-{kubernetes_version}-{version}"
            )
            prefix = f"/aws/service/eks/optimized-ami/{kubernetes_version}/amazon-linux-2{suffix}"
            return f"{prefix}/{release}/image_id"
        case "bottlerocket":
            # Bottlerocket publishes its releases without the "v" an alias carries (v1.20.3 -> 1.20.3).
            release = "latest" if version == "latest" else version.removeprefix("v")
            return f"/aws/service/bottlerocket/aws-k8s-{kubernetes_version}/{ssm_arch}/{release}/image_id"
    raise ValueError(f"amiSelectorTerms alias family {family!r} is not supported")


# The root volume each family gets when the EC2NodeClass names none (Karpenter's defaults).
DEFAULT_BLOCK_DEVICE_MAPPINGS: dict[str, list[dict[str, Any]]] = {
    "AL2023": [
        {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi", "volumeType": "gp3", "encrypted": True}}
    ],
    "AL2": [
        {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "20Gi", "volumeType": "gp3", "encrypted": True}}
    ],
    "Bottlerocket": [
        {"deviceName": "/dev/xvda", "ebs": {"volumeSize": "4Gi", "volumeType": "gp3", "encrypted": True}},
        {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "20Gi", "volumeType": "gp3", "encrypted": True}},
    ],
}
