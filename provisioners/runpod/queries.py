"""RunPod's GraphQL API with every campaign value sent as a GraphQL variable.

The runpod SDK's transport (``runpod.api.graphql.run_graphql_query``) posts ``{"query": ...}``
only, and its helpers (``create_pod``, ``get_pod``, ``terminate_pod``) paste their arguments into
the query text with f-strings: an image name, pod name or env value holding ``"`` or ``}`` would
change the query. So the queries here are constants, and ``post`` sends the values beside them
as ``variables`` (the GraphQL-over-HTTP form RunPod's endpoint accepts), where the server reads
them as data whatever they contain. The transport matches the SDK's otherwise (URL from
``RUNPOD_API_BASE_URL``, bearer key, 30 s timeout) and raises the SDK's own errors: a 401 is
``runpod.error.AuthenticationError``, an answer with ``errors`` ``runpod.error.QueryError``.
"""

from __future__ import annotations

import os
from typing import Any

_POD_FIELDS = """id name costPerHr desiredStatus gpuCount vcpuCount imageName machineId podType
    runtime { ports { ip isIpPublic privatePort publicPort type } }"""

GPU_TYPES = """query GpuTypes($gpuTypeId: String) {
  gpuTypes(input: {id: $gpuTypeId}) { id securePrice communityPrice secureCloud communityCloud }
}"""
"""One GPU type's on-demand prices per cloud."""
GPU_TYPE_IDS = """query GpuTypeIds { gpuTypes { id } }"""
"""Every GPU type id (the SDK's ``get_gpus`` query, less the fields unused here)."""
DEPLOY_ON_DEMAND = """mutation DeployOnDemand($input: PodFindAndDeployOnDemandInput!) {
  podFindAndDeployOnDemand(input: $input) { id costPerHr podType machineId }
}"""
POD = f"""query Pod($podId: String!) {{ pod(input: {{podId: $podId}}) {{ {_POD_FIELDS} }} }}"""
PODS = f"""query Pods {{ myself {{ pods {{ {_POD_FIELDS} }} }} }}"""
TERMINATE = """mutation Terminate($podId: String!) { podTerminate(input: {podId: $podId}) }"""
QUERIES = (GPU_TYPES, GPU_TYPE_IDS, DEPLOY_ON_DEMAND, POD, PODS, TERMINATE)
"""Every query text this module sends: a test checks that nothing else goes over the wire."""


def base_url() -> str:
    """RunPod's API as the SDK finds it: ``RUNPOD_API_BASE_URL``, else https://api.runpod.io."""
    return os.environ.get("RUNPOD_API_BASE_URL", "https://api.runpod.io")


def post(query: str, variables: dict[str, Any], api_key: str) -> dict[str, Any]:
    """The answer's ``data``. Raises the SDK's AuthenticationError (401) or QueryError (GraphQL
    errors); a ``requests.exceptions.RequestException`` for what may pass on retry (no answer,
    an unreadable one, or one without ``data``: a 429 or 5xx body)."""
    import requests
    from runpod import error
    from runpod.user_agent import USER_AGENT

    url = f"{base_url()}/graphql"
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT, "Authorization": f"Bearer {api_key}"}
    response = requests.post(url, headers=headers, json={"query": query, "variables": variables}, timeout=30)
    if response.status_code == 401:
        raise error.AuthenticationError("Unauthorized request, please check your API key.")
    answer = response.json()  # unreadable: requests.exceptions.JSONDecodeError
    if isinstance(answer, dict) and answer.get("errors"):
        raise error.QueryError(answer["errors"][0]["message"], query)
    if not isinstance(answer, dict) or not isinstance(answer.get("data"), dict):
        raise requests.exceptions.InvalidJSONError(f"an answer without data (HTTP {response.status_code})")
    return dict(answer["data"])
