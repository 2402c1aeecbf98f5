"""The HTTP API: REST routes under /v1, the /v1/events feed, and the in-process agent link.

A new route, the way every route here is written (tests/api/test_fuzz.py fuzzes it from then on):

    @router.post("/things/{thing_id:id}/poke", summary="...", response_model=ThingView, responses=errors(409))
    async def poke_thing(thing_id: ThingIdPath, body: PokeBody, engine: EngineDep) -> JSON:
        return JSON(view_of(await engine.poke(thing_id, body.force)))

- ids in paths are `{x:id}` with a `*IdPath` type; query values use the types of core/api/fields.py
  (QueryText, QueryTime, Cursor...); bodies are models on `_Strict` in schemas.py built from Int,
  Id, Text, Timestamp, FreeJson (strict numbers, bounded ids, times and depth, no NUL);
- a rule across fields (exactly one of a and b) is also written into the model's JSON schema
  (json_schema_extra oneOf/not), so a request the document allows is one the server accepts;
- `response_model=` a model of responses.py (extra="forbid": every field listed) and answer with
  `JSON(...)` (orjson, no per-request validation); 401/403/404/413/422/429 are added to the
  document from the route's shape and access rule (core/api/openapi.py), others via `errors(...)`;
- a row in core/api/access.py RULES (a route without one is refused), and one in the access matrix
  of tests/auth/test_access.py.
"""

from core.api.app import create_app

__all__ = ["create_app"]
