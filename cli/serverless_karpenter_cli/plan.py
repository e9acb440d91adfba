"""`serverless-karpenter plan`: an offline dry run of provisioning for a set of manifests.

It runs the live provisioner's own simulation (``provisioning.provisioner.simulate_provisioning``) on
manifests instead of the API server: workloads are expanded to the pods their controllers would create,
Nodes and pods bound to them are existing capacity, and the instance types come from the bundled
snapshot or a ``--catalog`` file shaped like the EC2 APIs.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text
from serverless_karpenter.adapters.providers.model import ResolvedNodeClass, Subnet
from serverless_karpenter.api.ec2nodeclass import spec_ami_family
from serverless_karpenter.api.errors import ManifestError
from serverless_karpenter.api.labels import CAPACITY_TYPE, INSTANCE_TYPE, ZONE
from serverless_karpenter.catalog import bundled_snapshot
from serverless_karpenter.catalog.allocatable import AMI_FAMILIES
from serverless_karpenter.catalog.sources import DescribedCatalog
from serverless_karpenter.clock import SystemClock
from serverless_karpenter.provisioning.context import InstanceTypeProvider
from serverless_karpenter.provisioning.provisioner import (
    ClusterState,
    explain,
    namespace_labels,
    simulate_provisioning,
)
from serverless_karpenter.runtime import CatalogInstanceTypes
from serverless_karpenter.scheduling.inputs import ManifestSet, classify, nodeclaim_records
from serverless_karpenter.scheduling.scheduler import SchedulingResult, choose_offering
from serverless_karpenter.scheduling.volumes import VolumeIndex
from serverless_karpenter.solver import SolveReport

from serverless_karpenter_cli.plan_inputs import PlanError, check_pod_count, load_sources, select

DEFAULT_REGION = "us-east-1"


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "plan",
        help="show the NodeClaims provisioning would launch for a set of manifests (offline)",
        description=(
            "Simulates provisioning for manifests: NodePools and NodeClaims (karpenter.sh/v1), NodeOverlays "
            "(karpenter.sh/v1alpha1), EC2NodeClasses (karpenter.k8s.aws/v1), Pods, Deployments, "
            "StatefulSets, ReplicaSets and Jobs (expanded to pending pods), existing Nodes (pods with "
            "nodeName are bound to them), DaemonSets, PDBs, PVCs, PVs, StorageClasses, RuntimeClasses and "
            "Namespaces. Every object is validated as the API server would first; other kinds and "
            "apiVersions are ignored and listed. No AWS account or cluster is needed."
        ),
        epilog=(
            "examples:\n"
            "  serverless-karpenter plan -f nodepools.yaml -f apps/\n"
            "  serverless-karpenter plan -f cluster/ --catalog catalog.json -o json"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-f",
        "--filename",
        dest="paths",
        action="append",
        required=True,
        metavar="PATH",
        help="a YAML/JSON file or a folder of them (repeatable)",
    )
    parser.add_argument(
        "--catalog",
        metavar="FILE",
        help="instance types as JSON shaped like the EC2 APIs (default: the bundled snapshot)",
    )
    parser.add_argument("--region", help=f"AWS region (default: the catalog's, else {DEFAULT_REGION})")
    parser.add_argument("-o", "--output", choices=("json", "table"), default="table")
    parser.set_defaults(run=run)


# -- instance types ---------------------------------------------------------------------------------


def file_catalog(
    data: Mapping[str, Any],
    region: str,
    overlays: Callable[[], Sequence[Mapping[str, Any]]] | None = None,
) -> tuple[CatalogInstanceTypes, list[str]]:
    """The live provider over a ``--catalog`` file (see :class:`DescribedCatalog`) and the file's zones:
    the Lambdas' path, with the file as the snapshot and the prices. The file's spot prices are all there
    are: a type with none has no spot offering, and nothing launches in a plan."""
    described = DescribedCatalog.from_document(data, region)
    provider = CatalogInstanceTypes(
        region,
        SystemClock(),
        catalog_source=described,
        prices=described,
        overlays=overlays,
        model_missing_spot=False,
    )
    return provider, described.zones()


class _Types:
    """What ``build_templates`` needs: somewhere to read instance types from."""

    def __init__(self, provider: InstanceTypeProvider) -> None:
        self._provider = provider

    @property
    def instance_types(self) -> InstanceTypeProvider:
        return self._provider


def _ami_family(spec: Mapping[str, Any]) -> str:
    # The model's rule; a family the catalog has no overhead model for is sized as AL2023.
    family = spec_ami_family(spec)
    return family if family.lower() in AMI_FAMILIES else "AL2023"


def offline_nodeclass(manifest: Mapping[str, Any], zones: Sequence[str]) -> ResolvedNodeClass:
    """An EC2NodeClass as if resolved: a subnet in every zone of the catalog and an AMI per architecture
    (offline there are no subnets or images to look up)."""
    spec = manifest.get("spec") or {}
    name = str((manifest.get("metadata") or {}).get("name"))
    return ResolvedNodeClass(
        name=name,
        subnets=[Subnet(f"subnet-plan-{zone}", zone, None, 4096) for zone in zones],
        security_group_ids=[],
        amis={"amd64": "ami-plan-amd64", "arm64": "ami-plan-arm64"},
        ami_family=_ami_family(spec),
        instance_profile=None,
        kubelet=dict(spec.get("kubelet") or {}),
    )


# -- the plan ---------------------------------------------------------------------------------------


def build_plan(
    manifests: ManifestSet, provider: InstanceTypeProvider, zones: Sequence[str]
) -> dict[str, Any]:
    specs = {str(nc["metadata"]["name"]): nc for nc in manifests.nodeclasses}
    state = ClusterState(
        nodepools=manifests.nodepools,
        nodeclass_specs=specs,
        resolved={name: offline_nodeclass(spec, zones) for name, spec in specs.items()},
        nodes=manifests.nodes,
        bound_pods=manifests.bound,
        records=nodeclaim_records(manifests.nodeclaims, manifests.nodes, manifests.daemonsets),
        daemonsets=manifests.daemonsets,
        namespaces=namespace_labels(manifests.namespaces),
        volumes=VolumeIndex.build(
            manifests.pvcs, manifests.pvs, manifests.storage_classes, manifests.csinodes
        ),
    )
    result, report, _ = simulate_provisioning(state, manifests.pending, _Types(provider))
    return render(result, manifests, report)


def render(
    result: SchedulingResult, manifests: ManifestSet, report: SolveReport | None = None
) -> dict[str, Any]:
    claims: list[dict[str, Any]] = []
    cost = 0.0
    for claim in result.new_nodeclaims:
        chosen = choose_offering(claim)
        by_name = {it.name: it for it in claim.instance_types}
        labels = dict(claim.requirements.labels())
        if chosen is not None:
            labels.update(by_name[chosen.instance_type].labels)
            labels.update(
                {ZONE: chosen.zone, CAPACITY_TYPE: chosen.capacity_type, INSTANCE_TYPE: chosen.instance_type}
            )
            cost += chosen.price
        labels.update(claim.labels)
        claims.append(
            {
                "nodepool": claim.nodepool,
                "instance_type": chosen.instance_type if chosen else None,
                "instance_type_options": [it.name for it in claim.instance_types],
                "zone": chosen.zone if chosen else None,
                "capacity_type": chosen.capacity_type if chosen else None,
                "price_per_hour": chosen.price if chosen else None,
                "pods": sorted(claim.pods),
                "labels": dict(sorted(labels.items())),
                "taints": [t.to_dict() for t in claim.taints],
            }
        )
    unschedulable = [
        {"pod": pod, "reason": explain(reasons), "nodepools": dict(sorted(reasons.items()))}
        for pod, reasons in sorted(result.unschedulable.items())
    ]
    for pod, problem in sorted(manifests.problems.items()):
        reasons = {str(np["metadata"]["name"]): problem for np in manifests.nodepools} or {"": problem}
        unschedulable.append({"pod": pod, "reason": explain(reasons), "nodepools": reasons})
    return {
        "nodeclaims": claims,
        "existing_nodes": {name: sorted(pods) for name, pods in sorted(result.existing.items())},
        "unschedulable": unschedulable,
        "cost_per_hour": round(cost, 6),
        # A proven floor under the cost of any placement of the same pods on new nodes, and how far
        # the plan is above it; first-fit is what Karpenter's algorithm alone would have bought.
        "lower_bound_per_hour": round(report.lower_bound, 6) if report else None,
        "gap": round(report.gap, 6) if report else None,
        "first_fit_cost_per_hour": round(report.ffd_cost, 6) if report else None,
    }


def _provider(
    args: argparse.Namespace, overlays: Sequence[Mapping[str, Any]] = ()
) -> tuple[InstanceTypeProvider, list[str], str]:
    if args.catalog:
        try:
            data = json.loads(Path(args.catalog).read_text())
        except (OSError, ValueError) as error:
            raise PlanError(f"--catalog {args.catalog}: {error}") from None
        if not isinstance(data, dict) or not isinstance(data.get("InstanceTypes"), list):
            raise PlanError(f'--catalog {args.catalog}: expected a JSON object with an "InstanceTypes" list')
        region = args.region or str(data.get("region") or DEFAULT_REGION)
        provider, zones = file_catalog(data, region, lambda: overlays)
        return provider, zones, region
    region = args.region or DEFAULT_REGION
    try:
        snapshot = bundled_snapshot(region)
    except ValueError as error:
        raise PlanError(f"{error}; pass --catalog FILE for other regions") from None
    zones = sorted(snapshot.zone_ids) or sorted({z for zs in snapshot.offered_zones.values() for z in zs})
    # The live provisioner's provider, with the manifests' NodeOverlays where it reads the cluster's.
    return CatalogInstanceTypes(region, SystemClock(), overlays=lambda: overlays), zones, region


def run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    try:
        sources, ignored = select(load_sources(args.paths))
        check_pod_count(sources)
        manifests = classify(source.obj for source in sources)
        provider, zones, _ = _provider(args, manifests.overlays)
        if not manifests.nodepools:
            raise PlanError("no NodePool in the manifests: there is nothing to provision with")
        plan = build_plan(manifests, provider, zones)
    except (PlanError, ManifestError) as error:
        # One line, whatever the terminal's width: scripts and tests read it whole.
        err.print(Text.assemble(("error:", "red"), f" {error}"), soft_wrap=True, highlight=False)
        return 2
    plan["ignored"] = ignored
    if args.output == "json":
        print(json.dumps(plan))
    else:
        print_table(plan, Console())
        for item in ignored:
            where = f"{item['kind']} {item['apiVersion'] or '(no apiVersion)'} {item['name'] or '(unnamed)'}"
            err.print(
                f"ignored: {where} in {item['file']}: {item['reason']}", soft_wrap=True, highlight=False
            )
    return 0


def print_table(plan: Mapping[str, Any], console: Console) -> None:
    claims = Table(title="NodeClaims to launch", title_justify="left")
    for column in ("nodepool", "instance type", "zone", "capacity", "$/h", "pods", "options"):
        claims.add_column(column, overflow="fold")
    for claim in plan["nodeclaims"]:
        options = claim["instance_type_options"]
        claims.add_row(
            claim["nodepool"],
            claim["instance_type"] or "-",
            claim["zone"] or "-",
            claim["capacity_type"] or "-",
            f"{claim['price_per_hour']:.4f}" if claim["price_per_hour"] is not None else "-",
            str(len(claim["pods"])),
            ", ".join(options[:4]) + (f" +{len(options) - 4}" if len(options) > 4 else ""),
        )
    console.print(claims)
    if plan["existing_nodes"]:
        existing = Table(title="Pods placed on existing capacity", title_justify="left")
        existing.add_column("node")
        existing.add_column("pods", overflow="fold")
        for node, pods in plan["existing_nodes"].items():
            existing.add_row(node, ", ".join(pods))
        console.print(existing)
    if plan["unschedulable"]:
        failed = Table(title="Unschedulable pods", title_justify="left")
        failed.add_column("pod")
        failed.add_column("nodepool")
        failed.add_column("first failing constraint", overflow="fold")
        for entry in plan["unschedulable"]:
            for pool, reason in entry["nodepools"].items():
                failed.add_row(entry["pod"], pool or "-", reason)
        console.print(failed)
    summary = (
        f"{len(plan['nodeclaims'])} NodeClaim(s), {len(plan['unschedulable'])} unschedulable pod(s), "
        f"${plan['cost_per_hour']:.4f}/h"
    )
    if plan.get("lower_bound_per_hour") is not None:
        summary += (
            f" (lower bound ${plan['lower_bound_per_hour']:.4f}/h, gap {100 * plan['gap']:.1f}%;"
            f" first-fit alone ${plan['first_fit_cost_per_hour']:.4f}/h)"
        )
    console.print(summary, highlight=False)
