"""How many examples the long property and fuzz runs try in this session.

Two Hypothesis profiles name the session: ``ci``, which scripts/test.sh (what CI runs)
loads with ``--hypothesis-profile=ci``, and ``fast``, which tests/conftest.py loads for
every other run (the inner loop of docs/contributing.md). Both keep Hypothesis's own
settings; what differs is ``budget``: a long run (the loader fuzzer's 1,000 inputs, the
knowledge-base state machine) tries its full budget under ``ci`` and a smoke budget,
the same code on fewer examples, under ``fast``. pytest prints the profile in its header.

Its own module because conftest.py registers the profiles and the test modules read the
budget when they are imported (after pytest has loaded the profile an option names).
"""

from __future__ import annotations

from hypothesis import settings

CI = "ci"
FAST = "fast"


def register_profiles() -> None:
    """Register ``ci`` and ``fast`` (Hypothesis's defaults both) and load ``fast``;
    ``--hypothesis-profile=ci`` loads the other after this."""
    settings.register_profile(CI)
    settings.register_profile(FAST)
    settings.load_profile(FAST)


def full_budgets() -> bool:
    """Whether this session runs the long tests at their full budget (the ``ci`` profile,
    also when ``--hypothesis-verbosity`` or ``--hypothesis-explain`` renamed it)."""
    name = settings.get_current_profile_name()
    return name == CI or name.startswith(f"{CI}-with-")


def budget(*, ci: int, fast: int) -> int:
    """``ci`` examples under the ``ci`` profile, ``fast`` under any other."""
    return ci if full_budgets() else fast
