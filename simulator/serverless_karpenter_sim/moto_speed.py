"""Seven of moto's costs that grow with the cluster, cut without changing a byte of what it answers.

Profiled at 60 and 200 nodes (issue 22), moto's own work was most of the simulator's wall time, and three
parts of it grow faster than the cluster:

- **Query-protocol requests.** Before it parses each structure of an EC2 request, moto asks whether any
  parameter starts with the structure's prefix, by walking every parameter: O(parameters²) a request.
  A CreateFleet with an override per instance type has thousands, and at 200 nodes parsing the
  launches took 330 of 490 server seconds (0.4 s a request). Keys starting with a prefix sit together in
  sorted order, so one binary search over the sorted keys answers the same question.
- **EC2 tags.** Every tagged EC2 model reads its tags through ``describe_tags(resource-id=...)``, which
  walks every tag of every resource in the account: DescribeInstances over n instances cost O(n²), and
  at 1,000 instances each call took seconds. The tags of one resource are one lookup in the backend's
  ``tags`` map; the same list, in the same order, is built from it here.
- **DynamoDB items.** moto serializes each response by walking botocore's shapes member by member;
  an ``AttributeValue`` has ten possible members, so each attribute of each item took some forty calls.
  An attribute moto holds is already in DynamoDB's JSON form (``{"S": "..."}``), so when it is plain
  JSON (strings, numbers as strings, booleans, nested maps and lists of the same; no binary, which
  would need base64) it is written as it is. Anything else takes moto's own path.

- **DynamoDB Query on a table's own key.** moto gathers a Query's candidates by walking every item of the
  table (every partition: NodeClaims, idempotency records, unavailable offerings, the catalog) and
  comparing each one's hash key, for every page. The items of one partition are the table's map under that
  hash key, so a Query on the table (not an index) of a table with a sort key reads that map alone. Paging,
  sorting, filters and projections stay moto's own.
- **EC2 tag filters.** For every instance and every ``tag:``/``tag-key`` filter value, moto turns the value
  into a regular expression with ``fnmatch.translate``, uncached: a DescribeInstances by the cluster tag
  over 1,000 instances translated the same three values 3,000 times (a sixth of a 1,000-node launch
  burst's server time). The translation is a pure function of the value; it is remembered.
- **EC2 instance lookups.** ``get_instance`` (every RunInstances attaches its root volume through it) walks
  ``all_reservations()``, which first makes a shallow copy of every reservation in the account: O(n) copies
  a launch, O(n²) for a burst of n. The same walk over the reservations themselves finds the same instance.
- **Model instances kept for ever.** Every moto model object ever made is appended to its class's
  ``instances_tracked`` list (for moto's dashboard), copies included: each Query deep-copies the items it
  returns, each DescribeInstances shallow-copies every reservation. At 1,000 nodes that kept some 10 MB a
  virtual minute alive for the whole run. Only S3 reads the lists (to close its spooled files at reset), so
  S3's models are still tracked; the others are not.

Importing this module installs them in this process (:mod:`serverless_karpenter_sim.cloud` imports it).
"""

from __future__ import annotations

import bisect
import threading
from functools import lru_cache
from types import ModuleType
from typing import Any

from serverless_karpenter_sim.iam_simulation import when_imported

_INSTALLED = "_serverless_karpenter_fast"
_UNTRACKED = "_serverless_karpenter_untracked"
_ATTRIBUTE_VALUE = "AttributeValue"
_STRING_KINDS = frozenset({"S", "N"})
_STRING_SET_KINDS = frozenset({"SS", "NS"})


def plain_attribute(value: Any) -> bool:
    """Whether ``value`` is a DynamoDB attribute already in its wire form."""
    if not isinstance(value, dict) or len(value) != 1:
        return False
    ((kind, inner),) = value.items()
    if kind in _STRING_KINDS:
        return isinstance(inner, str)
    if kind in ("BOOL", "NULL"):
        return isinstance(inner, bool)
    if kind in _STRING_SET_KINDS:
        return isinstance(inner, list) and all(isinstance(v, str) for v in inner)
    if kind == "M":
        return isinstance(inner, dict) and all(
            isinstance(k, str) and plain_attribute(v) for k, v in inner.items()
        )
    if kind == "L":
        return isinstance(inner, list) and all(plain_attribute(v) for v in inner)
    return False  # B and BS are bytes, base64-encoded by moto's serializer


def _register_serializer(module: ModuleType) -> None:
    serializer = module.BaseJSONSerializer
    if getattr(serializer, _INSTALLED, False):
        return
    generic = serializer._serialize_type_structure

    def serialize_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        if shape.name == _ATTRIBUTE_VALUE and plain_attribute(value):
            serialized[self.get_serialized_name(shape, key)] = value
            return
        generic(self, serialized, value, shape, key)

    serializer._serialize_type_structure = serialize_structure
    setattr(serializer, _INSTALLED, True)


def _register_tags(module: ModuleType) -> None:
    tagged = module.TaggedEC2Resource
    if getattr(tagged, _INSTALLED, False):
        return
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    def get_tags(self: Any) -> list[dict[str, str]]:
        resource_id = getattr(self, "id", None)
        if not resource_id:
            return []
        tags = self.ec2_backend.tags.get(resource_id) or {}
        resource_type = EC2_PREFIX_TO_RESOURCE.get(get_prefix(resource_id), "")
        return [
            {"resource_id": resource_id, "key": key, "value": value, "resource_type": resource_type}
            for key, value in tags.items()
        ]

    tagged.get_tags = get_tags
    setattr(tagged, _INSTALLED, True)


def has_key_with_prefix(sorted_keys: list[str], prefix: str) -> bool:
    """Whether any of ``sorted_keys`` starts with ``prefix``: those that do come first among the keys not
    below it."""
    at = bisect.bisect_left(sorted_keys, prefix)
    return at < len(sorted_keys) and sorted_keys[at].startswith(prefix)


def _register_parser(module: ModuleType) -> None:
    parser = module.QueryParser
    if getattr(parser, _INSTALLED, False):
        return

    def gonna_recurse(self: Any, query_params: Any, prefix: str) -> bool:
        if prefix == "":
            return False
        cached = getattr(self, "_sorted_params", None)
        if cached is None or cached[0] is not query_params:
            cached = (query_params, sorted(query_params))
            self._sorted_params = cached
        return not has_key_with_prefix(cached[1], prefix)

    parser._gonna_recurse = gonna_recurse
    setattr(parser, _INSTALLED, True)


_partition = threading.local()  # the hash key of the Query under way on this thread, for all_items()


def _register_partition_query(module: ModuleType) -> None:
    table_class = module.Table
    if getattr(table_class, _INSTALLED, False):
        return
    query, all_items = table_class.query, table_class.all_items

    def partition_query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        # moto's own call passes index_name eighth, positionally; a caller may name it.
        index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
        if index_name is None and hash_key is not None and self.range_key_attr:
            _partition.key = hash_key
        try:
            return query(self, hash_key, *args, **kwargs)
        finally:
            _partition.key = None

    def partition_items(self: Any) -> list[Any]:
        key = getattr(_partition, "key", None)
        if key is None:
            return list(all_items(self))
        _partition.key = None  # the Query's one walk over its candidates
        return list(self.items.get(key, {}).values())

    table_class.query = partition_query
    table_class.all_items = partition_items
    setattr(table_class, _INSTALLED, True)


def _register_filter_patterns(module: ModuleType) -> None:
    if getattr(module, _INSTALLED, False):
        return
    # tag_filter_matches looks the function up in its module at each call.
    vars(module)["simple_aws_filter_to_re"] = lru_cache(maxsize=4096)(module.simple_aws_filter_to_re)
    setattr(module, _INSTALLED, True)


def _register_instance_lookup(module: ModuleType) -> None:
    backend = module.InstanceBackend
    if getattr(backend, _INSTALLED, False):
        return
    not_found = module.InvalidInstanceIdError

    def get_instance(self: Any, instance_id: str) -> Any:
        for reservation in list(self.reservations.values()):
            for instance in reservation.instances:
                if instance.id == instance_id:
                    return instance
        raise not_found(instance_id)

    backend.get_instance = get_instance
    setattr(backend, _INSTALLED, True)


def _register_untracked_models(module: ModuleType) -> None:
    base = module.BaseModel
    # Looked up in the class's own namespace: every moto model inherits BaseModel's attributes, and the
    # other patches' markers (on Table, say) must not be read as set.
    if base.__dict__.get(_UNTRACKED, False):
        return

    def untracked_new(cls: type, *args: Any, **kwargs: Any) -> Any:
        instance = super(base, cls).__new__(cls)
        if cls.__module__.startswith("moto.s3."):
            cls.instances_tracked.append(instance)  # type: ignore[attr-defined]
        return instance

    base.__new__ = untracked_new
    setattr(base, _UNTRACKED, True)


def install() -> None:
    when_imported("moto.core.common_models", _register_untracked_models)
    when_imported("moto.core.parse", _register_parser)
    when_imported("moto.core.serialize", _register_serializer)
    when_imported("moto.ec2.models.core", _register_tags)
    when_imported("moto.dynamodb.models.table", _register_partition_query)
    when_imported("moto.ec2.utils", _register_filter_patterns)
    when_imported("moto.ec2.models.instances", _register_instance_lookup)


install()
