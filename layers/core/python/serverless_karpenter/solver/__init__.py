"""The cost solver: repacks the first-fit scheduler's new NodeClaims for a lower $/h, with a proven bound."""

from serverless_karpenter.solver.bound import dual_bound
from serverless_karpenter.solver.improve import SolveReport, claim_cost, default_budget, improve

__all__ = ["SolveReport", "claim_cost", "default_budget", "dual_bound", "improve"]
