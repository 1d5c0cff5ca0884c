"""``python -m verify.cli``: the ``attn-theory`` command."""

from verify.cli import main

raise SystemExit(main())
