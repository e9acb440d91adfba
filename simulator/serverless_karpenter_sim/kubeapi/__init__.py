"""A simulated Kubernetes API server that the official python client talks to unchanged."""

from .audit import Audit, BudgetViolation, EvictionRecord
from .errors import ApiError
from .faults import FaultInjector, FaultRule
from .server import KubeApiServer, client_configuration
from .store import Query, Store

__all__ = [
    "ApiError",
    "Audit",
    "BudgetViolation",
    "EvictionRecord",
    "FaultInjector",
    "FaultRule",
    "KubeApiServer",
    "Query",
    "Store",
    "client_configuration",
]
