"""pytest configuration for the commux Python test suite.

* ``COMMUX_TEST_BACKEND`` selects the backend (default ``ucx``); use
  ``COMMUX_TEST_BACKEND=gloo`` to validate the backend-agnostic tests while
  commux is not built.
* ``@pytest.mark.ucx_only``: the test is specific to commux and is skipped
  when another backend is under test.
* ``@pytest.mark.large``: >2 GiB message tests; they run by default and can be
  deselected with ``-m "not large"``.
* Every test gets a ``pytest.mark.timeout`` backstop (``DEFAULT_TIMEOUT_S``)
  unless it sets its own, so that a hung test can never stall the suite even
  when this directory's pytest.ini is not picked up (e.g. when pytest is run
  from the repository root).  The harness' own hard timeout (per
  ``run_ranks`` call) is always shorter and gives better diagnostics.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402

DEFAULT_TIMEOUT_S = 180


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "ucx_only: test is specific to the commux (ucx) backend"
    )
    config.addinivalue_line(
        "markers", "large: test moves more than 2 GiB (deselect with -m 'not large')"
    )
    config.addinivalue_line(
        "markers",
        "upstream: runs tests of PyTorch's own distributed suite (deselect with -m 'not upstream')",
    )
    config.addinivalue_line(
        "markers",
        "long: minutes of building or waiting; scripts/test.sh leaves them to COMMUX_LONG_TESTS=1",
    )
    config.addinivalue_line("markers", "timeout(seconds): pytest-timeout limit")


def pytest_report_header(config):
    return f"commux test backend: {harness.BACKEND!r} (COMMUX_TEST_BACKEND)"


def pytest_collection_modifyitems(config, items):
    skip_ucx = pytest.mark.skip(
        reason=f"ucx-specific test; backend under test is {harness.BACKEND!r}"
    )
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT_S))
        if item.get_closest_marker("ucx_only") is not None and not harness.is_ucx():
            item.add_marker(skip_ucx)
