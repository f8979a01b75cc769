"""The worker program: import the target module and serve its ``Worker``."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback

from .define import Worker
from .encode import encode_value
from .frame import frame_chunks
from .serve import Server
from .stdio import exit_now, install_stdout_guard, write_all


def _load(target):
    """Imports ``path/to/file.py`` or ``dotted.module``; returns (module, attribute)."""
    attribute = None
    spec = target
    if ":" in target and not os.path.exists(target):
        spec, attribute = target.rsplit(":", 1)
    if spec.endswith(".py") or os.sep in spec or os.path.exists(spec):
        path = os.path.abspath(spec)
        if not os.path.isfile(path):
            raise FileNotFoundError(f'Cannot load worker module "{spec}": no such file')
        directory = os.path.dirname(path)
        if directory not in sys.path:
            sys.path.insert(0, directory)
        name = os.path.splitext(os.path.basename(path))[0]
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise ImportError(f'Cannot load worker module "{spec}"')
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = importlib.import_module(spec)
    return module, attribute


def _find_definition(module, attribute, target):
    if attribute is not None:
        found = getattr(module, attribute, None)
        if not isinstance(found, Worker):
            raise TypeError(
                f'Worker module "{target}" must define "{attribute}" as a Worker (define_worker(...) or Worker()), found {type(found).__name__}'
            )
        return found
    named = getattr(module, "worker", None)
    if isinstance(named, Worker):
        return named
    found = [value for value in vars(module).values() if isinstance(value, Worker)]
    unique = []
    for value in found:
        if not any(value is seen for seen in unique):
            unique.append(value)
    if len(unique) == 1:
        return unique[0]
    detail = "none" if not unique else f"{len(unique)}; name one with {target}:attribute"
    raise TypeError(
        f'Worker module "{target}" must define one Worker (define_worker(...) or Worker()) at module level, found {detail}'
    )


def _fatal(phase, error):
    try:
        _, wire_out = install_stdout_guard()
        head, attachments, area_bytes = encode_value({"type": "fatal", "id": 0, "phase": phase, "error": error})
        for chunk in frame_chunks(head, attachments, area_bytes):
            write_all(wire_out, chunk)
    except Exception:  # noqa: BLE001 - the parent cannot hear it: stderr alone
        try:
            sys.stderr.write("".join(traceback.format_exception(type(error), error, error.__traceback__)))
        except Exception:  # noqa: BLE001
            pass
    # Once sent, the parent's start error carries the traceback: printing it
    # here too showed it three times (live, in the message, in the tail).
    exit_now(1)


def main(argv=None):
    """Runs ``airlock_worker TARGET``: import TARGET and serve its Worker."""
    install_stdout_guard()
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        sys.stderr.write(
            "usage: python3 airlock_worker.py path/to/worker.py[:attribute]\n"
            "       python3 -m airlock_worker package.module[:attribute]\n"
        )
        exit_now(2)
    target = argv[0]
    try:
        module, attribute = _load(target)
    except BaseException as error:  # noqa: BLE001 - reported to the parent
        _fatal("import", error)
    try:
        definition = _find_definition(module, attribute, target)
    except BaseException as error:  # noqa: BLE001
        _fatal("definition", error)
    Server(definition).run()
