"""`python -m app` is the `cairn` command."""

import sys

from app.cli import main

sys.exit(main())
