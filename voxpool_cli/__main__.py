"""`python -m voxpool_cli` = `voxpool`."""

import sys

from voxpool_cli.commands import main

sys.exit(main())
