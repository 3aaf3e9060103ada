"""``python -m tools.cli``: the ``braid`` command."""

import sys

from tools.cli import main

sys.exit(main())
