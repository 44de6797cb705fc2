"""``python -m hybridkb``: the same command line as ``hybridkb``."""

from .cli.commands import main

if __name__ == "__main__":
    raise SystemExit(main())
