"""``python -m service``: the ``novikoff`` command."""

from service.cli import main

raise SystemExit(main())
