"""User data per AMI family: where each family's bootstrap reads kubelet labels, taints and settings."""

from __future__ import annotations

import base64
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


def al2023_user_data(cluster: ClusterInfo, node: NodeBootstrap) -> str:
    """A nodeadm NodeConfig in MIME multipart, after the user's own parts (nodeadm merges them in order)."""
    kubelet_config: dict[str, Any] = dict(node.kubelet)
    if node.max_pods is not None:
        kubelet_config["maxPods"] = node.max_pods
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
    parts = []
    if node.custom_user_data:
        parts.append(_as_mime_part(node.custom_user_data))
    parts.append("Content-Type: application/node.eks.aws\n\n" + yaml.safe_dump(node_config, sort_keys=False))
    body = "".join(f"--{MIME_BOUNDARY}\n{part}\n" for part in parts)
    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{MIME_BOUNDARY}"\n\n'
        f"{body}--{MIME_BOUNDARY}--\n"
    )


def _as_mime_part(user_data: str) -> str:
    if user_data.lstrip().startswith("apiVersion:"):
        return "Content-Type: application/node.eks.aws\n\n" + user_data
    return 'Content-Type: text/x-shellscript; charset="us-ascii"\n\n' + user_data


def al2_user_data(cluster: ClusterInfo, node: NodeBootstrap) -> str:
    extra = [_labels_flag(node.labels)]
    if node.taints:
        extra.append(_taints_flag(node.taints))
    max_pods = (
        f" --use-max-pods false --kubelet-extra-args '--max-pods={node.max_pods} "
        if node.max_pods
        else " --kubelet-extra-args '"
    )
    script = (
        "#!/bin/bash -xe\n"
        f"{node.custom_user_data or ''}\n"
        f"/etc/eks/bootstrap.sh '{cluster.name}' --apiserver-endpoint '{cluster.endpoint}' "
        f"--b64-cluster-ca '{cluster.certificate_authority}' --dns-cluster-ip '{_dns_ip(cluster)}'"
        f"{max_pods}{' '.join(extra)}'\n"
    )
    return script


def bottlerocket_user_data(cluster: ClusterInfo, node: NodeBootstrap) -> str:
    lines = [
        "[settings.kubernetes]",
        f'cluster-name = "{cluster.name}"',
        f'api-server = "{cluster.endpoint}"',
        f'cluster-certificate = "{cluster.certificate_authority}"',
    ]
    if node.max_pods is not None:
        lines.append(f"max-pods = {node.max_pods}")
    lines.append("[settings.kubernetes.node-labels]")
    lines += [f'"{k}" = "{v}"' for k, v in sorted(node.labels.items())]
    lines.append("[settings.kubernetes.node-taints]")
    for t in node.taints:
        value = f"{t.get('value', '')}:{t['effect']}"
        lines.append(f'"{t["key"]}" = ["{value}"]')
    rendered = "\n".join(lines) + "\n"
    return (node.custom_user_data + "\n" + rendered) if node.custom_user_data else rendered


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
                else f"amazon-eks-node{suffix}-{kubernetes_version}-{version}"
            )
            prefix = f"/aws/service/eks/optimized-ami/{kubernetes_version}/amazon-linux-2{suffix}"
            return f"{prefix}/{release}/image_id"
        case "bottlerocket":
            release = "latest" if version == "latest" else version
            return f"/aws/service/bottlerocket/aws-k8s-{kubernetes_version}/{ssm_arch}/{release}/image_id"
    raise ValueError(f"amiSelectorTerms alias family {family!r} is not supported")
