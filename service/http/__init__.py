"""The HTTP API: routes, request and response bodies, problems, auth, dashboard."""
