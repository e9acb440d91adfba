"""Kubernetes reads only the operator's tools make (doctor), with the operator's own credentials.

They stay out of :mod:`adapters.kubernetes`, whose every call the Lambdas' ClusterRole must grant.
"""

from __future__ import annotations

from serverless_karpenter.adapters.kubernetes import JSON, KubernetesError, KubernetesGateway, call


def read_config_map(kube: KubernetesGateway, namespace: str, name: str) -> JSON | None:
    try:
        return call(kube.core.read_namespaced_config_map, name, namespace, timeout=kube.timeouts)
    except KubernetesError as error:
        if error.status == 404:
            return None
        raise
