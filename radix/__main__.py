"""`python -m radix ...`: see radix/cli/__init__.py."""

import sys

from radix.cli import main

sys.exit(main())
