"""Access control for the HTTP API: bearer tokens with scopes, and lockout after wrong tokens.

:mod:`service.auth.tokens` reads and checks tokens, :mod:`service.auth.lockout` counts failures
per client address, and :mod:`service.auth.guard` maps routes to scopes and answers refusals.
``create_app`` wires them in with :func:`service.auth.guard.install_access_control`.
"""
