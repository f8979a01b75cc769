"""Runs an airlock Python worker: ``python3 airlock_worker.py TARGET``.

The launcher of the ``airlock_worker`` package, kept in the directory that
holds the package: Python puts this file's directory first on ``sys.path``,
so ``import airlock_worker`` (here and in the worker module) finds the
package beside it, not this file. TARGET is ``path/to/worker.py`` or
``dotted.module``, optionally followed by ``:attribute``; see docs/python.md.
"""

import os
import sys

if __name__ != "__main__":
    raise ImportError(
        "Cannot import airlock_worker: found the launcher airlock_worker.py, not the package;"
        " copy the directory airlock_worker/ beside it"
    )

_PACKAGE = os.path.join(os.path.dirname(os.path.realpath(__file__)), "airlock_worker", "__init__.py")
if not os.path.isfile(_PACKAGE):
    sys.stderr.write(
        f"Cannot start the airlock worker: the package {os.path.dirname(_PACKAGE)}/ is missing;"
        " copy the directory airlock_worker/ beside airlock_worker.py\n"
    )
    sys.exit(2)

from airlock_worker.entry import main  # noqa: E402 - after the check above

main()
