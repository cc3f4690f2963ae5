"""What `continuous` randomizes, all from one recorded seed: which side runs first in each round, the names of
the sides' scratch folders, and the size of each process's environment.

    schedule = Schedule(seed)          # Schedule.fresh() draws a seed
    schedule.first()   -> "base" | "head"   # the side that starts the next round
    schedule.folders() -> (base's, head's)  # equal-length random names
    schedule.padding() -> "xxxx"            # a random-length value for one process's environment

The order of sides is drawn in blocks of two rounds, one starting with each side in a random order, so over any
even number of rounds both sides start equally often and neither is systematically first. Folder names have the
same length on both sides, so both sides' paths (and PYTHONPATH, sys.path, every path in a traceback) are equally
long. The padding changes the size of each process's environment, which moves the initial stack: a layout effect
then varies from process to process instead of favouring one side for the whole comparison.
"""
from __future__ import annotations

import random
import secrets

SIDES = ("base", "head")
FOLDER_CHARS = 8
MAX_PADDING = 4096  # bytes: a page, so every stack alignment is reachable
PAD_ENV = "SDPA_CONTINUOUS_PAD"
# set to "1" in every process of a side after its first: the suite then times the points without checking them
# against fp64 again or profiling them (the first process did, with the same code, environment and inputs)
REPEAT_ENV = "SDPA_CONTINUOUS_REPEAT"
# set to "1" where no rule of the comparison reads a GEMM ceiling: the suite then measures none (2 s a process)
NO_CEILINGS_ENV = "SDPA_CONTINUOUS_NO_CEILINGS"


class Schedule:
    """A seeded source of every random choice of one comparison; the same seed gives the same choices."""

    def __init__(self, seed: int) -> None:
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"the seed should be a non-negative integer, got {seed!r}")
        self.seed = seed
        self._rng = random.Random(seed)
        self._block: list[str] = []
        self.orders: list[str] = []  # every round's first side, in the order they were drawn

    @classmethod
    def fresh(cls) -> Schedule:
        """A schedule with a newly drawn seed (32 bits, from the operating system)."""
        return cls(secrets.randbits(32))

    def first(self) -> str:
        """The side that runs first in the next round: each block of two rounds has one of each, shuffled."""
        if not self._block:
            self._block = list(SIDES)
            self._rng.shuffle(self._block)
        side = self._block.pop()
        self.orders.append(side)
        return side

    def folders(self) -> tuple[str, str]:
        """Two distinct random folder names of the same length (lower-case hex), for base and head."""
        while True:
            a, b = (f"{self._rng.getrandbits(4 * FOLDER_CHARS):0{FOLDER_CHARS}x}" for _ in SIDES)
            if a != b:
                return a, b

    def padding(self) -> str:
        """A value of random length, 0 to MAX_PADDING - 1 characters, for one process's environment."""
        return "x" * self._rng.randrange(MAX_PADDING)
