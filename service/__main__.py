"""``python -m service``: the ``novikoff`` command."""

from service.cli.main import main

raise SystemExit(main())
