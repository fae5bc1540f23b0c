"""``python -m orsd_gym.cli`` (what ``torchrun -m`` and other launchers call)."""

import sys

from orsd_gym.cli import main

sys.exit(main())
