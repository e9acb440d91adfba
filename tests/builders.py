"""Builders for the Kubernetes objects the tests make: pods, nodes, Deployments, NodePools and EC2NodeClasses,
as the API server stores them (plain dicts, which the `kubernetes` client also takes as bodies).

One builder a kind: a test names only what matters to it, and everything else is a valid default. The
NodePool and EC2NodeClass defaults are Karpenter's getting-started manifests, as the default scenario
applies them (`simulator/serverless_karpenter_sim/scenarios/default.yaml`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter_sim.scenario import load_scenario

Obj = dict[str, Any]

_DEFAULT_SCENARIO = load_scenario("default")
_TIMESTAMP = "%Y-%m-%dT%H:%M:%SZ"


def _timestamp(at: datetime) -> str:
    return at.strftime(_TIMESTAMP)


def owner_reference(kind: str, name: str = "owner") -> Obj:
    return {"kind": kind, "name": name, "controller": True}


def container(
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    *,
    name: str = "app",
    image: str = "pause",
    extended: Mapping[str, str] | None = None,
    host_ports: Sequence[int] = (),
) -> Obj:
    """A container requesting ``cpu`` and ``memory`` (None leaves a request out). Extended resources
    (``extended``) are requested and limited alike, as Kubernetes requires."""
    requests = {key: value for key, value in (("cpu", cpu), ("memory", memory)) if value is not None}
    body: Obj = {"name": name, "image": image, "resources": {"requests": {**requests, **(extended or {})}}}
    if extended:
        body["resources"]["limits"] = dict(extended)
    if host_ports:
        body["ports"] = [{"containerPort": port, "hostPort": port} for port in host_ports]
    return body


def pod(
    name: str,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    *,
    namespace: str | None = "default",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    node: str | None = None,
    phase: str | None = None,
    owner: str | None = None,
    uid: str | None = None,
    created: datetime | str | None = None,
    started: datetime | None = None,
    unschedulable: bool = False,
    containers: Sequence[Obj] | None = None,
    extended: Mapping[str, str] | None = None,
    host_ports: Sequence[int] = (),
    **spec: Any,
) -> Obj:
    """A pod. ``node`` binds it (``spec.nodeName``); ``phase`` defaults to Running when bound and Pending
    when not; ``unschedulable`` adds the scheduler's PodScheduled=False condition that the watcher looks
    for; ``owner`` is the kind of its controller (ReplicaSet, DaemonSet, ...); ``containers`` replaces the
    one container built from ``cpu``, ``memory``, ``extended`` and ``host_ports``; ``spec`` adds fields."""
    metadata: Obj = {"name": name, "labels": dict(labels or {})}
    if namespace is not None:  # None: the namespace of the request that creates it
        metadata["namespace"] = namespace
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if owner is not None:
        metadata["ownerReferences"] = [owner_reference(owner)]
    if uid is not None:
        metadata["uid"] = uid
    if created is not None:
        metadata["creationTimestamp"] = created if isinstance(created, str) else _timestamp(created)
    body_containers = (
        list(containers)
        if containers is not None
        else [container(cpu, memory, extended=extended, host_ports=host_ports)]
    )
    body_spec: Obj = {"containers": body_containers, **spec}
    if node is not None:
        body_spec["nodeName"] = node
    status: Obj = {"phase": phase or ("Running" if node is not None else "Pending")}
    if unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    if started is not None:
        status["startTime"] = _timestamp(started)
    return {"metadata": metadata, "spec": body_spec, "status": status}


def node(
    name: str,
    cpu: str = "4",
    memory: str = "16Gi",
    *,
    pods: str = "110",
    zone: str = "us-west-2a",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: Sequence[Obj] = (),
    ready: str | None = "True",
    unschedulable: bool = False,
    extended: Mapping[str, str] | None = None,
    provider_id: str | None = None,
) -> Obj:
    """A Node with its hostname and zone labels, its allocatable and (unless ``ready`` is None) a Ready
    condition."""
    metadata: Obj = {"name": name, "labels": {wk.HOSTNAME: name, wk.ZONE: zone, **(labels or {})}}
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    spec: Obj = {"taints": list(taints), "unschedulable": unschedulable}
    if provider_id is not None:
        spec["providerID"] = provider_id
    status: Obj = {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods, **(extended or {})}}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": ready}]
    return {"metadata": metadata, "spec": spec, "status": status}


def deployment(
    name: str,
    replicas: int,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    *,
    namespace: str = "default",
    grace_seconds: int | None = 0,
    **pod_spec: Any,
) -> Obj:
    """A Deployment of ``replicas`` pods labelled ``app: <name>``, each with one container."""
    template_spec: Obj = {"containers": [container(cpu, memory)], **pod_spec}
    if grace_seconds is not None:
        template_spec = {"terminationGracePeriodSeconds": grace_seconds, **template_spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": template_spec},
        },
    }


def nodepool(name: str = "default", **spec: Any) -> Obj:
    """Karpenter's getting-started NodePool, renamed, with top-level ``spec`` fields replaced."""
    base = copy.deepcopy(_DEFAULT_SCENARIO.manifests[0])
    return {**base, "metadata": {"name": name}, "spec": {**base["spec"], **spec}}


def nodeclass() -> Obj:
    """Karpenter's getting-started EC2NodeClass (``default``)."""
    return copy.deepcopy(_DEFAULT_SCENARIO.manifests[1])
