"""The skip reason a browser test carries on a machine without a browser: tests/browser/conftest.py
skips with it, tests/conftest.py finds it in the reports and says so at the very end."""

BROWSER_SKIP = "browser tests skipped: "
