"""``python3 -m airlock_worker TARGET``: serve TARGET's ``Worker``."""

from .entry import main

main()
