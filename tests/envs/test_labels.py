"""Invalid and dead-end labels on hand-checked states, one small world per family."""

from __future__ import annotations

from worker.envs.grid import GridState, GridWorld
from worker.envs.rebalance import RebalanceState, RebalanceWorld
from worker.envs.route import ROUTES, Request, RouteState, RouteWorld
from worker.envs.route import STYLES as ROUTE_STYLES
from worker.envs.schedule import STYLES as SCHEDULE_STYLES
from worker.envs.schedule import Job, ScheduleState, ScheduleWorld
from worker.envs.verify import TAGS as VERIFY_TAGS
from worker.envs.verify import VerifyWorld


def labels(world, state) -> dict[str, str]:
    """action -> 'invalid: reason' | 'dead_end' | 'best' | 'worse'."""
    out = {}
    for a in world.assess(state):
        if a.invalid:
            out[a.action] = f"invalid: {a.invalid_reason}"
        elif a.dead_end:
            out[a.action] = "dead_end"
        else:
            out[a.action] = "best" if a.score == 1.0 else "worse"
    return out


# ---- grid --------------------------------------------------------------------------------------
# S(0,0) must fetch key a at (1,0) to pass door A at (2,1); the pit ~ is at (0,2); G is (3,0).
KEY_MAP = ["Sa#G", "..A.", "~.##"]


def test_grid_walls_edges_locked_doors_pits_and_budget_are_labelled() -> None:
    world = GridWorld.from_rows("grid-hand", KEY_MAP, slack=0)
    start = world.reset(0)
    assert (start.pos, start.goal, start.steps_left) == ((0, 0), (3, 0), 5)
    assert labels(world, start) == {
        "move_n": "invalid: edge",
        "move_s": "dead_end",  # going down first needs 6 more moves, 4 are left
        "move_e": "best",  # picks up the key
        "move_w": "invalid: edge",
    }
    assert world.oracle_action(start) == "move_e"
    at_key = world.transition(start, "move_e")
    assert at_key.keys == "a"
    assert labels(world, at_key)["move_e"] == "invalid: wall"
    no_key = GridState((1, 1), (3, 0), "", 20)
    assert labels(world, no_key)["move_e"] == "invalid: door A is locked"
    assert labels(world, GridState((1, 1), (3, 0), "a", 20))["move_e"] == "best"
    assert labels(world, GridState((0, 1), (3, 0), "", 20))["move_s"] == "dead_end"  # the pit


def test_grid_slack_turns_a_detour_from_dead_end_into_a_worse_move() -> None:
    world = GridWorld.from_rows("grid-hand", KEY_MAP, slack=2)
    start = world.reset(0)
    assert labels(world, start)["move_s"] == "worse"
    scores = {a.action: a.score for a in world.assess(start)}
    assert scores == {"move_n": 0.0, "move_s": round(1 / 3, 4), "move_e": 1.0, "move_w": 0.0}


# ---- rebalance ---------------------------------------------------------------------------------
def rebalance_world() -> RebalanceWorld:
    return RebalanceWorld(
        "rebalance-hand",
        tickers=["AAA", "BBB"],
        prices=[100, 300],
        caps=[3, 4],
        fee=10,
        day_slack=0,
        cash_slack=0,
        style={"buy": "buy_{t}", "sell": "sell_{t}", "hold": "hold"},
    )


def test_rebalance_cash_caps_holdings_and_deadline_are_labelled() -> None:
    world = rebalance_world()
    # 3 trades to go (sell 2 AAA, buy 1 BBB), 3 days, cash that covers exactly that plan.
    state = RebalanceState(holdings=(3, 0), target=(1, 1), cash=130, days_left=3)
    assert world.cost_to_go(state) == 3.0
    assert labels(world, state) == {
        "buy_AAA": "invalid: position limit",
        "sell_AAA": "best",
        "buy_BBB": "invalid: not enough cash",
        "sell_BBB": "invalid: nothing to sell",
        "hold": "dead_end",  # 3 trades left to do in 2 days
    }


def test_rebalance_a_trade_that_leaves_the_target_unaffordable_is_a_dead_end() -> None:
    world = rebalance_world()
    state = RebalanceState(holdings=(0, 1), target=(1, 1), cash=115, days_left=5)
    assert labels(world, state) == {
        "buy_AAA": "best",
        "sell_AAA": "invalid: nothing to sell",
        "buy_BBB": "invalid: not enough cash",
        # buying BBB back would cost 310 + the fees: 405 - 300 - 100 - 20 < 0
        "sell_BBB": "dead_end",
        "hold": "worse",
    }
    assert world.cost_to_go(RebalanceState((0, 0), (1, 1), 100, 5)) is None


# ---- schedule ----------------------------------------------------------------------------------
def schedule_world(jobs: tuple[Job, ...]) -> tuple[ScheduleWorld, ScheduleState]:
    world = ScheduleWorld(
        "schedule-hand",
        machines=["m0", "m1"],
        horizon=4,
        maintenance=[0b0001, 0],
        jobs_per_episode=(1, 1),
        deadline_slack=0,
        precedence=0.0,
        job_names="J{i}",
        style=SCHEDULE_STYLES[0],
    )
    return world, ScheduleState(jobs, (0b0001, 0), (), ())


def test_schedule_a_placement_that_strands_a_later_job_is_a_dead_end() -> None:
    jobs = (
        Job("J1", 1, 0, 4, (0, 1), ()),
        Job("J2", 3, 0, 4, (0,), ()),  # fits on m0 only at t1 (t0 is maintenance)
        Job("J3", 1, 0, 4, (1,), (0,)),  # after J1, on m1
    )
    world, state = schedule_world(jobs)
    assert labels(world, state) == {
        "m0@t0": "invalid: maintenance",
        "m1@t0": "best",
        "m0@t1": "dead_end",  # J2 has no 3-slot window left
        "m1@t1": "worse",
        "m0@t2": "dead_end",
        "m1@t2": "worse",
        "m0@t3": "dead_end",
        "m1@t3": "dead_end",  # J3 must start after J1 ends at 4: past the horizon
    }
    after_j1 = world.transition(state, "m1@t2")
    after_j2 = world.transition(after_j1, "m0@t1")
    assert labels(world, after_j1)["m0@t2"] == "invalid: runs past the horizon"
    assert labels(world, after_j1)["m1@t1"] == "invalid: machine not eligible"
    assert labels(world, after_j2)["m1@t1"] == "invalid: before J1 ends"
    assert labels(world, after_j2)["m1@t3"] == "best"


def test_schedule_release_deadline_and_busy_slots_are_invalid() -> None:
    jobs = (Job("J1", 1, 0, 4, (1,), ()), Job("J2", 2, 1, 3, (1,), ()))
    world, state = schedule_world(jobs)
    state = world.transition(state, "m1@t3")
    got = labels(world, state)
    assert got["m1@t0"] == "invalid: before release"
    assert got["m1@t1"] == "best"
    assert got["m1@t2"] == "invalid: misses the deadline"
    assert got["m1@t3"] == "invalid: runs past the horizon"
    world2, state2 = schedule_world((Job("J1", 1, 0, 4, (1,), ()), Job("J2", 2, 0, 4, (1,), ())))
    state2 = world2.transition(state2, "m1@t1")
    assert labels(world2, state2)["m1@t0"] == "invalid: slot taken"
    assert labels(world2, state2)["m1@t2"] == "best"


# ---- route -------------------------------------------------------------------------------------
def route_world() -> RouteWorld:
    return RouteWorld(
        "route-hand",
        intents=["math"],
        cost={"TRM_ONLY": 1, "COMPILE_PROMPT": 2, "TRM_PLUS_LLM": 4, "LLM_DIRECT": 8},
        cap={
            "TRM_ONLY": {"math": 2},
            "COMPILE_PROMPT": {"math": 3},
            "TRM_PLUS_LLM": {"math": 4},
            "LLM_DIRECT": {"math": 5},
        },
        latency_ms={"TRM_ONLY": 20, "COMPILE_PROMPT": 200, "TRM_PLUS_LLM": 500, "LLM_DIRECT": 1500},
        tools={
            "TRM_ONLY": [],
            "COMPILE_PROMPT": ["calc"],
            "TRM_PLUS_LLM": ["calc"],
            "LLM_DIRECT": ["calc", "search"],
        },
        external=["LLM_DIRECT"],
        compiled=["math.arith"],
        adapters={"math": "lora-math-1"},
        experts={
            "TRM_ONLY": "trm-7m",
            "TRM_PLUS_LLM": "qwen",
            "LLM_DIRECT": "big",
            "COMPILE_PROMPT": "compiler",
        },
        session=(2, 2),
        budget_slack=0,
        style=ROUTE_STYLES[0],
        order=list(ROUTES),
    )


PROOF = Request("math", "math.proof", 3, 200, (), False, 3000, "Prove the tricky claim.")
ARITH = Request("math", "math.arith", 1, 20, ("calc",), True, 1000, "Compute 3 * 4 + 5.")


def test_route_privacy_tools_compiled_prompts_quality_and_budget_are_labelled() -> None:
    world = route_world()
    tight = RouteState((PROOF, ARITH), 0, budget_left=6)  # exactly the two cheapest routes
    assert labels(world, tight) == {
        "TRM_ONLY": "dead_end",  # complexity 3 over its cap 2: the request fails
        "TRM_PLUS_LLM": "best",
        "LLM_DIRECT": "dead_end",  # 8 leaves -2, the queued request needs 2
        "COMPILE_PROMPT": "invalid: no compiled prompt for math.proof",
    }
    roomy = RouteState((PROOF, ARITH), 0, budget_left=10)
    assert labels(world, roomy)["LLM_DIRECT"] == "worse"
    second = world.transition(tight, "TRM_PLUS_LLM")
    assert labels(world, second) == {
        "TRM_ONLY": "invalid: route lacks tool calc",
        "TRM_PLUS_LLM": "dead_end",  # costs 4, 2 left
        "LLM_DIRECT": "invalid: private request cannot leave the host",
        "COMPILE_PROMPT": "best",
    }


def test_route_answer_carries_the_router_json_fields() -> None:
    world = route_world()
    state = RouteState((PROOF, ARITH), 0, budget_left=6)
    answer = world.router_answer(state, world.oracle_action(state))
    assert {k: answer[k] for k in answer if k != "rationale"} == {
        "route": "TRM_PLUS_LLM",
        "intent": "math",
        "adapter_id": "lora-math-1",
        "expert_id": "qwen",
        "prompt_family": "math.proof",
        "tool_caps": [],
    }
    assert "cheapest adequate" in answer["rationale"]
    refused = world.router_answer(state, "COMPILE_PROMPT")
    assert "no compiled prompt" in refused["rationale"]


# ---- verify ------------------------------------------------------------------------------------
def verify_world(escalations: int) -> VerifyWorld:
    source = GridWorld.from_rows("grid-hand", KEY_MAP, slack=0)
    style = dict(zip(VERIFY_TAGS, ["accept", "reject", "escalate"], strict=True))
    return VerifyWorld(
        "verify-hand",
        source=source,
        queue=(6, 6),
        escalations=escalations,
        bad_rate=0.5,
        style=style,
        order=list(VERIFY_TAGS),
    )


def test_verify_soundness_comes_from_replaying_the_proposal() -> None:
    world = verify_world(0)
    start = world.source.reset(0)
    assert world.replay(start, ["move_e", "move_s", "move_e", "move_e", "move_n"])
    assert not world.replay(start, ["move_s", "move_e"])  # stops short of the goal
    assert not world.replay(start, ["move_e", "move_e"])  # into a wall
    assert not world.replay(start, ["move_e", "move_s", "move_e", "move_e", "move_n", "move_s"])


def test_verify_wrong_verdicts_are_dead_ends_and_spent_escalations_invalid() -> None:
    world = verify_world(0)
    state = world.reset(0)
    proposals = world.proposals("0")
    assert {p.sound for p in proposals} == {True, False}  # the hand episode mixes both
    for proposal in proposals:
        got = labels(world, state)
        right, wrong = ("accept", "reject") if proposal.sound else ("reject", "accept")
        assert got == {right: "best", wrong: "dead_end", "escalate": "invalid: no escalations left"}
        state = world.transition(state, right)
    assert world.is_success(state)
    with_escalation = verify_world(1)
    assert labels(with_escalation, with_escalation.reset(0))["escalate"] == "worse"
