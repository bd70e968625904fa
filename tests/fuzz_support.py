"""Test helper for the seeded fuzz tests: run one case under a CPU-time limit and tally what happened.

Every case ends in one of: `rejected` (a clean error of an allowed type with a message), `accepted`,
`traceback` (any other exception escaped), `hang` (over the CPU-time limit), or `invalid-accepted` (an input
built to be invalid was accepted). A fuzz test asserts the last three are zero and prints the tally.
Cases are bounded by the CPU time this process spends (ITIMER_PROF), never by wall time: a loaded machine
slows a case down but does not make it fail. A case that blocks without spending CPU is no longer possible
for file inputs (traces/parsing.py refuses FIFOs and devices before reading); pytest-timeout catches the rest.
"""
from __future__ import annotations

import signal
import traceback
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

BAD_OUTCOMES = ("traceback", "hang", "invalid-accepted")


class CaseTimeout(BaseException):
    """Raised inside a case that runs past its time limit (BaseException: code under test cannot swallow it)."""


@contextmanager
def cpu_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block with CaseTimeout after it spent `seconds` of CPU time (ITIMER_PROF: user + system
    time of this process; main thread, POSIX)."""
    def _alarm(signum, frame):
        raise CaseTimeout()

    old = signal.signal(signal.SIGPROF, _alarm)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


def cpu_seconds() -> float:
    """CPU time this process has spent (user + system), for budgets of whole fuzz campaigns."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass
class FuzzTally:
    """Outcome counts and the first few examples of each bad outcome."""

    name: str
    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def run(self, label: str, case: Callable[[], Any], *, clean: tuple[type[BaseException], ...],
            must_reject: bool, cpu_s: float = 5.0, check_accepted: Callable[[Any], None] | None = None,
            check_message: Callable[[BaseException], str | None] | None = None) -> str:
        """Run `case()`; `clean` are the error types a user may see (with a non-empty message).
        `check_accepted(result)` may raise AssertionError for an accepted result that is inconsistent;
        `check_message(error)` returns a complaint about a clean error's message (e.g. it names no file)."""
        try:
            with cpu_limit(cpu_s):
                result = case()
        except CaseTimeout:
            return self._bad("hang", label, f"no answer within {cpu_s} s of CPU time")
        except clean as e:
            complaint = None if str(e).strip() else "empty message"
            if complaint is None and check_message is not None:
                complaint = check_message(e)
            if complaint:
                return self._bad("traceback", label, f"{type(e).__name__}: {e} -- {complaint}")
            self.counts["rejected"] += 1
            return "rejected"
        except Exception as e:  # noqa: BLE001 - counting what escapes is the point
            tb = traceback.format_exc(limit=-3)
            return self._bad("traceback", label, f"{type(e).__name__}: {e}\n{tb}")
        if must_reject:
            return self._bad("invalid-accepted", label, "accepted")
        if check_accepted is not None:
            try:
                check_accepted(result)
            except AssertionError as e:
                return self._bad("invalid-accepted", label, f"accepted but inconsistent: {e}")
        self.counts["accepted"] += 1
        return "accepted"

    def _bad(self, kind: str, label: str, detail: str) -> str:
        self.counts[kind] += 1
        self.examples.setdefault(kind, [])
        if len(self.examples[kind]) < 5:
            self.examples[kind].append(f"{label}: {detail[:600]}")
        return kind

    def report(self) -> str:
        parts = ", ".join(f"{k} {self.counts[k]}" for k in ("rejected", "accepted", *BAD_OUTCOMES))
        lines = [f"{self.name}: {sum(self.counts.values())} cases: {parts}"]
        for kind, ex in self.examples.items():
            lines += [f"  {kind}:"] + [f"    {e}" for e in ex]
        return "\n".join(lines)

    def assert_clean(self, min_cases: int) -> None:
        """Print the tally; fail when any bad outcome occurred or fewer than `min_cases` ran."""
        print(self.report())
        total = sum(self.counts.values())
        assert total >= min_cases, f"only {total} cases ran\n{self.report()}"
        assert not any(self.counts[k] for k in BAD_OUTCOMES), self.report()
        assert self.counts["rejected"] > 0, f"nothing was rejected: the mutations are not reaching the checks\n" \
                                            f"{self.report()}"
