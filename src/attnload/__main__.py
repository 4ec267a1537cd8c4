"""``python -m attnload`` is the ``attnload`` command."""

import sys

from attnload.commands.cli import main

sys.exit(main())
