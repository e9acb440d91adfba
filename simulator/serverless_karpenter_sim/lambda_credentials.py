"""Each simulated Lambda signs its AWS calls with its own role's credentials, as on AWS.

A deployed function gets its execution role's session credentials from Lambda (an ``AssumeRole`` session
named after the function). The simulator runs every function in one process, sharing one control plane,
so the credentials are chosen per call: :class:`CallerCredentials` signs with the session of the function
running now (:meth:`FunctionCredentials.acting_as`, entered by the Lambda runtime for each invocation,
nested ones included), and with the administrator's key otherwise: the simulator's own components (the
scenario driver, kubelets, fault injection, invariants) and tests acting on the account directly.

Each role's session is assumed once per simulation through moto's STS, so its access key is distinct and
stable: the IAM enforcement on the moto server (``iam_enforcement``) maps it back to the role, and so can
anything reading an EKS bearer token (a presigned ``GetCallerIdentity`` URL carrying the access key).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

from botocore.credentials import Credentials, ReadOnlyCredentials
from serverless_karpenter import naming

from serverless_karpenter_sim.cloud import DeployedStack, SimulatedCloud

# The function whose invocation is running in this context (the simulation is single-threaded; a nested
# invocation, the watcher's of the provisioner, sets its own name and restores the outer one after).
_running: contextvars.ContextVar[str | None] = contextvars.ContextVar("running_function", default=None)


class FunctionCredentials:
    """The session credentials of each function's role, and the administrator's."""

    def __init__(self, admin: ReadOnlyCredentials, sessions: Mapping[str, ReadOnlyCredentials]) -> None:
        self.admin = admin
        self.sessions = dict(sessions)

    @classmethod
    def assume(
        cls, sts: Any, admin: ReadOnlyCredentials, roles: Mapping[str, str], session_names: Mapping[str, str]
    ) -> FunctionCredentials:
        """Assume each function's role (``roles``: function -> role ARN) as Lambda does, the session named
        after the function."""
        sessions = {}
        for function, role_arn in roles.items():
            issued = sts.assume_role(RoleArn=role_arn, RoleSessionName=session_names[function])["Credentials"]
            sessions[function] = ReadOnlyCredentials(
                issued["AccessKeyId"], issued["SecretAccessKey"], issued["SessionToken"]
            )
        return cls(admin, sessions)

    @contextlib.contextmanager
    def acting_as(self, function: str) -> Iterator[None]:
        """AWS calls made inside sign as ``function``'s role."""
        if function not in self.sessions:
            raise KeyError(f"no role for function {function!r}; the stack deploys {sorted(self.sessions)}")
        token = _running.set(function)
        try:
            yield
        finally:
            _running.reset(token)

    def current(self) -> ReadOnlyCredentials:
        function = _running.get()
        return self.admin if function is None else self.sessions[function]


def function_credentials(cloud: SimulatedCloud, stack: DeployedStack) -> FunctionCredentials:
    """The sessions of the stack's function roles, each named after its function as Lambda names it."""
    admin = cloud.admin  # the account's operator
    names = {function: stack.outputs[naming.function_output(function)] for function in stack.function_roles}
    return FunctionCredentials.assume(cloud.client("sts"), admin, stack.function_roles, names)


class CallerCredentials(Credentials):
    """botocore credentials that are, at each signature, those of the function running (or the admin's)."""

    def __init__(self, functions: FunctionCredentials) -> None:
        self._functions = functions  # first: botocore's constructor reads the properties below
        admin = functions.admin
        super().__init__(
            str(admin.access_key), str(admin.secret_key), admin.token, method="simulated-lambda-role"
        )

    def get_frozen_credentials(self) -> ReadOnlyCredentials:
        return self._functions.current()

    # The attributes some callers read directly, kept in step with the signature's.
    @property
    def access_key(self) -> str:
        return str(self._functions.current().access_key)

    @access_key.setter
    def access_key(self, value: str) -> None:
        pass  # set once by botocore's constructor; the running function decides

    @property
    def secret_key(self) -> str:
        return str(self._functions.current().secret_key)

    @secret_key.setter
    def secret_key(self, value: str) -> None:
        pass

    @property
    def token(self) -> str | None:
        return self._functions.current().token

    @token.setter
    def token(self, value: str | None) -> None:
        pass
