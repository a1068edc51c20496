"""`python -m rlxf`: the `rlxf` command, for a machine whose PATH lacks the venv's scripts."""

import sys

from rlxf.cli.main import main

sys.exit(main())
