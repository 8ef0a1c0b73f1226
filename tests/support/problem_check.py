"""A schemathesis check: every 4xx is an RFC 9457 problem whose ``status`` matches the response.

Loaded by the schemathesis CLI through ``SCHEMATHESIS_HOOKS=tests.support.problem_check``.
"""

from __future__ import annotations

import json
from typing import Any

import schemathesis

PROBLEM_MEDIA_TYPE = "application/problem+json"
CLIENT_ERROR = range(400, 500)


@schemathesis.check
def client_errors_are_problem_details(ctx: Any, response: Any, case: Any) -> None:
    """A 4xx answer has ``Content-Type: application/problem+json`` and ``status`` = the code."""
    if response.status_code not in CLIENT_ERROR:
        return
    content_type = ";".join(response.headers.get("content-type", []))
    if not content_type.startswith(PROBLEM_MEDIA_TYPE):
        raise AssertionError(
            f"{response.status_code} with Content-Type {content_type!r}, not {PROBLEM_MEDIA_TYPE}"
        )
    try:
        problem = json.loads(response.content)
    except ValueError as exc:
        raise AssertionError(f"{response.status_code} body is not JSON: {exc}") from None
    if not isinstance(problem, dict) or problem.get("status") != response.status_code:
        raise AssertionError(f"problem status {problem!r:.200} != {response.status_code}")
    for member in ("type", "title", "detail"):
        if not isinstance(problem.get(member), str):
            raise AssertionError(f"problem has no string {member!r}: {problem!r:.200}")
