"""Where the checkout, the tests and their helpers are, for tests in any folder."""

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
ROOT = TESTS.parent
