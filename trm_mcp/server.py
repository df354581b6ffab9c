"""The MCP server: the tools of `trm_mcp.tools` on the SDK's low-level `Server`, served over
stdio (`trm mcp`), streamable HTTP (`trm mcp --http`), or mounted in the API at /mcp.

The low-level server, not FastMCP: the input schemas are ours (built from the spec models), and
a spec goes to the API unvalidated here so that the error that comes back is the API's, naming
the field, the same one `POST /runs` gives."""

from __future__ import annotations

import contextlib
import hmac
import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import AnyUrl
from starlette.types import ASGIApp, Receive, Scope, Send

from core.schemas.specs import RUN_SPEC, SPEC_MODELS
from trm_mcp.api import Api, ApiFailure
from trm_mcp.prompts import PROMPTS
from trm_mcp.tool_base import compact
from trm_mcp.tools import tools

# Given the HTTP request of a call (None over stdio), the API to call with whose token.
ApiFor = Callable[[Any], Api]

INSTRUCTIONS = (
    "TRM trainer service: trains, benches and hill-climbs small controller models (routers, "
    "action selectors). Each job is a run: start one (submit_run, start_bench), then "
    "wait_for_run until finished, then read_artifact scorecard.json (bench, train) or "
    "summary.json. The prompts train-router, hill-climb, bench-run and decide give ready "
    "steps and specs; spec schemas are resources (trm://schemas/run-spec). Answers are compact; "
    "full=true gives more. Same arguments again return the same run (replayed=true): pass "
    "rerun=true for a new one. Report only numbers a scorecard holds."
)


def env_api(request: Any) -> Api:
    """Over stdio (no request): the environment's token, the operator's own process."""
    if request is not None:
        return caller_api(request)
    return Api.from_env()


def caller_api(request: Any) -> Api:
    """Over HTTP: the caller's own Authorization header, forwarded as it came; never the
    environment's token, which would lend the operator's rights to whoever reaches the port."""
    return Api.for_caller(request.headers.get("authorization"))


def resources() -> dict[str, tuple[str, str]]:
    """uri -> (name, description); the schemas are the ones `trm schemas` writes."""
    out = {"trm://benches": ("benches", "the bench menu: names, what each measures, defaults")}
    out["trm://schemas/run-spec"] = ("run-spec schema", "JSON Schema of any run spec")
    for kind in SPEC_MODELS:
        out[f"trm://schemas/{kind}"] = (f"{kind} spec schema", f"JSON Schema of a {kind} spec")
    return out


def build_server(api_for: ApiFor = env_api) -> Server:
    server: Server = Server("trm", instructions=INSTRUCTIONS)
    table = {tool.name: tool for tool in tools()}

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return [
            types.Tool(name=t.name, description=t.description, inputSchema=t.schema)
            for t in table.values()
        ]

    # validate_input off: the API's own validation answers, naming the field as POST /runs does.
    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        tool = table.get(name)
        if tool is None:
            return error_result({"error": {"code": "not_found", "message": f"no tool {name!r}"}})
        missing = [k for k in tool.schema.get("required", []) if k not in arguments]
        if missing:
            return error_result(
                {
                    "error": {
                        "code": "validation_error",
                        "message": f"{missing[0]}: required",
                        "details": [{"field": m, "message": "required"} for m in missing],
                    }
                }
            )
        api = api_for(server.request_context.request)
        try:
            result = await tool.handler(api, arguments)
        except ApiFailure as failure:
            return error_result(failure.body)
        finally:
            await api.aclose()
        text = result if isinstance(result, str) else compact(result)
        return [types.TextContent(type="text", text=text)]

    @server.list_resources()
    async def list_resources() -> list[types.Resource]:
        return [
            types.Resource(
                uri=AnyUrl(uri), name=name, description=desc, mimeType="application/json"
            )
            for uri, (name, desc) in resources().items()
        ]

    @server.read_resource()
    async def read_resource(uri: AnyUrl) -> list[ReadResourceContents]:
        key = str(uri)
        if key == "trm://benches":
            api = api_for(server.request_context.request)
            try:
                data: Any = await api.json("GET", "/benches")
            finally:
                await api.aclose()
        elif key == "trm://schemas/run-spec":
            data = RUN_SPEC.json_schema()
        elif key.removeprefix("trm://schemas/") in SPEC_MODELS:
            data = SPEC_MODELS[key.removeprefix("trm://schemas/")].model_json_schema()
        else:
            raise ValueError(f"no resource {key}; known: {', '.join(resources())}")
        return [ReadResourceContents(content=json.dumps(data), mime_type="application/json")]

    @server.list_prompts()
    async def list_prompts() -> list[types.Prompt]:
        return [
            types.Prompt(
                name=p.name,
                description=p.description,
                arguments=[
                    types.PromptArgument(name=n, description=d, required=r)
                    for n, d, r in p.arguments
                ],
            )
            for p in PROMPTS.values()
        ]

    @server.get_prompt()
    async def get_prompt(name: str, arguments: dict[str, str] | None) -> types.GetPromptResult:
        prompt = PROMPTS.get(name)
        if prompt is None:
            raise ValueError(f"no prompt {name!r}; known: {', '.join(PROMPTS)}")
        text = prompt.render(arguments or {})
        return types.GetPromptResult(
            description=prompt.description,
            messages=[
                types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))
            ],
        )

    return server


def error_result(body: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=compact(body))], isError=True
    )


async def run_stdio() -> None:
    from mcp.server.stdio import stdio_server

    server = build_server()
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


class StreamableHttp:
    """The streamable HTTP transport as one ASGI app; `lifespan()` must run around serving."""

    def __init__(
        self, api_for: ApiFor = env_api, security: TransportSecuritySettings | None = None
    ) -> None:
        # Stateless: each POST stands alone, so a restarted API or a second API process behind
        # a balancer serves any call; there is nothing to resume between a client's calls.
        self.manager = StreamableHTTPSessionManager(
            app=build_server(api_for),
            json_response=True,
            stateless=True,
            security_settings=security,
        )

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.manager.handle_request(scope, receive, send)


def mounted(api_app: ASGIApp) -> StreamableHttp:
    """For the API's /mcp: calls go to the API in-process with the caller's own token."""

    def api_for(request: Any) -> Api:
        header = request.headers.get("authorization") if request is not None else None
        headers = {"Authorization": header} if header else {}
        # The caller's Host, which the API's own guard already let through to /mcp.
        if request is not None and request.headers.get("host"):
            headers["Host"] = request.headers["host"]
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=api_app),
            base_url="http://trm-api",
            headers=headers,
            timeout=30,
        )
        return Api(client, local_files=False)

    return StreamableHttp(api_for)


LOOPBACK_BINDS = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})


class HttpRefused(Exception):
    """`trm mcp --http` will not start as asked; the message says what to change."""


def host_names(bind: str, allow_hosts: list[str]) -> list[str]:
    """The names a request's Host (and Origin) may carry: the loopback names, the bind address
    itself unless it is a wildcard, and every name the operator allows."""
    names = ["127.0.0.1", "localhost", "[::1]"]
    bare = bind.strip("[]")
    if bare not in WILDCARD_BINDS and bare not in LOOPBACK_BINDS:
        names.append(f"[{bare}]" if ":" in bare else bare)
    for name in allow_hosts:
        name = name.strip().lower()
        if name:
            names.append(f"[{name.strip('[]')}]" if ":" in name.strip("[]") else name)
    return list(dict.fromkeys(names))


def http_security(bind: str, allow_hosts: list[str]) -> TransportSecuritySettings:
    """The Host/Origin allow-list, on every bind: a page that rebinds a name to this address,
    or posts to it from another origin, is refused (421 / 403)."""
    names = host_names(bind, allow_hosts)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[h for n in names for h in (n, f"{n}:*")],
        allowed_origins=[
            o for n in names for s in ("http", "https") for o in (f"{s}://{n}", f"{s}://{n}:*")
        ],
    )


def required_token(bind: str, token: str | None) -> str | None:
    """The token every HTTP caller must present: TRM_API_TOKEN when set. Without one only a
    loopback bind may serve (the machine's own users), or anyone who can reach the port would
    drive the API through it."""
    if token:
        return token
    if bind.strip("[]") not in LOOPBACK_BINDS:
        raise HttpRefused(
            f"trm mcp --http --host {bind}: serving beyond loopback needs TRM_API_TOKEN set "
            "(callers then send it as their bearer token); or bind 127.0.0.1"
        )
    return None


class TokenGate:
    """Refuses (401) an HTTP caller whose bearer token is not the one required."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token and scope["type"] == "http":
            sent = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(sent, f"Bearer {self.token}".encode()):
                body = compact(
                    {
                        "error": {
                            "code": "unauthorized",
                            "message": (
                                "send the server's TRM_API_TOKEN as the bearer token "
                                "(Hermes: mcp_servers.trm.headers)"
                            ),
                        }
                    }
                )
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body.encode()})
                return
        await self.app(scope, receive, send)


def run_http(host: str, port: int, allow_hosts: list[str] | None = None) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import Route

    token = required_token(host, os.environ.get("TRM_API_TOKEN"))
    transport = StreamableHttp(caller_api, security=http_security(host, allow_hosts or []))

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with transport.lifespan():
            yield

    app = Starlette(routes=[Route("/mcp", TokenGate(transport, token))], lifespan=lifespan)
    uvicorn.run(app, host=host.strip("[]"), port=port, log_level="warning")
