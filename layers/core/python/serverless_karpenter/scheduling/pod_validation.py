"""Validation of pods and pod templates, as the kube-apiserver validates the fields scheduling reads.

The live provisioner reads objects the API server has already admitted; ``plan`` (and anything else that
takes manifests straight from files) must refuse what the API server would refuse before scheduling
sees it, and say where: each problem is a :class:`FieldViolation` with the path a user writes
(``spec.template.spec.containers[0].resources.requests.memory``) and the rule. The rules follow
``pkg/apis/core/validation`` for the fields scheduling reads (names, labels, resources, affinity,
tolerations, topology spread, ports, volumes); fields scheduling never reads are left to the API server.

Pure: returns violations, raises nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from serverless_karpenter.api.common import (
    dns_subdomain_problem,
    label_value_problem,
    qualified_name_problem,
    quantity_problem,
)
from serverless_karpenter.api.errors import FieldViolation, show
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.requirements import parse_int

INT32_MAX = (1 << 31) - 1
INT64_MAX = (1 << 63) - 1
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
INCLUSION_POLICIES = ("Honor", "Ignore")
PROTOCOLS = ("TCP", "UDP", "SCTP")

# The kinds with a pod template at spec.template: pods scheduling expands them to, or DaemonSet overhead.
TEMPLATE_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job", "DaemonSet")


def _unit(resource: str) -> str:
    return "millicores" if resource == resources.CPU else "units"


def _choices(values: Sequence[str]) -> str:
    return ", ".join(values)


class Checker:
    """Collects violations while walking a manifest; each check returns the value when it has the
    right shape (so the walk can go deeper) and None otherwise."""

    def __init__(self) -> None:
        self.violations: list[FieldViolation] = []

    def add(self, path: str, rule: str) -> None:
        self.violations.append(FieldViolation(path, rule))

    def mapping(self, value: Any, path: str, *, required: bool = False) -> Mapping[str, Any] | None:
        if value is None:
            if required:
                self.add(path, "is required")
            return None
        if not isinstance(value, Mapping):
            self.add(path, f"must be a mapping (got {show(value)})")
            return None
        return value

    def sequence(self, value: Any, path: str, *, required: bool = False) -> list[Any]:
        if value is None:
            if required:
                self.add(path, "is required")
            return []
        if not isinstance(value, list):
            self.add(path, f"must be a list (got {show(value)})")
            return []
        return value

    def objects(
        self, value: Any, path: str, *, required: bool = False
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """The items of a list of objects, with their paths; items that are not objects are reported."""
        out = []
        for index, item in enumerate(self.sequence(value, path, required=required)):
            checked = self.mapping(item, f"{path}[{index}]", required=True)
            if checked is not None:
                out.append((f"{path}[{index}]", checked))
        return out

    def string(self, value: Any, path: str, *, required: bool = False) -> str | None:
        if value is None or value == "":
            if required:
                self.add(path, "is required")
            return None
        if not isinstance(value, str):
            self.add(path, f"must be a string (got {show(value)})")
            return None
        return value

    def strings(self, value: Any, path: str) -> list[str]:
        out = []
        for index, item in enumerate(self.sequence(value, path)):
            if isinstance(item, str):
                out.append(item)
            else:
                self.add(f"{path}[{index}]", f"must be a string (got {show(item)})")
        return out

    def integer(
        self, value: Any, path: str, *, low: int | None = None, high: int = INT32_MAX, required: bool = False
    ) -> int | None:
        if value is None:
            if required:
                self.add(path, "is required")
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(path, f"must be an integer (got {show(value)})")
            return None
        if low is not None and value < low:
            self.add(path, f"must be greater than or equal to {low} (got {value})")
            return None
        if value > high:
            self.add(path, f"must be less than or equal to {high} (got {value})")
            return None
        return value

    def enum(self, value: Any, path: str, allowed: Sequence[str], *, required: bool = False) -> str | None:
        text = self.string(value, path, required=required)
        if text is not None and text not in allowed:
            self.add(path, f"must be one of {_choices(allowed)} (got {show(text)})")
            return None
        return text

    def qualified_name(self, value: Any, path: str, *, required: bool = True) -> None:
        text = self.string(value, path, required=required)
        if text is not None:
            problem = qualified_name_problem(text)
            if problem:
                self.add(path, problem)

    def dns_label(self, value: Any, path: str, *, required: bool = True) -> str | None:
        text = self.string(value, path, required=required)
        if text is not None and (len(text) > 63 or not _DNS_LABEL.fullmatch(text)):
            self.add(
                path,
                "must be a DNS label: at most 63 lowercase letters, digits and '-', starting and ending "
                f"with a letter or digit (got {show(text)})",
            )
            return None
        return text

    def dns_subdomain(self, value: Any, path: str, *, required: bool = True) -> str | None:
        text = self.string(value, path, required=required)
        if text is not None:
            problem = dns_subdomain_problem(text)
            if problem:
                self.add(path, problem)
                return None
        return text

    def labels(self, value: Any, path: str) -> None:
        """A label map (labels, nodeSelector, matchLabels): qualified-name keys, label-value values."""
        for key, item in (self.mapping(value, path) or {}).items():
            where = f"{path}[{key}]"
            if not isinstance(key, str):
                self.add(where, f"a key must be a string (got {show(key)})")
                continue
            problem = qualified_name_problem(key)
            if problem:
                self.add(where, problem)
            if not isinstance(item, str):
                self.add(where, f"must be a string (got {show(item)})")
                continue
            problem = label_value_problem(item)
            if problem:
                self.add(where, problem)

    def string_map(self, value: Any, path: str) -> None:
        """Annotations: string keys and string values."""
        for key, item in (self.mapping(value, path) or {}).items():
            if not isinstance(key, str) or not isinstance(item, str):
                self.add(f"{path}[{key}]", f"must be a string (got {show(item)})")

    def quantities(self, value: Any, path: str) -> dict[str, int]:
        """A resource list: each quantity parsed by the one parser (scheduling.resources), none negative."""
        parsed: dict[str, int] = {}
        for name, quantity in (self.mapping(value, path) or {}).items():
            where = f"{path}.{name}" if isinstance(name, str) and name.isidentifier() else f"{path}[{name}]"
            if not isinstance(name, str) or qualified_name_problem(name):
                self.add(
                    where,
                    f"must be a resource name such as cpu, memory or example.com/device (got {show(name)})",
                )
                continue
            problem = quantity_problem(quantity)
            if problem:
                self.add(where, problem)
                continue
            amount = resources.parse(name, quantity)
            if amount > INT64_MAX:
                # Kubernetes reads quantities as 64-bit integers (cpu in millicores): beyond that the
                # scheduler's arithmetic saturates, and ours would not be Kubernetes' any more.
                self.add(where, f"is too large: at most {INT64_MAX} {_unit(name)} (got {show(quantity)})")
                continue
            if amount < 0:
                self.add(where, f"must be greater than or equal to 0 (got {show(quantity)})")
                continue
            parsed[name] = amount
        return parsed


# -- metadata -----------------------------------------------------------------------------------------


def metadata_violations(check: Checker, metadata: Any, path: str, *, namespaced: bool, named: bool) -> None:
    """``named``: the object needs a name; otherwise (a Pod) a generateName will do."""
    meta = check.mapping(metadata, path, required=True)
    if meta is None:
        return
    if named or meta.get("generateName") is None:
        check.dns_subdomain(meta.get("name"), f"{path}.name", required=True)
    else:
        check.string(meta.get("generateName"), f"{path}.generateName", required=True)
        check.dns_subdomain(meta.get("name"), f"{path}.name", required=False)
    if namespaced:
        check.dns_label(meta.get("namespace"), f"{path}.namespace", required=False)
    check.labels(meta.get("labels"), f"{path}.labels")
    check.string_map(meta.get("annotations"), f"{path}.annotations")
    check.objects(meta.get("ownerReferences"), f"{path}.ownerReferences")


# -- selectors ----------------------------------------------------------------------------------------


def _requirement(check: Checker, item: Mapping[str, Any], path: str, operators: Sequence[str]) -> None:
    check.qualified_name(item.get("key"), f"{path}.key")
    operator = check.enum(item.get("operator"), f"{path}.operator", operators, required=True)
    values = check.strings(item.get("values"), f"{path}.values")
    if operator in ("In", "NotIn") and not values:
        check.add(f"{path}.values", f"must be specified when `operator` is '{operator}'")
    elif operator in ("Exists", "DoesNotExist") and values:
        check.add(f"{path}.values", f"may not be specified when `operator` is '{operator}'")
    elif operator in ("Gt", "Lt"):
        if len(values) != 1:
            check.add(
                f"{path}.values",
                f"must be a single value when `operator` is '{operator}' (got {len(values)})",
            )
        elif parse_int(values[0]) is None:
            check.add(f"{path}.values[0]", f"must be an integer that fits in 64 bits (got {show(values[0])})")


def label_selector_violations(check: Checker, selector: Any, path: str) -> None:
    body = check.mapping(selector, path)
    if body is None:
        return
    check.labels(body.get("matchLabels"), f"{path}.matchLabels")
    for where, item in check.objects(body.get("matchExpressions"), f"{path}.matchExpressions"):
        _requirement(check, item, where, LABEL_SELECTOR_OPERATORS)


def _node_selector_term(check: Checker, term: Mapping[str, Any], path: str) -> None:
    for where, item in check.objects(term.get("matchExpressions"), f"{path}.matchExpressions"):
        _requirement(check, item, where, NODE_SELECTOR_OPERATORS)
    for where, item in check.objects(term.get("matchFields"), f"{path}.matchFields"):
        check.enum(item.get("key"), f"{where}.key", ("metadata.name",), required=True)
        check.enum(item.get("operator"), f"{where}.operator", ("In", "NotIn"), required=True)
        if len(check.strings(item.get("values"), f"{where}.values")) != 1:
            check.add(f"{where}.values", "must have exactly one value for a matchFields requirement")


def _pod_affinity_term(check: Checker, term: Mapping[str, Any], path: str) -> None:
    label_selector_violations(check, term.get("labelSelector"), f"{path}.labelSelector")
    label_selector_violations(check, term.get("namespaceSelector"), f"{path}.namespaceSelector")
    check.strings(term.get("namespaces"), f"{path}.namespaces")
    check.qualified_name(term.get("topologyKey"), f"{path}.topologyKey")
    for key in ("matchLabelKeys", "mismatchLabelKeys"):
        for index, label in enumerate(check.strings(term.get(key), f"{path}.{key}")):
            check.qualified_name(label, f"{path}.{key}[{index}]")


def _weight(check: Checker, value: Any, path: str) -> None:
    check.integer(value, path, low=1, high=100, required=True)


def _node_affinity(check: Checker, node: Mapping[str, Any], base: str) -> None:
    required = check.mapping(
        node.get("requiredDuringSchedulingIgnoredDuringExecution"),
        f"{base}.requiredDuringSchedulingIgnoredDuringExecution",
    )
    if required is not None:
        where = f"{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        terms = check.objects(required.get("nodeSelectorTerms"), where, required=True)
        if not terms and isinstance(required.get("nodeSelectorTerms"), list):
            check.add(where, "must have at least one node selector term")
        for term_path, term in terms:
            _node_selector_term(check, term, term_path)
    preferred = f"{base}.preferredDuringSchedulingIgnoredDuringExecution"
    for where, item in check.objects(node.get("preferredDuringSchedulingIgnoredDuringExecution"), preferred):
        _weight(check, item.get("weight"), f"{where}.weight")
        preference = check.mapping(item.get("preference"), f"{where}.preference", required=True)
        if preference is not None:
            _node_selector_term(check, preference, f"{where}.preference")


def _pod_affinity(check: Checker, terms: Mapping[str, Any], base: str) -> None:
    required = f"{base}.requiredDuringSchedulingIgnoredDuringExecution"
    for where, term in check.objects(terms.get("requiredDuringSchedulingIgnoredDuringExecution"), required):
        _pod_affinity_term(check, term, where)
    preferred = f"{base}.preferredDuringSchedulingIgnoredDuringExecution"
    for where, item in check.objects(terms.get("preferredDuringSchedulingIgnoredDuringExecution"), preferred):
        _weight(check, item.get("weight"), f"{where}.weight")
        weighted = check.mapping(item.get("podAffinityTerm"), f"{where}.podAffinityTerm", required=True)
        if weighted is not None:
            _pod_affinity_term(check, weighted, f"{where}.podAffinityTerm")


def affinity_violations(check: Checker, affinity: Any, path: str) -> None:
    body = check.mapping(affinity, path)
    if body is None:
        return
    node = check.mapping(body.get("nodeAffinity"), f"{path}.nodeAffinity")
    if node is not None:
        _node_affinity(check, node, f"{path}.nodeAffinity")
    for which in ("podAffinity", "podAntiAffinity"):
        terms = check.mapping(body.get(which), f"{path}.{which}")
        if terms is not None:
            _pod_affinity(check, terms, f"{path}.{which}")


# -- tolerations and topology spread ------------------------------------------------------------------


def toleration_violations(check: Checker, tolerations: Any, path: str) -> None:
    for where, item in check.objects(tolerations, path):
        key = check.string(item.get("key"), f"{where}.key")
        if key is not None and qualified_name_problem(key):
            check.add(f"{where}.key", str(qualified_name_problem(key)))
        operator = check.enum(item.get("operator"), f"{where}.operator", TOLERATION_OPERATORS) or "Equal"
        if key is None and item.get("operator") != "Exists":
            check.add(f"{where}.operator", "must be Exists when `key` is empty, which means match all keys")
        value = check.string(item.get("value"), f"{where}.value")
        if operator == "Exists" and value:
            check.add(f"{where}.value", "must be empty when `operator` is 'Exists'")
        elif value is not None:
            problem = label_value_problem(value)
            if problem:
                check.add(f"{where}.value", problem)
        effect = check.enum(item.get("effect"), f"{where}.effect", TAINT_EFFECTS)
        seconds = check.integer(item.get("tolerationSeconds"), f"{where}.tolerationSeconds", high=INT64_MAX)
        if seconds is not None and effect != "NoExecute":
            check.add(f"{where}.effect", "must be NoExecute when `tolerationSeconds` is set")


def topology_spread_violations(check: Checker, constraints: Any, path: str) -> None:
    seen: set[tuple[Any, Any]] = set()
    for where, item in check.objects(constraints, path):
        check.integer(item.get("maxSkew"), f"{where}.maxSkew", low=1, required=True)
        check.qualified_name(item.get("topologyKey"), f"{where}.topologyKey")
        when = check.enum(
            item.get("whenUnsatisfiable"), f"{where}.whenUnsatisfiable", WHEN_UNSATISFIABLE, required=True
        )
        domains = check.integer(item.get("minDomains"), f"{where}.minDomains", low=1)
        if domains is not None and when == "ScheduleAnyway":
            check.add(f"{where}.minDomains", "can only be set when `whenUnsatisfiable` is 'DoNotSchedule'")
        label_selector_violations(check, item.get("labelSelector"), f"{where}.labelSelector")
        for index, label in enumerate(check.strings(item.get("matchLabelKeys"), f"{where}.matchLabelKeys")):
            check.qualified_name(label, f"{where}.matchLabelKeys[{index}]")
        check.enum(item.get("nodeAffinityPolicy"), f"{where}.nodeAffinityPolicy", INCLUSION_POLICIES)
        check.enum(item.get("nodeTaintsPolicy"), f"{where}.nodeTaintsPolicy", INCLUSION_POLICIES)
        pair = (item.get("topologyKey"), item.get("whenUnsatisfiable"))
        if not all(isinstance(p, str) for p in pair):
            continue
        if pair in seen:
            check.add(where, f"duplicate of an earlier constraint on topologyKey {pair[0]!r} and {pair[1]}")
        seen.add(pair)


# -- containers ---------------------------------------------------------------------------------------


def _container(check: Checker, container: Mapping[str, Any], path: str, *, init: bool) -> None:
    check.dns_label(container.get("name"), f"{path}.name")
    body = check.mapping(container.get("resources"), f"{path}.resources")
    if body is not None:
        limits = check.quantities(body.get("limits"), f"{path}.resources.limits")
        requests = check.quantities(body.get("requests"), f"{path}.resources.requests")
        for name, amount in requests.items():
            if name in limits and amount > limits[name]:
                check.add(
                    f"{path}.resources.requests.{name}",
                    f"must be less than or equal to the {name} limit of {body['limits'][name]}",
                )
    for where, port in check.objects(container.get("ports"), f"{path}.ports"):
        check.integer(port.get("containerPort"), f"{where}.containerPort", low=1, high=65535, required=True)
        check.integer(port.get("hostPort"), f"{where}.hostPort", low=0, high=65535)
        check.enum(port.get("protocol"), f"{where}.protocol", PROTOCOLS)
        check.string(port.get("hostIP"), f"{where}.hostIP")
    if init:
        check.enum(container.get("restartPolicy"), f"{path}.restartPolicy", ("Always",))
    elif container.get("restartPolicy") is not None:
        check.add(f"{path}.restartPolicy", "may only be set on init containers")


def _containers(check: Checker, spec: Mapping[str, Any], path: str) -> None:
    containers = check.objects(spec.get("containers"), f"{path}.containers", required=True)
    if not containers and isinstance(spec.get("containers"), list):
        check.add(f"{path}.containers", "must have at least one container")
    init = check.objects(spec.get("initContainers"), f"{path}.initContainers")
    names: set[str] = set()
    for is_init, items in ((True, init), (False, containers)):
        for where, container in items:
            _container(check, container, where, init=is_init)
            name = container.get("name")
            if isinstance(name, str):
                if name in names:
                    check.add(f"{where}.name", f"duplicate container name {name!r}")
                names.add(name)


def pvc_spec_violations(check: Checker, spec: Any, path: str) -> None:
    """A PersistentVolumeClaim's spec, or a claim template's (StatefulSet, ephemeral volume)."""
    body = check.mapping(spec, path, required=True)
    if body is None:
        return
    check.string(body.get("storageClassName"), f"{path}.storageClassName")
    check.string(body.get("volumeName"), f"{path}.volumeName")
    check.strings(body.get("accessModes"), f"{path}.accessModes")
    requirements = check.mapping(body.get("resources"), f"{path}.resources")
    if requirements is not None:
        check.quantities(requirements.get("requests"), f"{path}.resources.requests")


def _volumes(check: Checker, volumes: Any, path: str) -> None:
    names: set[str] = set()
    for where, volume in check.objects(volumes, path):
        name = check.dns_label(volume.get("name"), f"{where}.name")
        if name is not None:
            if name in names:
                check.add(f"{where}.name", f"duplicate volume name {name!r}")
            names.add(name)
        claim = check.mapping(volume.get("persistentVolumeClaim"), f"{where}.persistentVolumeClaim")
        if claim is not None:
            check.dns_subdomain(claim.get("claimName"), f"{where}.persistentVolumeClaim.claimName")
        ephemeral = check.mapping(volume.get("ephemeral"), f"{where}.ephemeral")
        if ephemeral is not None:
            template = check.mapping(
                ephemeral.get("volumeClaimTemplate"), f"{where}.ephemeral.volumeClaimTemplate", required=True
            )
            if template is not None:
                pvc_spec_violations(
                    check, template.get("spec"), f"{where}.ephemeral.volumeClaimTemplate.spec"
                )


# -- pods and templates -------------------------------------------------------------------------------


def pod_spec_violations(check: Checker, spec: Any, path: str) -> None:
    """A pod spec at ``path`` (``spec`` for a Pod, ``spec.template.spec`` for a workload)."""
    body = check.mapping(spec, path, required=True)
    if body is None:
        return
    _containers(check, body, path)
    check.quantities(body.get("overhead"), f"{path}.overhead")
    check.labels(body.get("nodeSelector"), f"{path}.nodeSelector")
    affinity_violations(check, body.get("affinity"), f"{path}.affinity")
    toleration_violations(check, body.get("tolerations"), f"{path}.tolerations")
    topology_spread_violations(
        check, body.get("topologySpreadConstraints"), f"{path}.topologySpreadConstraints"
    )
    _volumes(check, body.get("volumes"), f"{path}.volumes")
    check.dns_subdomain(body.get("nodeName"), f"{path}.nodeName", required=False)
    check.dns_subdomain(body.get("runtimeClassName"), f"{path}.runtimeClassName", required=False)
    check.integer(body.get("priority"), f"{path}.priority", low=-(1 << 31))


def pod_violations(pod: Mapping[str, Any]) -> list[FieldViolation]:
    """A Pod as the API server admits it (for the fields scheduling reads)."""
    check = Checker()
    metadata_violations(check, pod.get("metadata"), "metadata", namespaced=True, named=False)
    pod_spec_violations(check, pod.get("spec"), "spec")
    status = check.mapping(pod.get("status"), "status")
    if status is not None:
        check.string(status.get("phase"), "status.phase")
        check.objects(status.get("conditions"), "status.conditions")
    return check.violations


def workload_violations(obj: Mapping[str, Any]) -> list[FieldViolation]:
    """A Deployment, ReplicaSet, StatefulSet, Job or DaemonSet: its counts and its pod template."""
    check = Checker()
    metadata_violations(check, obj.get("metadata"), "metadata", namespaced=True, named=True)
    spec = check.mapping(obj.get("spec"), "spec", required=True)
    if spec is None:
        return check.violations
    kind = obj.get("kind")
    counts: Iterable[str] = ("parallelism", "completions") if kind == "Job" else ("replicas",)
    if kind == "DaemonSet":
        counts = ()
    for count in counts:
        check.integer(spec.get(count), f"spec.{count}", low=0)
    template = check.mapping(spec.get("template"), "spec.template", required=True)
    if template is not None:
        meta = check.mapping(template.get("metadata"), "spec.template.metadata")
        if meta is not None:
            check.labels(meta.get("labels"), "spec.template.metadata.labels")
            check.string_map(meta.get("annotations"), "spec.template.metadata.annotations")
        pod_spec_violations(check, template.get("spec"), "spec.template.spec")
    if kind == "StatefulSet":
        for where, claim in check.objects(spec.get("volumeClaimTemplates"), "spec.volumeClaimTemplates"):
            metadata_violations(
                check, claim.get("metadata"), f"{where}.metadata", namespaced=False, named=True
            )
            pvc_spec_violations(check, claim.get("spec"), f"{where}.spec")
    return check.violations
