"""EC2 API calls for the ``aws`` provider: one client per region, bounded retries, plain errors.

- Credentials come from boto3's standard chain (environment, ``AWS_PROFILE``, ``~/.aws/credentials``,
  SSO, instance roles); ``check_credentials`` raises when the chain finds none. The endpoint is
  boto3's own choice (``AWS_ENDPOINT_URL`` points it elsewhere, as the tests do).
- Retries are botocore's "standard" mode: throttling, 5xx, connection errors and timeouts are
  retried with backoff up to ``attempts`` tries; every request has connect and read timeouts.
  ``call_once`` (the launch) is never retried by botocore: EC2 answers ``InsufficientInstanceCapacity``
  with HTTP 500, which standard mode would re-send to the same zone four more times
  (``(reached max retries: 4)`` in the error, github.com/ansible-collections/amazon.aws/issues/1038);
  the caller retries what is worth retrying.
- Every failure of the API becomes an ``AWSError`` carrying the API's error code, typed by one
  table (``CODE_ERRORS``: auth, no capacity in a zone, quota, node gone; unreachable, throttled or
  a 5xx is ``Unavailable``) and
  worded by kind; an error of our own (a wrong parameter, a TypeError) is re-raised as it is.
"""

from __future__ import annotations

from typing import Any

from benchctl.provisioners.base import AuthError, NoCapacity, NodeGone, ProviderError, Unavailable

CREDENTIALS_HELP = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or add a profile to "
                    "~/.aws/credentials (`aws configure`)")
AUTH_CODES = frozenset({"AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch",
                        "ExpiredToken", "RequestExpired", "OptInRequired"})
CAPACITY_CODES = frozenset({"InsufficientInstanceCapacity", "InsufficientCapacity", "UnfulfillableCapacity",
                            "SpotMaxPriceTooLow", "Unsupported", "ReservationCapacityExceeded"})
"""The zone has none to give now (docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html:
InsufficientInstanceCapacity and InsufficientCapacity are server errors, HTTP 500; UnfulfillableCapacity,
no spot capacity matching the request; SpotMaxPriceTooLow, the spot price is above the maximum;
Unsupported, the type is not offered in that zone; ReservationCapacityExceeded, the targeted capacity
reservation has too few instances free): another zone, or later, may have it. SkyPilot's
failover blocks the zone and tries the next (sky/backends/cloud_vm_ray_backend.py,
FailoverCloudErrorHandlerV2); dstack's create_instance tries each zone's subnet in turn and raises
NoCapacityError after the last (src/dstack/_internal/core/backends/aws/compute.py)."""
QUOTA_CODES = frozenset({"VcpuLimitExceeded", "InstanceLimitExceeded", "MaxSpotInstanceCountExceeded",
                         "AddressLimitExceeded"})
"""The account's limit for the region is reached (errors-overview.html: "increase your On-Demand
Instance limit"; MaxSpotInstanceCountExceeded, "the limit on the number of Spot Instances";
AddressLimitExceeded, the Elastic IPs): no zone and no wait helps until the quota is raised or
other instances end."""
TRANSIENT_CODES = frozenset({"RequestLimitExceeded", "InternalError", "InternalFailure", "ServiceUnavailable",
                             "Unavailable", "Throttling"})


class AWSError(ProviderError):
    """An EC2 call failed; ``code`` is the API's error code ('' when it never answered)."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class AWSAuthError(AWSError, AuthError):
    pass


class AWSNoCapacity(AWSError, NoCapacity):
    pass


class AWSUnavailable(AWSError, Unavailable):
    pass


class AWSQuotaExceeded(AWSError):
    """A quota, not a shortage: retrying or moving zone will not help (deliberately not NoCapacity)."""


class AWSNodeGone(AWSError, NodeGone):
    pass


CODE_ERRORS: dict[str, type[AWSError]] = {**dict.fromkeys(AUTH_CODES, AWSAuthError),
                                          **dict.fromkeys(CAPACITY_CODES, AWSNoCapacity),
                                          **dict.fromkeys(QUOTA_CODES, AWSQuotaExceeded),
                                          **dict.fromkeys(TRANSIENT_CODES, AWSUnavailable),
                                          "InvalidInstanceID.NotFound": AWSNodeGone}
"""The one table: an API error code → its typed error (any other code: AWSError). botocore's own
errors: no credentials → AWSAuthError; a parameter our code got wrong → re-raised as it is;
any other (connection, timeout: botocore retried them already) → AWSUnavailable."""


def session() -> Any:
    """A boto3 session on the standard credential chain; ProviderError when that chain has no credentials."""
    import boto3

    made = boto3.session.Session()
    if made.get_credentials() is None:
        raise AuthError(f"aws: no credentials: {CREDENTIALS_HELP}")
    return made


class EC2:
    """One region's EC2 client (botocore clients are thread-safe; make them under one lock); ``service``
    another API's, with the same retries and errors (``pricing``: ``aws.prices``)."""

    def __init__(self, boto_session: Any, region: str, read_timeout_s: float = 30.0, attempts: int = 5,
                 service: str = "ec2") -> None:
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError

        self.region = region
        config = Config(retries={"mode": "standard", "max_attempts": attempts}, connect_timeout=10,
                        read_timeout=read_timeout_s)
        once = config.merge(Config(retries={"mode": "standard", "total_max_attempts": 1}))
        try:
            self.client = boto_session.client(service, region_name=region, config=config)
            self.once = boto_session.client(service, region_name=region, config=once)
        except (BotoCoreError, ValueError) as exc:  # e.g. InvalidRegionError for "us_east_1"
            raise AWSError(f"aws: cannot make an {service.upper()} client for region {region!r}: {exc}; "
                           "fix `region`") from exc

    def call(self, what: str, method: str, **kwargs: Any) -> dict[str, Any]:
        """``client.<method>(**kwargs)``; ``what`` says what for, in the error."""
        try:
            return dict(getattr(self.client, method)(**kwargs))
        except Exception as exc:
            raise _translated(what, self.region, exc) from exc

    def call_once(self, what: str, method: str, **kwargs: Any) -> dict[str, Any]:
        """As ``call``, but one request: botocore retries nothing (see the module doc)."""
        try:
            return dict(getattr(self.once, method)(**kwargs))
        except Exception as exc:
            raise _translated(what, self.region, exc) from exc

    def pages(self, what: str, method: str, **kwargs: Any) -> list[dict[str, Any]]:
        """Every page of a paginated call."""
        try:
            return [dict(page) for page in self.client.get_paginator(method).paginate(**kwargs)]
        except Exception as exc:
            raise _translated(what, self.region, exc) from exc


def _translated(what: str, region: str, exc: Exception) -> Exception:
    """The AWSError for a failed call (``exc`` itself when it is not botocore's)."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        NoCredentialsError,
        ParamValidationError,
        PartialCredentialsError,
    )

    if isinstance(exc, ClientError):
        return _client_error(what, region, exc)
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return AWSAuthError(f"aws: no usable credentials while trying to {what}: {CREDENTIALS_HELP}")
    if isinstance(exc, BotoCoreError) and not isinstance(exc, ParamValidationError):
        return AWSUnavailable(f"aws API unavailable in {region} while trying to {what} (retried): "
                        f"{type(exc).__name__}: {exc}")
    return exc


def _client_error(what: str, region: str, exc: Any) -> AWSError:
    error = exc.response.get("Error", {})
    code, message = str(error.get("Code", "")), str(error.get("Message", ""))
    typed = CODE_ERRORS.get(code, AWSError)
    if typed is AWSAuthError:
        return typed(f"aws refused to {what} in {region} ({code}: {message}): check the credentials "
                        f"({CREDENTIALS_HELP}) and their EC2 permissions", code)
    if typed is AWSNoCapacity:
        return typed(f"aws has no capacity to {what} in {region} now ({code}: {message})", code)
    if typed is AWSQuotaExceeded:
        return typed(f"aws refused to {what} in {region}: an account quota is reached ({code}: {message}); "
                     "raise it in Service Quotas (service ec2, this region) or end other instances", code)
    return typed(f"aws could not {what} in {region} ({code}): {message}", code)
