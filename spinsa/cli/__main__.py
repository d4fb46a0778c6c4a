"""``python -m spinsa.cli``: the same as the ``spinsa`` command."""

import sys

from spinsa.cli import main

sys.exit(main())
