"""``python -m taketurns``: the ``taketurns`` command line."""

import sys

from taketurns._cli.main import main

sys.exit(main())
