"""Typed provider errors: each SDK's exceptions mapped in one table, only transient ones retried,
a node already gone is a typed case, and the CLI prints any provider error as one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from benchctl.provisioners.base import AuthError, NoCapacity, Node, NodeGone, OfferRequest, ProviderError, Unavailable
from benchctl.provisioners.runpod.provider import RunPodProvider, RunPodSettings, error_table
from benchctl.provisioners.vastai import classify as vast_classify
from tests.fakes.runpod_fake import FakeRunPod


def _http_error(status: int) -> requests.exceptions.HTTPError:
    response = requests.Response()
    response.status_code = status
    return requests.exceptions.HTTPError(f"{status}", response=response)


@pytest.mark.parametrize(("exc", "typed"), [
    (("AuthenticationError", "401"), AuthError),
    (("QueryError", "bad", "query"), ProviderError),
    (requests.exceptions.ConnectionError("refused"), Unavailable),
    (requests.exceptions.ReadTimeout("slow"), Unavailable),
    (requests.exceptions.JSONDecodeError("broken", "<html>", 0), Unavailable),
    (TypeError("our bug"), None),
    (KeyError("our bug"), None),
])
def test_runpod_table(exc: BaseException | tuple[str, ...], typed: type[ProviderError] | None) -> None:
    """``exc``: an exception, or the name and arguments of one of runpod.error's (imported here: importing
    the SDK runs py-cpuinfo in a subprocess, a second of CPU that collection would pay on every worker)."""
    from runpod import error as runpod_error

    from benchctl.provisioners.api_retry import by_type

    if isinstance(exc, tuple):
        exc = getattr(runpod_error, exc[0])(*exc[1:])
    assert by_type(error_table())(exc) is typed


@pytest.mark.parametrize(("exc", "typed"), [
    (_http_error(401), AuthError), (_http_error(403), AuthError), (_http_error(404), NodeGone),
    (_http_error(429), Unavailable), (_http_error(502), Unavailable), (_http_error(400), ProviderError),
    (requests.exceptions.ConnectionError("refused"), Unavailable), (TypeError("our bug"), None),
    (ValueError("our bug"), None),
])
def test_vastai_table(exc: BaseException, typed: type[ProviderError] | None) -> None:
    assert vast_classify(exc) is typed


@pytest.fixture
def fake(runpod_fake: FakeRunPod) -> FakeRunPod:
    return runpod_fake


def _provider(tmp_path: Path, sleeps: list[float]) -> RunPodProvider:
    provider = RunPodProvider(tmp_path / "runpod", RunPodSettings())
    provider.sleep = sleeps.append
    return provider


def test_a_bug_in_our_code_surfaces_at_once_not_retried(fake: FakeRunPod, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def broken_post(*args: object, **kwargs: object) -> None:
        calls.append(args)
        raise TypeError("post() got an unexpected keyword argument")

    monkeypatch.setattr(requests, "post", broken_post)
    sleeps: list[float] = []
    with pytest.raises(TypeError, match="unexpected keyword"):
        _provider(tmp_path, sleeps).offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand"))
    assert len(calls) == 1 and sleeps == [], "not retried, not reported as 'API unavailable'"


def test_transient_faults_are_retried_with_the_injected_sleep(fake: FakeRunPod, tmp_path: Path) -> None:
    sleeps: list[float] = []
    fake.faults = ["500"] * 10
    with pytest.raises(Unavailable, match=r"unavailable .* \(retried\)"):
        _provider(tmp_path, sleeps).offers(OfferRequest(gpu="H100_SXM", count=8, market="on-demand"))
    assert len(fake.faults) == 5 and len(sleeps) == 4, "five tries, four waits, none of them real"


def test_terminating_a_node_already_gone_is_success_but_a_refused_key_is_not(fake: FakeRunPod,
                                                                            tmp_path: Path) -> None:
    from benchctl.provisioners.base import Offer

    provider = _provider(tmp_path, [])
    offer = Offer(provider="runpod", offer_id="x", gpu="cpu", count=1, vcpus=1, region="", hourly_usd=0.0, market="")
    gone = Node(provider="runpod", node_id="no-such-pod", token="t", campaign_tag="c", offer=offer)
    provider.terminate(gone)
    fake.faults = ["401"]
    with pytest.raises(AuthError):
        provider.terminate(gone)


CAMPAIGN = """\
name: refused
budget_usd: 5
target: {model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}
defaults: {market: on-demand, max_attempts: 1, image: "example/pytorch:cpu"}
payload:
  phases: [preflight, profile]
  profile: {device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: 2}
matrix:
  - {provider: runpod, gpu: cpu, count: 1}
"""


@pytest.mark.parametrize("fault", ["401", "500"])
def test_a_provider_error_at_run_start_is_one_line_and_exit_1(fake: FakeRunPod, home: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str],
                                                               monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    from benchctl.cli.main import main
    from benchctl.provisioners.runpod import provider as runpod

    monkeypatch.setattr(runpod, "call_api", _no_wait(runpod.call_api))
    path = tmp_path / "refused.yaml"
    path.write_text(CAMPAIGN)
    fake.faults = [fault] * 100  # the API fails on every call of `run` (from the offers for the spend estimate)
    with pytest.raises(SystemExit) as exit_:
        main(["run", str(path), "--yes"])
    err = capsys.readouterr().err
    assert exit_.value.code == 1 and "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "runpod" in line and ("API key" in line if fault == "401" else "unavailable" in line)


def _no_wait(call_api):  # type: ignore[no-untyped-def]
    def fast(*args, **kwargs):  # type: ignore[no-untyped-def]
        return call_api(*args, **{**kwargs, "sleep": lambda s: None})

    return fast


def _client_error(code: str) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": "m"}}, "DescribeInstances")


@pytest.mark.parametrize(("make", "typed"), [
    (lambda: _client_error("AuthFailure"), AuthError),
    (lambda: _client_error("InsufficientInstanceCapacity"), NoCapacity),
    (lambda: _client_error("InvalidInstanceID.NotFound"), NodeGone),
    (lambda: _client_error("InvalidParameterValue"), ProviderError),
    (lambda: __import__("botocore.exceptions").exceptions.EndpointConnectionError(endpoint_url="http://x"),
     Unavailable),
    (lambda: __import__("botocore.exceptions").exceptions.NoCredentialsError(), AuthError),
    (lambda: __import__("botocore.exceptions").exceptions.ParamValidationError(report="bad"), None),
    (lambda: TypeError("our bug"), None),
])
def test_aws_table(make, typed: type[ProviderError] | None) -> None:  # type: ignore[no-untyped-def]
    from benchctl.provisioners.aws.api import _translated

    exc = make()
    translated = _translated("read an instance", "us-east-1", exc)
    if typed is None:
        assert translated is exc, "ours: re-raised as it is"
    else:
        assert isinstance(translated, typed)
        assert not any(isinstance(translated, other) for other in (AuthError, NoCapacity, NodeGone, Unavailable)
                       if other is not typed), "exactly one kind"


def _raised_in_sky() -> ValueError:
    import sky

    try:
        sky.Resources(cpus="abc")
    except ValueError as exc:
        return exc
    raise AssertionError("SkyPilot accepted cpus='abc'")


@pytest.mark.parametrize(("make", "typed"), [
    (lambda: ConnectionError("refused"), Unavailable),
    (lambda: __import__("sky.exceptions").exceptions.ApiServerConnectionError("http://x"), Unavailable),
    (lambda: __import__("sky.exceptions").exceptions.ResourcesUnavailableError("none"), NoCapacity),
    (lambda: __import__("sky.exceptions").exceptions.ClusterDoesNotExist("c"), NodeGone),
    (lambda: __import__("sky.exceptions").exceptions.NoCloudAccessError("no"), AuthError),
    (lambda: __import__("sky.exceptions").exceptions.CloudError("m", "lambda", "E"), ProviderError),
    (_raised_in_sky, ProviderError),
    (lambda: ValueError("ours"), None),
    (lambda: TypeError("ours"), None),
])
def test_skypilot_table(make, typed: type[ProviderError] | None) -> None:  # type: ignore[no-untyped-def]
    from benchctl.provisioners.skypilot.provider import classify

    assert classify(make()) is typed
