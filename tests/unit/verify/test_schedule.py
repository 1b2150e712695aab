"""The nemesis schedule: every enabled kind is dealt once first (so a short run covers them all, clock faults
included), a kind that found no target is dealt again later, then kinds are drawn at random."""

from __future__ import annotations

import random
from typing import Any

from odradek_verify.nemesis import ALL_KINDS, CLOCK_KINDS, SCENARIOS, FaultEvent, Nemesis, NemesisConfig
from odradek_verify.workload import History


class _FakeCluster:
    clock_lib = None

    def zk_client(self, **_: Any) -> None:
        return None


def _schedule(kinds: list[str], n: int, no_target: set[str] | None = None, seed: int = 3,
              skipped: dict[str, str] | None = None) -> list[str]:
    config = NemesisConfig(kinds, quiet_min_s=0.0, quiet_max_s=0.0, seed=seed, skipped=skipped or {})
    nemesis = Nemesis(_FakeCluster(), "t", 3, config, History(), None, None)  # type: ignore[arg-type]
    dealt: list[str] = []
    refused = dict.fromkeys(no_target or set(), 1)  # each refuses once, then runs

    def run_fault(kind: str, rng: random.Random) -> FaultEvent | None:
        dealt.append(kind)
        if len(dealt) >= n:
            nemesis.stop_event.set()
        if refused.get(kind):
            refused[kind] -= 1
            return None
        return FaultEvent(len(dealt), kind, "b1", 0.0)

    nemesis.run_fault = run_fault  # type: ignore[method-assign]
    nemesis._loop(random.Random(seed))
    return dealt


def test_the_clock_kinds_are_in_the_default_scenario() -> None:
    assert set(CLOCK_KINDS) == {"clock-jump", "clock-strobe"}
    assert set(CLOCK_KINDS) <= set(SCENARIOS["all"]) and set(CLOCK_KINDS) <= set(ALL_KINDS)


def test_every_kind_is_dealt_once_before_any_random_draw() -> None:
    kinds = list(SCENARIOS["all"])
    dealt = _schedule(kinds, 3 * len(kinds))
    assert sorted(dealt[: len(kinds)]) == sorted(kinds)
    assert dealt[: len(kinds)] != kinds  # shuffled, by the seed
    assert _schedule(kinds, len(kinds)) == dealt[: len(kinds)]  # and replayable


def test_a_kind_without_a_target_is_dealt_again() -> None:
    kinds = ["kill-broker", "clock-jump", "part-2013"]
    dealt = _schedule(kinds, 4, no_target={"clock-jump"})
    assert sorted(dealt[:3]) == sorted(kinds) and dealt[3] == "clock-jump"


def test_skipped_kinds_are_never_dealt() -> None:
    kinds = ["kill-broker", "clock-jump", "clock-strobe"]
    why = {"clock-jump": "no C compiler", "clock-strobe": "no C compiler"}
    assert set(_schedule(kinds, 10, skipped=why)) == {"kill-broker"}
