"""``python -m lat_core.runner --exit-file F -- argv...`` (see :mod:`lat_core.runner.detached`)."""

import sys

from lat_core.runner.detached import main

if __name__ == "__main__":
    sys.exit(main())
