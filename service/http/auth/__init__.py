"""Access control for the HTTP API: bearer tokens with scopes, and lockout after wrong tokens.

:mod:`service.http.auth.tokens` reads and checks tokens, :mod:`service.http.auth.lockout` counts
failures per client address, and :mod:`service.http.auth.guard` maps routes to scopes and answers
refusals. ``create_app`` wires them in with :func:`service.http.auth.guard.install_access_control`.
"""
