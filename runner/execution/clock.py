"""The budget clock (``docs/window.md``, the budget clock): window minutes from event times, and the limits they hit.

The clock's zero is the window's first host action (as recorded in the ledger), and
its "now" is the ledger's clock (``Ledger.now``: the database server's on PostgreSQL),
never earlier than the window's last recorded event (``not_before``): event times and
now come from one clock, so a runner on a machine whose clock is minutes behind or
ahead (a window resumed elsewhere) neither gains nor loses budget. A
site's ``time_scale`` converts wall time to window time: a real site runs at 1.0; the
simulator at 0.01 runs a 75-minute window in 45 seconds, and its budget is enforced in
the same window minutes the plan registers. Pure: the caller passes ``now``.

Limits (plan ``[budget]``):
- ``stop_admitting_min``: no wave starts after it (with ``stop_admitting_if_overrun``,
  seed 003's rule: only if a stage has overrun its registered minutes by then; else the
  window continues to the restore point);
- ``restore_by`` = min(measurement-end limit, hard ceiling - restore reserve): whatever
  is running is cut there and the restore begins, so that it fits the hard ceiling;
- ``per_block_limit_min``: a start running longer is truncated (its running wave is cut,
  partial requests kept as censored) and the next start begins, or (``block_overrun =
  "truncate_experiment"``, seed 003) the experiment ends there. A block's clock starts when
  its arm's start begins (the ``start_arm`` action), so the engine's start counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from ..plan.model import Budget

__all__ = ["BudgetClock", "Limit", "StageClock", "parse_time"]

LimitName = Literal["stop_admitting", "begin_restore", "truncate_block"]


def parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


@dataclass(frozen=True)
class Limit:
    action: LimitName
    at_min: float
    reason: str


@dataclass(frozen=True)
class StageClock:
    """How long the stages the runner times have run so far, in window minutes.

    ``setup_min``: from the first host action to the first start's arm start (so far, while
    none has begun); ``blocks_min``: each begun start's block clock (its arm start to its
    end, or to now while it runs); ``smoke_min``: the smoke stage of its own, timed the same way
    from its first start's arm start.
    """

    setup_min: float = 0.0
    blocks_min: Mapping[str, float] = field(default_factory=dict)
    smoke_min: float | None = None   # the smoke stage of its own, once begun (None: not begun, or none)


@dataclass(frozen=True)
class BudgetClock:
    budget: Budget
    time_scale: float = 1.0

    @property
    def restore_by_min(self) -> float:
        return self.budget.restore_by_min

    @staticmethod
    def not_before(reading: datetime, last_recorded: str | None) -> datetime:
        """The budget's now: the ledger clock's ``reading``, but never before the window's last recorded event.

        Real time has passed every event already recorded, so a clock read as earlier (one
        that is behind the clock that recorded them) cannot give the window more time than
        its own record proves has passed.
        """
        if last_recorded is None:
            return reading
        return max(reading, parse_time(last_recorded))

    def minutes(self, since: datetime | None, now: datetime) -> float:
        """Window minutes elapsed from ``since`` to ``now`` (0 before the clock starts)."""
        if since is None:
            return 0.0
        return (now - since).total_seconds() / 60.0 / self.time_scale

    def real_seconds(self, window_minutes: float) -> float:
        return max(0.0, window_minutes * 60.0 * self.time_scale)

    def overrun(self, stages: StageClock) -> str | None:
        """The first stage that has run longer than its registered minutes (``None``: none has)."""
        setup = self.budget.stage_minutes("setup")
        if setup > 0 and stages.setup_min > setup:
            return f"the setup stages ran {stages.setup_min:.1f} min, over their {setup:g} min"
        for start, minutes in stages.blocks_min.items():
            planned = self.budget.stage_minutes(start=start)
            if planned > 0 and minutes > planned:
                return f"block {start} ran {minutes:.1f} min, over its {planned:g} min"
        smoke = self.budget.stage_minutes("smoke")
        if smoke > 0 and stages.smoke_min is not None and stages.smoke_min > smoke:
            return f"the smoke stage ran {stages.smoke_min:.1f} min, over its {smoke:g} min"
        return None

    def admitting(self, elapsed_min: float, stages: StageClock | None = None) -> Limit | None:
        """The limit that forbids starting a new wave now, if any.

        With ``stop_admitting_if_overrun`` the stop-admitting time stops only a window one
        of whose ``stages`` has overrun (none given: none has).
        """
        if elapsed_min >= self.restore_by_min:
            return Limit("begin_restore", self.restore_by_min,
                         f"elapsed {elapsed_min:.1f} min reached the restore point {self.restore_by_min:g} min "
                         f"(hard ceiling {self.budget.hard_ceiling_min:g} - restore reserve "
                         f"{self.budget.restore_reserve_min:g}, "
                         f"measurement end {self.budget.measurement_end_limit_min:g})")
        if elapsed_min >= self.budget.stop_admitting_min:
            reason = f"elapsed {elapsed_min:.1f} min reached stop-admitting at {self.budget.stop_admitting_min:g} min"
            if self.budget.stop_admitting_if_overrun:
                overran = self.overrun(stages or StageClock())
                if overran is None:
                    return None  # no stage has overrun: continue
                reason += f" and {overran}"
            return Limit("stop_admitting", self.budget.stop_admitting_min, reason)
        return None

    def block_over(self, block_min: float) -> Limit | None:
        limit = self.budget.per_block_limit_min
        if limit is not None and block_min >= limit:
            return Limit("truncate_block", limit, f"block ran {block_min:.1f} min, over its {limit:g}-minute limit")
        return None

    def wave_cut_s(self, elapsed_min: float, block_min: float | None) -> tuple[float, Limit | None]:
        """Real seconds a wave starting now may run before a limit cuts it, and that limit."""
        cuts = [Limit("begin_restore", self.restore_by_min, "the restore point arrived while a wave ran")]
        minutes = [self.restore_by_min - elapsed_min]
        limit = self.budget.per_block_limit_min
        if limit is not None and block_min is not None:
            cuts.append(Limit("truncate_block", limit, f"the block reached its {limit:g}-minute limit mid-wave"))
            minutes.append(limit - block_min)
        index = min(range(len(minutes)), key=lambda i: minutes[i])
        return self.real_seconds(minutes[index]), cuts[index]
