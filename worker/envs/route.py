"""`route`: send each request of a session to `TRM_ONLY`, `TRM_PLUS_LLM`, `LLM_DIRECT` or
`COMPILE_PROMPT` under the world's cost, quality, latency, tool and privacy rules.

A world fixes, per route: a cost, a quality cap per intent (the highest complexity it handles), a
latency, the tools it can call, and whether it leaves the host; plus which prompt families have a
compiled prompt. A session is a queue of requests paid from one budget.

Invalid: a private request on an external route, `COMPILE_PROMPT` without a compiled prompt for the
request's family, a route lacking a tool the request needs. Dead end: a route whose quality cap or
latency misses the request (the request fails), or one so expensive that the budget left cannot
pay for the cheapest adequate routes of the requests still queued (the `reserve`). The oracle
takes the cheapest adequate route.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from worker.envs.base import World, pick_style, seeded_rng

ROUTES = ["TRM_ONLY", "TRM_PLUS_LLM", "LLM_DIRECT", "COMPILE_PROMPT"]
STYLES = [
    {r: r for r in ROUTES},
    {r: r.lower() for r in ROUTES},
    dict(zip(ROUTES, ["trm", "trm+llm", "llm", "compile"], strict=True)),
    dict(zip(ROUTES, ["use-trm", "use-trm-llm", "use-llm", "use-compiled"], strict=True)),
    dict(
        zip(
            ROUTES, ["route.local", "route.assisted", "route.remote", "route.compiled"], strict=True
        )
    ),
]
TOOLS = ["calc", "code_exec", "files", "search"]
INTENTS: dict[str, tuple[list[str], list[str]]] = {
    # intent: (prompt families, tools a request of this intent may need)
    "code": (["code.fix", "code.write", "code.explain"], ["code_exec", "files"]),
    "math": (["math.arith", "math.proof"], ["calc"]),
    "lookup": (["lookup.fact", "lookup.docs"], ["search"]),
    "extract": (["extract.fields", "extract.table"], ["files"]),
    "summarize": (["summarize.doc", "summarize.thread"], ["files", "search"]),
    "chat": (["chat.smalltalk", "chat.advice"], []),
}
TEMPLATES = {
    "code.fix": "Fix the {level} bug in this {lang} function that {task}.",
    "code.write": "Write a {level} {lang} function that {task}.",
    "code.explain": "Explain what this {level} {lang} snippet does when it {task}.",
    "math.arith": "Compute {a} * {b} + {c}, a {level} calculation.",
    "math.proof": "Prove the {level} claim that the sum of {a} odd numbers is a square.",
    "lookup.fact": "Look up the {level} fact: when was the {thing} first released?",
    "lookup.docs": "Find in the docs the {level} option that sets the {thing} timeout.",
    "extract.fields": "Extract name, date and total from this {level} {thing} invoice.",
    "extract.table": "Pull the {level} table of {thing} figures out of the attached report.",
    "summarize.doc": "Summarize this {level} {a}-page document about the {thing}.",
    "summarize.thread": "Summarize the {level} thread of {a} messages about the {thing} outage.",
    "chat.smalltalk": "Say something {level} about the {thing} we talked about.",
    "chat.advice": "Give me {level} advice on planning around the {thing}.",
}
LEVELS = ["trivial", "simple", "moderate", "tricky", "hard"]
FILLERS = {
    "lang": ["python", "go", "rust", "sql"],
    "task": ["parses dates", "merges two lists", "retries a request", "dedupes rows"],
    "thing": ["billing service", "router", "cache", "scheduler", "search index"],
}
EXPERTS = {
    "TRM_ONLY": ["trm-tiny", "trm-7m", "ctrl-small"],
    "TRM_PLUS_LLM": ["qwen2.5-1.5b", "smollm2-1.7b", "llama-3.2-3b"],
    "LLM_DIRECT": ["llm-70b", "gpt-large", "claude-big"],
    "COMPILE_PROMPT": ["prompt-compiler", "dspy-compiled", "template-cache"],
}


@dataclass(frozen=True, slots=True)
class Request:
    intent: str
    prompt_family: str
    complexity: int
    tokens: int
    tools: tuple[str, ...]
    private: bool
    latency_budget_ms: int
    prompt_text: str


@dataclass(frozen=True, slots=True)
class RouteState:
    requests: tuple[Request, ...]
    index: int
    budget_left: int
    failed: bool = False


class RouteWorld(World):
    family = "route"

    def __init__(
        self,
        world_id: str,
        *,
        intents: list[str],
        cost: dict[str, int],
        cap: dict[str, dict[str, int]],
        latency_ms: dict[str, int],
        tools: dict[str, list[str]],
        external: list[str],
        compiled: list[str],
        adapters: dict[str, str],
        experts: dict[str, str],
        session: tuple[int, int],
        budget_slack: int,
        style: dict[str, str],
        order: list[str],
    ):
        self.intents, self.cost, self.cap, self.latency_ms = intents, cost, cap, latency_ms
        self.tools, self.external, self.compiled = tools, external, compiled
        self.adapters, self.experts = adapters, experts
        self.session, self.budget_slack = session, budget_slack
        self.route_of = {style[r]: r for r in order}
        params = {
            "intents": intents,
            "cost": cost,
            "cap": cap,
            "latency_ms": latency_ms,
            "tools": tools,
            "external": external,
            "compiled": compiled,
            "adapters": adapters,
            "experts": experts,
            "session": list(session),
            "budget_slack": budget_slack,
        }
        super().__init__(world_id, {style[r]: f"route:{r}" for r in order}, params)

    @classmethod
    def generate(cls, world_id: str, rng: random.Random) -> RouteWorld:
        intents = sorted(rng.sample(sorted(INTENTS), rng.randint(3, 6)))
        families = [f for intent in intents for f in INTENTS[intent][0]]
        order = list(ROUTES)
        rng.shuffle(order)
        prefix = rng.choice(["lora", "adp", "ctl"])
        low = rng.randint(2, 4)
        return cls(
            world_id,
            intents=intents,
            cost={
                "TRM_ONLY": 1,
                "COMPILE_PROMPT": rng.randint(2, 3),
                "TRM_PLUS_LLM": rng.randint(3, 5),
                "LLM_DIRECT": rng.randint(6, 10),
            },
            cap={
                "TRM_ONLY": {i: rng.randint(1, 3) for i in intents},
                "COMPILE_PROMPT": {i: rng.randint(2, 4) for i in intents},
                "TRM_PLUS_LLM": {i: rng.randint(3, 4) for i in intents},
                "LLM_DIRECT": {i: 5 for i in intents},
            },
            latency_ms={
                "TRM_ONLY": rng.randint(2, 6) * 10,
                "COMPILE_PROMPT": rng.randint(15, 40) * 10,
                "TRM_PLUS_LLM": rng.randint(40, 90) * 10,
                "LLM_DIRECT": rng.randint(90, 250) * 10,
            },
            tools={
                "TRM_ONLY": sorted(rng.sample(["calc", "search"], rng.randint(0, 1))),
                "COMPILE_PROMPT": sorted(rng.sample(TOOLS, rng.randint(0, 2))),
                "TRM_PLUS_LLM": sorted(rng.sample(TOOLS, rng.randint(3, 4))),
                "LLM_DIRECT": list(TOOLS),
            },
            external=["LLM_DIRECT"] if rng.random() < 0.5 else ["LLM_DIRECT", "TRM_PLUS_LLM"],
            compiled=sorted(f for f in families if rng.random() < 0.4),
            adapters={i: f"{prefix}-{i}-{rng.randint(1, 9)}" for i in intents},
            experts={r: rng.choice(EXPERTS[r]) for r in ROUTES},
            session=(low, rng.randint(low, 6)),
            budget_slack=rng.randint(0, 6),
            style=pick_style(rng, STYLES),
            order=order,
        )

    # ---- the rules -----------------------------------------------------------------------
    def refusal(self, request: Request, route: str) -> str | None:
        if request.private and route in self.external:
            return "private request cannot leave the host"
        if route == "COMPILE_PROMPT" and request.prompt_family not in self.compiled:
            return f"no compiled prompt for {request.prompt_family}"
        missing = [t for t in request.tools if t not in self.tools[route]]
        if missing:
            return f"route lacks tool {missing[0]}"
        return None

    def adequate(self, request: Request, route: str) -> bool:
        return (
            request.complexity <= self.cap[route][request.intent]
            and self.latency_ms[route] <= request.latency_budget_ms
        )

    def cheapest(self, request: Request) -> int | None:
        costs = [
            self.cost[r]
            for r in ROUTES
            if self.refusal(request, r) is None and self.adequate(request, r)
        ]
        return min(costs) if costs else None

    def draw_request(self, rng: random.Random) -> Request:
        while True:
            intent = rng.choice(self.intents)
            families, needs = INTENTS[intent]
            family = rng.choice(families)
            complexity = rng.randint(1, 5)
            fill = {k: rng.choice(v) for k, v in FILLERS.items()}
            text = TEMPLATES[family].format(
                level=LEVELS[complexity - 1],
                a=rng.randint(3, 99),
                b=rng.randint(3, 99),
                c=rng.randint(3, 99),
                **fill,
            )
            request = Request(
                intent=intent,
                prompt_family=family,
                complexity=complexity,
                tokens=rng.randint(2, 40) * 10 * complexity,
                tools=tuple(t for t in needs if rng.random() < 0.4),
                private=rng.random() < 0.2,
                latency_budget_ms=rng.choice([100, 500, 1000, 3000]),
                prompt_text=text,
            )
            if self.cheapest(request) is not None:
                return request

    def reserve(self, state: RouteState, start: int) -> int:
        return sum(self.cheapest(r) or 0 for r in state.requests[start:])

    # ---- mechanics -----------------------------------------------------------------------
    def reset(self, episode: int | str) -> RouteState:
        rng = seeded_rng(self.world_id, "episode", episode)
        requests = tuple(self.draw_request(rng) for _ in range(rng.randint(*self.session)))
        budget = sum(self.cheapest(r) or 0 for r in requests) + self.budget_slack
        return RouteState(requests, 0, budget)

    def candidates(self, state: RouteState) -> list[str]:
        return list(self.action_tags)

    def why_invalid(self, state: RouteState, action: str) -> str | None:
        return self.refusal(state.requests[state.index], self.route_of[action])

    def transition(self, state: RouteState, action: str) -> RouteState:
        route = self.route_of[action]
        failed = not self.adequate(state.requests[state.index], route)
        return RouteState(
            state.requests, state.index + 1, state.budget_left - self.cost[route], failed
        )

    def step_cost(self, state: RouteState, action: str) -> float:
        return float(self.cost[self.route_of[action]])

    def cost_to_go(self, state: RouteState) -> float | None:
        need = self.reserve(state, state.index)
        if state.failed or state.budget_left < need:
            return None
        return float(need)

    def is_success(self, state: RouteState) -> bool:
        done = state.index == len(state.requests)
        return done and not state.failed and state.budget_left >= 0

    def observe(self, state: RouteState) -> dict[str, Any]:
        request = state.requests[state.index] if state.index < len(state.requests) else None
        return {
            "request": _request_view(request) if request else None,
            "budget_left": state.budget_left,
            "reserve": self.reserve(state, state.index + 1),
            "queued": len(state.requests) - state.index - 1,
            "routes": self._rules(request.intent if request else None),
        }

    def describe(self, state: RouteState) -> dict[str, Any]:
        return {
            "budget": state.budget_left,
            "requests": [_request_view(r) for r in state.requests[state.index :]],
            "routes": self._rules(None),
        }

    def _rules(self, intent: str | None) -> dict[str, Any]:
        """Per route: cost, quality cap (for this intent, or all), latency, tools, external."""
        return {
            r: {
                "cost": self.cost[r],
                "cap": self.cap[r][intent] if intent else self.cap[r],
                "ms": self.latency_ms[r],
                "tools": self.tools[r],
                "external": r in self.external,
                **({"compiled": self.compiled} if r == "COMPILE_PROMPT" else {}),
            }
            for r in ROUTES
        }

    # ---- the router's JSON answer --------------------------------------------------------
    def router_answer(self, state: RouteState, action: str) -> dict[str, Any]:
        """The router JSON object (SPEC §4) for taking `action` at `state`."""
        request = state.requests[state.index]
        route = self.route_of[action]
        return {
            "route": route,
            "intent": request.intent,
            "adapter_id": self.adapters[request.intent] if route.startswith("TRM") else None,
            "expert_id": self.experts[route],
            "prompt_family": request.prompt_family,
            "tool_caps": list(request.tools),
            "rationale": self.rationale(state, route),
        }

    def rationale(self, state: RouteState, route: str) -> str:
        request = state.requests[state.index]
        refusal = self.refusal(request, route)
        if refusal:
            return f"{route} is refused: {refusal}"
        cap = self.cap[route][request.intent]
        if request.complexity > cap:
            return (
                f"{route} fails: complexity {request.complexity} "
                f"over its {request.intent} cap {cap}"
            )
        if self.latency_ms[route] > request.latency_budget_ms:
            return (
                f"{route} fails: {self.latency_ms[route]} ms over the "
                f"{request.latency_budget_ms} ms budget"
            )
        cost, cheapest = self.cost[route], self.cheapest(request)
        after = state.budget_left - cost
        reserve = self.reserve(state, state.index + 1)
        verdict = (
            "cheapest adequate route" if cost == cheapest else f"adequate, cheapest is {cheapest}"
        )
        return (
            f"{request.intent} complexity {request.complexity} fits {route} (cap {cap}); "
            f"cost {cost}, {verdict}; budget {state.budget_left} -> {after}, reserve {reserve}"
        )


def _request_view(request: Request) -> dict[str, Any]:
    return {
        "prompt_text": request.prompt_text,
        "intent": request.intent,
        "prompt_family": request.prompt_family,
        "complexity": request.complexity,
        "tokens": request.tokens,
        "tools": list(request.tools),
        "private": request.private,
        "latency_budget_ms": request.latency_budget_ms,
    }
