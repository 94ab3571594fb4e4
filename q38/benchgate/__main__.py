"""``python -m q38.benchgate``: see :mod:`q38.benchgate.cli`."""

import sys

from q38.benchgate.cli import main

sys.exit(main())
