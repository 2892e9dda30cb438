"""`python -m radix ...`: see radix/cli.py."""

import sys

from radix.cli import main

sys.exit(main())
