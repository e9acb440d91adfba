"""The soak's fault catalogue and how it is dealt and counted (the soak itself runs for minutes)."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

from serverless_karpenter_sim.faults import CATEGORIES

from benchmarks import soak


def test_the_catalogue_covers_every_category_and_out_of_order_delivery() -> None:
    catalog = soak.fault_catalog()
    present = {next(c for c in CATEGORIES if c in fault) for fault in catalog}
    assert {"ec2", "kube", "dynamodb", "lambda", "crash", "sqs"} <= present
    assert {"sqs": "reorder", "times": 1} in catalog
    assert {"sqs": "duplicate", "times": 2} in catalog


def key(fault: dict[str, Any]) -> str:
    return json.dumps(fault, sort_keys=True)


def test_the_deck_deals_every_kind_once_before_any_comes_again() -> None:
    catalog = soak.fault_catalog()
    deck = soak.FaultDeck(catalog, random.Random(7))
    first_round = [key(deck.draw()) for _ in catalog]
    second_round = [key(deck.draw()) for _ in catalog]

    assert sorted(first_round) == sorted(second_round) == sorted(key(f) for f in catalog)
    assert first_round != [key(f) for f in reversed(catalog)], "shuffled, not dealt in catalogue order"


def test_a_dealt_fault_is_a_copy_the_run_may_change() -> None:
    catalog = soak.fault_catalog()
    deck = soak.FaultDeck(catalog, random.Random(1))
    for _ in catalog:
        deck.draw().clear()
    assert catalog == soak.fault_catalog()


def test_faults_are_counted_by_category_and_add_up() -> None:
    by_kind = Counter(
        {
            "ec2/partial-fleet": 2,
            "kube/500": 1,
            "kube/timeout": 1,
            "dynamodb/throttle": 3,
            "lambda/crash": 1,
            "crash/provisioner.after_nodeclaim_write": 2,
            "sqs/reorder": 1,
        }
    )
    categories = soak.by_category(by_kind)

    assert categories == {"dynamodb": 3, "ec2": 2, "kube": 2, "lambda": 3, "sqs": 1}
    assert sum(categories.values()) == sum(by_kind.values())
