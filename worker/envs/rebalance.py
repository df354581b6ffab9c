"""`rebalance`: trade a portfolio, one lot a day, onto its target lots under fees and limits.

Each asset has a lot price, a holding, a target holding (the target weights in lots) and a
position cap; every trade pays a fee from cash; each action (a trade, or holding for a day) uses
one day of the deadline. Money is in integer cents so every check is exact.

Invalid: buying without the cash for price + fee, buying past the cap, selling what is not held.
Dead end: a state from which the target cannot be reached in the days left, or cannot be paid for
(selling the surplus first and then buying the shortfall leaves the most cash, so a target is
affordable exactly when that order ends with cash >= 0). A wrong trade costs two days and two fees
to undo; holding costs a day; the world's day and cash slack decide how much of that is survivable.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from worker.envs.base import World, pick_style, seeded_rng

TICKERS = [
    "ACME",
    "BOLT",
    "CRUX",
    "DUNE",
    "ECHO",
    "FERN",
    "GLOW",
    "HALO",
    "IRIS",
    "JADE",
    "KITE",
    "LUMA",
    "MOSS",
    "NOVA",
    "ONYX",
    "PIKE",
    "QUAY",
    "RUNE",
    "SAGE",
    "TIDE",
]
# How each world spells "buy X", "sell X" and "hold".
STYLES = [
    {"buy": "buy_{t}", "sell": "sell_{t}", "hold": "hold"},
    {"buy": "{t}+", "sell": "{t}-", "hold": "wait"},
    {"buy": "BUY.{t}", "sell": "SELL.{t}", "hold": "HOLD"},
    {"buy": "add_{t}", "sell": "trim_{t}", "hold": "skip"},
    {"buy": "long:{t}", "sell": "reduce:{t}", "hold": "pass"},
]


@dataclass(frozen=True, slots=True)
class RebalanceState:
    holdings: tuple[int, ...]
    target: tuple[int, ...]
    cash: int  # cents
    days_left: int


class RebalanceWorld(World):
    family = "rebalance"

    def __init__(
        self,
        world_id: str,
        *,
        tickers: list[str],
        prices: list[int],
        caps: list[int],
        fee: int,
        day_slack: int,
        cash_slack: int,
        style: dict[str, str],
    ):
        self.tickers, self.prices, self.caps, self.fee = tickers, prices, caps, fee
        self.day_slack, self.cash_slack = day_slack, cash_slack
        tags: dict[str, str] = {}
        self._trade: dict[str, tuple[str, int]] = {}
        for i, ticker in enumerate(tickers):
            for verb in ("buy", "sell"):
                action = style[verb].format(t=ticker)
                tags[action] = f"{verb}:{ticker}"
                self._trade[action] = (verb, i)
        tags[style["hold"]] = "hold"
        self._trade[style["hold"]] = ("hold", -1)
        params = {
            "tickers": tickers,
            "prices_cents": prices,
            "caps": caps,
            "fee_cents": fee,
            "day_slack": day_slack,
            "cash_slack_cents": cash_slack,
        }
        super().__init__(world_id, tags, params)

    @classmethod
    def generate(cls, world_id: str, rng: random.Random) -> RebalanceWorld:
        n = rng.randint(3, 6)
        fee = rng.choice([10, 25, 50])
        return cls(
            world_id,
            tickers=rng.sample(TICKERS, n),
            prices=[rng.randint(1, 5) * 100 for _ in range(n)],
            caps=[rng.randint(6, 9) for _ in range(n)],
            fee=fee,
            day_slack=rng.randint(0, 3),
            cash_slack=fee * rng.randint(0, 5),
            style=pick_style(rng, STYLES),
        )

    def reset(self, episode: int | str) -> RebalanceState:
        rng = seeded_rng(self.world_id, "episode", episode)
        n = len(self.tickers)
        target = [rng.randint(0, min(5, cap)) for cap in self.caps]
        holdings = list(target)
        for _ in range(rng.randint(2, 7)):
            i = rng.randrange(n)
            step = rng.choice([-1, 1])
            if 0 <= holdings[i] + step <= self.caps[i]:
                holdings[i] += step
        if holdings == target:
            i = rng.randrange(n)
            holdings[i] = target[i] + 1 if target[i] < self.caps[i] else target[i] - 1
        need = sum(abs(h - t) for h, t in zip(holdings, target, strict=True))
        net = sum((h - t) * p for h, t, p in zip(holdings, target, self.prices, strict=True))
        cash = max(0, need * self.fee - net) + self.cash_slack
        return RebalanceState(tuple(holdings), tuple(target), cash, need + self.day_slack)

    def candidates(self, state: RebalanceState) -> list[str]:
        return list(self.action_tags)

    def why_invalid(self, state: RebalanceState, action: str) -> str | None:
        verb, i = self._trade[action]
        if verb == "buy":
            if state.cash < self.prices[i] + self.fee:
                return "not enough cash"
            if state.holdings[i] + 1 > self.caps[i]:
                return "position limit"
        if verb == "sell" and state.holdings[i] == 0:
            return "nothing to sell"
        return None

    def transition(self, state: RebalanceState, action: str) -> RebalanceState:
        verb, i = self._trade[action]
        holdings, cash = list(state.holdings), state.cash
        if verb == "buy":
            holdings[i] += 1
            cash -= self.prices[i] + self.fee
        elif verb == "sell":
            holdings[i] -= 1
            cash += self.prices[i] - self.fee
        return RebalanceState(tuple(holdings), state.target, cash, state.days_left - 1)

    def step_cost(self, state: RebalanceState, action: str) -> float:
        return 1.0

    def cost_to_go(self, state: RebalanceState) -> float | None:
        pairs = list(zip(state.holdings, state.target, self.prices, strict=True))
        need = sum(abs(h - t) for h, t, _p in pairs)
        final_cash = state.cash + sum((h - t) * p for h, t, p in pairs) - need * self.fee
        if need > state.days_left or final_cash < 0:
            return None
        return float(need)

    def is_success(self, state: RebalanceState) -> bool:
        return state.holdings == state.target

    def observe(self, state: RebalanceState) -> dict[str, Any]:
        total = state.cash + sum(h * p for h, p in zip(state.holdings, self.prices, strict=True))
        return {
            "assets": {
                ticker: {
                    "held": h,
                    "target": t,
                    "price": p,
                    "cap": cap,
                    "weight": round(h * p / total, 3) if total else 0.0,
                    "target_weight": round(t * p / total, 3) if total else 0.0,
                }
                for ticker, h, t, p, cap in zip(
                    self.tickers, state.holdings, state.target, self.prices, self.caps, strict=True
                )
            },
            "cash": state.cash,
            "fee": self.fee,
            "days_left": state.days_left,
        }
