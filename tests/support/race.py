"""Runs that race: the same attempt in several threads at once, each with its own name and its
own database connections, as Airflow task processes racing for one ledger lock would."""

from __future__ import annotations

import threading
from collections.abc import Callable


def race(
    attempt: Callable[[str], object],
    refusal: type[BaseException],
    n: int = 8,
    prefix: str = "run",
) -> tuple[list[str], list[str]]:
    """``attempt(name)`` in ``n`` threads at once: (the names that went through, the messages of
    the ``refusal``s). Anything else a thread raises is an error of the test, raised here."""
    won: list[str] = []
    refused: list[str] = []
    errors: list[BaseException] = []

    def one(me: str) -> None:
        try:
            attempt(me)
            won.append(me)
        except refusal as exc:
            refused.append(str(exc))
        except BaseException as exc:  # noqa: BLE001 - handed to the test below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(f"{prefix}-{i}",)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return won, refused
