"""``python -m spinsa.cli``: the same as the ``spinsa`` command."""

import sys

from spinsa.cli import main

if __name__ == "__main__":
    sys.exit(main())
