"""The HTTP API: routes, request and response bodies, problems, auth, dashboard.

* :mod:`~service.http.app` — ``create_app``: every route on one engine, runner and metrics;
* :mod:`~service.http.predict` — ``POST /predict`` (its compiled body reader: ``_fastbody``);
* :mod:`~service.http.schemas` — the request and response bodies;
* :mod:`~service.http.problems` — ``application/problem+json`` answers;
* :mod:`~service.http.server` — the uvicorn server with graceful shutdown;
* :mod:`~service.http.dashboard` — the live dashboard page and its history;
* :mod:`~service.http.auth` — bearer tokens, scopes and lockout.
"""
