"""``python -m kvdiv.cli``: the ``kvdiv`` command of this checkout."""

from kvdiv.cli import main

if __name__ == "__main__":  # importing the module (tests/test_imports.py) runs nothing
    raise SystemExit(main())
