"""What `bisect` answers, and what it is asked: the answer's kinds and exit codes, the query (GOOD, BAD, what to
measure), the answer itself (`Search`), and the most comparisons a search may take."""
from __future__ import annotations

import dataclasses
import math

from .steps import SKIPPED, RowStep, Step

NO_REGRESSION, CULPRIT, INCONCLUSIVE, UNDECIDED = "no regression", "culprit", "inconclusive", "undecided"
EXIT = {NO_REGRESSION: 0, CULPRIT: 1, INCONCLUSIVE: 3, UNDECIDED: 4}
ENDPOINTS, SEARCH, AGAINST_BAD, CONFIRM = "endpoints", "search", "against BAD", "confirm"  # what a step is for


def comparison_budget(commits: int) -> int:
    """The most comparisons a search over `commits` commits may take: endpoints, one a halving, one more a halving
    for an UNKNOWN step asked the other way, the confirmation."""
    return 2 * math.ceil(math.log2(max(commits, 1))) + 3


@dataclasses.dataclass(frozen=True)
class Query:
    """What to search: GOOD and BAD (revisions), the implementations (`--impl`; a plug-in's own by default), a
    pytest -k expression narrowing the preset, or the rows of a `continuous --json` verdict (impl, case) that were
    slower; the environment cache and a gate config, as `continuous` takes them."""

    good: str
    bad: str = "HEAD"
    impl: tuple[str, ...] = ()
    select: str | None = None
    rows: tuple[tuple[str, str], ...] = ()
    env_cache: str | None = None
    config: str | None = None
    package: str | None = None
    versions: tuple[str, ...] | None = None
    pre: bool = False
    options: tuple[str, ...] = ()  # the command line's other options, for a search an answer suggests (a merge's)


@dataclasses.dataclass
class Search:
    """The answer: NO_REGRESSION, CULPRIT, INCONCLUSIVE or UNDECIDED, the culprit (hash and subject) or the
    commits it is among, the rows under test with their endpoint ratios, every step, and what differs between the
    culprit and its parent."""

    good: str
    bad: str
    commits: list[str]
    answer: str = NO_REGRESSION
    rows: tuple[RowStep, ...] = ()
    steps: list[Step] = dataclasses.field(default_factory=list)
    culprit: str | None = None
    among: list[str] = dataclasses.field(default_factory=list)
    files: list[str] = dataclasses.field(default_factory=list)
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    unit: str = "commit"
    undecided: list[str] = dataclasses.field(default_factory=list)  # rows neither slower nor clear at the endpoints
    ids: dict[str, str] = dataclasses.field(default_factory=dict)  # each name above -> its full commit hash (version)
    settings: dict = dataclasses.field(default_factory=dict)  # what the steps' verdicts depend on (`settings_of`)
    state: dict = dataclasses.field(default_factory=dict)  # what the endpoints decided: rows, floor, selection

    @property
    def exit_code(self) -> int:
        return EXIT[self.answer]

    @property
    def comparisons(self) -> int:
        return sum(s.verdict != SKIPPED for s in self.steps)
