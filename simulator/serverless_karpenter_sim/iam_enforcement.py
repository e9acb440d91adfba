"""IAM enforced on the simulated cloud: each request is authorized as AWS authorizes it, or refused.

moto answers every request, whoever signs it. While :class:`Enforcement` is on, every request to the moto
server in this process is first authenticated by its access key and authorized:

- the account administrator's key (the simulator's own components, tests' assertions) is allowed all;
- a key STS issued by ``AssumeRole`` (each simulated Lambda's role, see ``lambda_credentials``) must come
  with its session token, and is authorized against that role's policies as moto's IAM holds them (the
  stack's, from ``policies.py``) by the same evaluator as ``doctor``'s ``SimulatePrincipalPolicy``; every
  (action, resource) pair the request implies (``iam_requests``) must be allowed;
- any other key is refused as AWS refuses an unknown one.

A refusal has AWS's shape for the service's protocol: EC2's ``UnauthorizedOperation`` (403, XML), the
query services' ``AccessDenied`` (403, XML), the JSON services' ``AccessDeniedException`` (400, or 403 for
the REST ones), with AWS's message naming the assumed-role ARN, the action and the resource.

The check wraps moto's ``BaseResponse.call_action``, which every service but S3 answers through; S3 is not
one our functions call.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from serverless_karpenter_sim import iam_simulation
from serverless_karpenter_sim.iam_requests import Authorization, Call, authorizations

# The ``Credential=<key>/<date>/<region>/<service>/aws4_request`` of a SigV4 Authorization header.
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/\d{8}/([^/]+)/")
# Protocols of the services, as botocore names them; moto serves each in its own.
_EC2 = "ec2"
_QUERY = frozenset({"iam", "sts", "cloudformation", "autoscaling", "elb", "sns", "rds"})
_REST = frozenset({"eks", "lambda", "apigateway", "pricing"})
# JSON services answering AWS's "query-compatible" error header (the AWS Query error code botocore reads).
_QUERY_COMPATIBLE = frozenset({"sqs"})


@dataclass(frozen=True)
class Principal:
    """Who signed a request: the administrator, or a role's session."""

    arn: str  # arn:aws:sts::<account>:assumed-role/<role>/<session>, or the administrator's
    role_arn: str | None  # None: the administrator, allowed everything


@dataclass(frozen=True)
class Refusal:
    """A request AWS would not serve."""

    code: str
    message: str
    status: int


class Enforcement:
    """Whether requests are authorized, and who the administrator is; one per process, like moto's state."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.admin_access_key: str | None = None  # None: enforcement is off, everything is served
        self.denials: list[str] = []  # what was refused, for invariants and tests

    @property
    def on(self) -> bool:
        return self.admin_access_key is not None

    def enable(self, admin_access_key: str) -> None:
        with self._lock:
            self.admin_access_key = admin_access_key
            self.denials.clear()

    def disable(self) -> None:
        with self._lock:
            self.admin_access_key = None

    def record(self, refusal: Refusal) -> None:
        with self._lock:
            self.denials.append(refusal.message)


ENFORCEMENT = Enforcement()


# -- authentication --------------------------------------------------------------------------------------


def _header(response: Any, name: str) -> str:
    headers = response.headers
    return str(headers.get(name) or headers.get(name.lower()) or "")


def _principal(response: Any, access_key: str) -> Principal | None:
    """The role session STS issued ``access_key`` to (its session token must be the request's), or None."""
    from moto.sts.models import sts_backends

    token = _header(response, "X-Amz-Security-Token") or _first(
        response.querystring.get("X-Amz-Security-Token")
    )
    # moto files an assumed role's session under the role's account (which it derives from the key) and
    # partition; STS is global.
    backend = sts_backends[str(response.current_account)]["aws"]
    role = backend.get_assumed_role_from_access_key(access_key)
    if role is not None and role.session_token == token:
        return Principal(role.arn, role.role_arn)
    return None


def _first(values: Any) -> str:
    if isinstance(values, list):
        return str(values[0]) if values else ""
    return str(values or "")


def _signature(response: Any) -> tuple[str, str] | None:
    """(access key, region) of the request's SigV4 signature: header, or presigned query string."""
    match = _CREDENTIAL.search(_header(response, "Authorization"))
    if match:
        return match.group(1), match.group(2)
    credential = _first(response.querystring.get("X-Amz-Credential"))
    if credential.count("/") >= 4:
        key, _, region, *_ = credential.split("/")
        return key, region
    return None


# -- the request -----------------------------------------------------------------------------------------


def _params(response: Any) -> dict[str, Any]:
    """The request's parameters by botocore's member names, however the service is parsed in moto."""
    params = getattr(response, "params", None)
    if params is None or not getattr(response, "automated_parameter_parsing", False):
        parsed_before = "params" in vars(response)
        try:
            response.parse_parameters(response.normalized_request)
            params = response.params
        except Exception:  # a request moto cannot parse is moto's to refuse
            params = {}
        if not parsed_before:
            vars(response).pop("params", None)  # the service parses its own way; leave it as it was
    merged = dict(params or {})
    for key, value in (getattr(response, "uri_match", None) or {}).items():
        merged.setdefault(key, value)
    return merged


def _call(response: Any, region: str) -> Call:
    return Call(
        service=str(response.service_name),
        operation=str(response._get_action()),
        params=_params(response),
        region=region or str(response.region),
        account=str(response.current_account),
    )


def _decide(principal: Principal, call: Call) -> tuple[Authorization, bool] | None:
    """The first pair the principal's policies do not allow, and whether a Deny refused it; None if all
    are allowed."""
    from moto.iam.exceptions import NotFoundException
    from moto.iam.models import iam_backends

    assert principal.role_arn is not None
    backend = iam_backends[call.account][call.partition]
    try:
        policies, boundary = iam_simulation.principal_policies(backend, principal.role_arn)
    except NotFoundException:  # the role was deleted: its sessions have no permissions left
        policies, boundary = [], None
    for pair in authorizations(call):
        decision = iam_simulation.evaluate(policies, pair.action, pair.resource, pair.context, boundary)
        if decision.decision != iam_simulation.ALLOWED:
            return pair, decision.decision == iam_simulation.EXPLICIT_DENY
    return None


def _denied_message(principal: Principal, pair: Authorization, explicit: bool, service: str) -> str:
    reason = (
        "with an explicit deny in an identity-based policy"
        if explicit
        else f"because no identity-based policy allows the {pair.action} action"
    )
    message = (
        f"User: {principal.arn} is not authorized to perform: {pair.action} on resource: {pair.resource} "
        + reason
    )
    if service == _EC2:
        # EC2 adds the decision, encoded; sts:DecodeAuthorizationMessage would read it (not modelled).
        decision = json.dumps({"allowed": False, "explicitDeny": explicit, "action": pair.action})
        encoded = base64.b64encode(decision.encode()).decode()
        return (
            f"You are not authorized to perform this operation. {message}. "
            f"Encoded authorization failure message: {encoded}"
        )
    return message


def refusal(response: Any) -> Refusal | None:
    """Why AWS would refuse this request, or None to serve it."""
    signature = _signature(response)
    service = str(response.service_name)
    if signature is None:
        return Refusal(*_missing_authentication(service))
    access_key, region = signature
    if access_key == ENFORCEMENT.admin_access_key:
        return None
    principal = _principal(response, access_key)
    if principal is None:
        return Refusal(*_unknown_key(service))
    call = _call(response, region)
    denied = _decide(principal, call)
    if denied is None:
        return None
    message = _denied_message(principal, *denied, service)
    if service == _EC2:
        return Refusal("UnauthorizedOperation", message, 403)
    if service in _QUERY:
        return Refusal("AccessDenied", message, 403)
    if service in _QUERY_COMPATIBLE:
        return Refusal("AccessDenied", message, 403)
    return Refusal("AccessDeniedException", message, 403 if service in _REST else 400)


def _missing_authentication(service: str) -> tuple[str, str, int]:
    if service == _EC2:
        return "AuthFailure", "AWS was not able to validate the provided access credentials", 401
    return "MissingAuthenticationToken", "Request is missing Authentication Token", 403


def _unknown_key(service: str) -> tuple[str, str, int]:
    if service == _EC2:
        return "AuthFailure", "AWS was not able to validate the provided access credentials", 401
    if service in _QUERY:
        return "InvalidClientTokenId", "The security token included in the request is invalid.", 403
    return "UnrecognizedClientException", "The security token included in the request is invalid.", 400


# -- the response ----------------------------------------------------------------------------------------


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def error_response(service: str, refusal: Refusal, request_id: str) -> tuple[int, dict[str, str], str]:
    """(status, headers, body) as the service's protocol answers an error."""
    code, message = refusal.code, _xml_escape(refusal.message)
    if service == _EC2:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Response><Errors><Error><Code>{code}</Code><Message>{message}</Message></Error></Errors>"
            f"<RequestID>{request_id}</RequestID></Response>"
        )
        return refusal.status, {"Content-Type": "text/xml;charset=UTF-8"}, body
    if service in _QUERY:
        body = (
            f'<ErrorResponse xmlns="https://{service}.amazonaws.com/doc/">'
            f"<Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>"
            f"<RequestId>{request_id}</RequestId></ErrorResponse>"
        )
        return refusal.status, {"Content-Type": "text/xml"}, body
    headers = {"x-amzn-RequestId": request_id, "x-amzn-ErrorType": f"{code}:"}
    if service in _REST:
        headers["Content-Type"] = "application/json"
        return refusal.status, headers, json.dumps({"Message": refusal.message})
    headers["Content-Type"] = "application/x-amz-json-1.0"
    if service in _QUERY_COMPATIBLE:
        headers["x-amzn-query-error"] = f"{code};Sender"
        error_type = "AccessDeniedException" if code == "AccessDenied" else code
    else:
        error_type = code
    error = {"__type": f"com.amazon.coral.service#{error_type}", "message": refusal.message}
    return refusal.status, headers, json.dumps(error)


# -- installing it in moto -------------------------------------------------------------------------------


def _enforcing(call_action: Callable[[Any], Any]) -> Callable[[Any], Any]:
    # ``__wrapped__`` (set by wraps) marks moto's method as enforced already (``register``).
    @functools.wraps(call_action)
    def call_action_if_authorized(self: Any) -> Any:
        if not ENFORCEMENT.on:
            return call_action(self)
        refused = refusal(self)
        if refused is None:
            return call_action(self)
        ENFORCEMENT.record(refused)
        from moto.utilities.aws_headers import gen_amzn_requestid_long

        return error_response(str(self.service_name), refused, gen_amzn_requestid_long())

    return call_action_if_authorized


def register(responses: Any) -> None:
    base = responses.BaseResponse
    if not hasattr(base.call_action, "__wrapped__"):
        base.call_action = _enforcing(base.call_action)


def install() -> None:
    """Authorize moto's requests in this process (while :data:`ENFORCEMENT` is on), now or on import."""
    iam_simulation.when_imported("moto.core.responses", register)


install()
