"""`python -m harness.cli`: the `twin` command."""

import sys

from harness.cli.app import main

sys.exit(main())
