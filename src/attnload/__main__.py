"""``python -m attnload`` is the ``attnload`` command."""

import sys

from attnload.cli import main

sys.exit(main())
