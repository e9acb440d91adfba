"""The invariants part of `simulate`'s report: one row per invariant, and the exit code they make."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

# `simulate`'s exit code when the run finished but an invariant failed (1 is a run that could not finish,
# 2 a scenario that could not be loaded).
EXIT_INVARIANT_FAILED = 3
_SHOWN = 3  # details listed per invariant; the JSON report has them all


def exit_code(report: Mapping[str, Any]) -> int:
    """0 when every invariant held at the end of the run; a run never checked did not pass."""
    invariants = report.get("invariants") or {}
    return 0 if invariants.get("ok") is True else EXIT_INVARIANT_FAILED


def rows(invariants: Mapping[str, Any]) -> list[tuple[str, list[str], str]]:
    """(invariant, its violations, what was measured) for each invariant the simulator checks."""
    inv = invariants
    several = [
        f"nodeclaim {claim} has {len(ids)} instances"
        for claim, ids in inv["claims_with_several_instances"].items()
    ]
    pdb = (
        [f"{inv['pdb_violations']} deletion(s) or eviction(s) broke a budget"]
        if inv["pdb_violations"]
        else []
    )
    return [
        (
            "no instance leaked",
            [*inv["leaked_instances"], *several],
            f"{len(inv['orphans_within_grace'])} within the GC grace",
        ),
        (
            "every pod Running at the end",
            inv["pods_not_running"],
            f"longest pending {inv['max_pending_seconds']:.0f}s",
        ),
        ("no PodDisruptionBudget broken", [*pdb, *inv["pdb_floor_breaches"]], ""),
        (
            "pods evicted by a voluntary disruption replaced in time",
            inv["pods_stranded_by_disruption"],
            f"{inv['disruption_evictions']} evicted, {inv['disruption_pending_pod_seconds']:.0f} pod-seconds "
            f"pending, longest {inv['max_disruption_pending_seconds']:.0f}s "
            f"(bound {inv['disruption_pending_bound_seconds']:.0f}s)",
        ),
        ("no NodePool disruption budget exceeded", inv.get("budget_breaches", []), ""),
        ("drains end within their bound", inv["stuck_drains"], ""),
        (
            "deletions carried through",
            [
                *inv["deletions_not_carried_through"],
                *inv["claims_stuck_deleting"],
                *inv["nodes_with_finalizer_and_no_instance"],
            ],
            "",
        ),
        (
            "no interruption message lost",
            inv["lost_messages"],
            f"{inv['messages_received']} received, {inv['messages_acted_on']} acted on, "
            f"{inv['messages_parked']} parked in the DLQ with a reason",
        ),
        (
            "no Lambda AccessDenied, 403 or unhandled exception",
            inv["lambda_failures"],
            f"{inv['lambda_failures_caused_by_faults']} failure(s) caused by injected faults",
        ),
    ]


def print_invariants(out: Console, report: Mapping[str, Any]) -> None:
    invariants = report.get("invariants")
    if not invariants:
        out.print("[red]invariants: never checked[/red]")
        return
    table = Table(title=f"invariants at t={invariants['at']:.0f}s")
    for column in ("invariant", "held", "detail"):
        table.add_column(column)
    failed = 0
    for name, violations, measured in rows(invariants):
        failed += bool(violations)
        shown = [escape(v) for v in violations[:_SHOWN]]
        if len(violations) > _SHOWN:
            shown.append(f"... and {len(violations) - _SHOWN} more (see --json)")
        detail = "\n".join(shown) or escape(measured)
        table.add_row(name, "[red]no[/red]" if violations else "[green]yes[/green]", detail)
    out.print(table)
    if failed:
        out.print(f"[red]{failed} invariant(s) failed: exit code {EXIT_INVARIANT_FAILED}[/red]")
    else:
        out.print("[green]every invariant held[/green]")
