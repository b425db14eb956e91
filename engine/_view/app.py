"""The viewer's routes (quart-trio), all ``GET``: nothing a request says can write.

HTML: ``/`` (the runs), ``/run/<id>`` (a run; its filter and ``offset`` in the
query), ``/run/<id>/figures`` (the tables and figures, swapped in live),
``/run/<id>/episode/<line>`` (one transcript, and the env's own sections drawn
over that episode), ``/compare?run=A&run=B...``.
JSON (docs/viewer.md): ``/api/runs``, ``/api/runs/<id>``,
``/api/runs/<id>/summary``, ``/api/runs/<id>/episodes?offset=&limit=`` (and the
filters), ``/api/compare?run=A&run=B``; server-sent events: ``/api/events`` (the
runs table's rows) and ``/api/runs/<id>/events`` (a run's live numbers).

Every response carries a Content-Security-Policy that allows only this server's own
script and style (no inline script runs, whatever an escape might miss). When bound
to a loopback address, a request naming another host (DNS rebinding) is refused.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Collection
from pathlib import Path
from typing import Any

import orjson
import trio
from quart import Response, make_response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import NotFound

from taketurns._errors import BadRequest
from taketurns._output.comparison import compare
from taketurns._output.records import read_episodes
from taketurns._report.markup import esc
from taketurns._report.style import REPORT_CSS
from taketurns._view import pages
from taketurns._view.assets import CSS, JS
from taketurns._view.comparison import comparison_page
from taketurns._view.filters import EpisodeFilter
from taketurns._view.library import Library
from taketurns._view.paging import MAX_LIMIT, find_episodes
from taketurns._view.run import EPISODES, RUNNING, RunView

__all__ = ["create_app"]

log = logging.getLogger(__name__)

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
KEEPALIVE_S = 15.0
PAGE = 50  # transcripts per page


def _int(name: str, default: int, low: int, high: int) -> int:
    text = request.args.get(name, "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name}={text!r}: not an integer; give e.g. {name}={default}") from None
    if not low <= value <= high:
        raise BadRequest(f"{name}={value}: must be between {low} and {high}")
    return value


def _event(name: str, data: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def create_app(library: Library, *, allowed_hosts: Collection[str] | None = None) -> QuartTrio:
    """The ASGI app over ``library``. ``allowed_hosts``: unless None, the only
    ``Host`` header values served (others get 421)."""
    app = QuartTrio(__name__)
    app.config["RESPONSE_TIMEOUT"] = None  # event streams stay open

    def find(run_id: str) -> RunView:
        run = library.get(run_id)
        if run is None:
            raise NotFound(f"no run {run_id!r} here; the runs are listed at /api/runs")
        if not run.wanted:
            run.wanted = True  # read its episodes from now on (figures, live counts)
        return run

    @app.before_request
    async def check_host() -> Any:
        if allowed_hosts is not None and request.host not in allowed_hosts:
            return Response("unknown host", status=421, content_type="text/plain")
        return None

    @app.after_request
    async def secure(response: Response) -> Response:
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    @app.errorhandler(NotFound)  # werkzeug's: raised here with a message, or no route
    async def not_found(exc: NotFound) -> Any:
        described = exc.description != NotFound.description
        return _error(404, exc.description if described else f"nothing at {request.path}")

    @app.errorhandler(BadRequest)
    async def bad_query(exc: BadRequest) -> Any:
        return _error(400, str(exc))

    @app.errorhandler(405)
    async def read_only(_: Any) -> Any:
        return _error(405, "the viewer is read-only: GET only")

    # -- static --------------------------------------------------------------------

    @app.get("/static/view.css")
    async def view_css() -> Any:
        return Response(CSS, content_type="text/css; charset=utf-8")

    @app.get("/static/report.css")
    async def report_css() -> Any:
        return Response(REPORT_CSS, content_type="text/css; charset=utf-8")

    @app.get("/static/view.js")
    async def view_js() -> Any:
        return Response(JS, content_type="text/javascript; charset=utf-8")

    # -- pages ---------------------------------------------------------------------

    @app.get("/")
    async def runs() -> Any:
        return _html(pages.runs_page(library.ordered(), [str(r) for r in library.roots]))

    @app.get("/run/<run_id>")
    async def run_page(run_id: str) -> Any:
        run = find(run_id)
        flt = EpisodeFilter.from_args(request.args)
        offset = _int("offset", 0, 0, 1 << 62)
        page = await find_episodes(run, flt, offset, PAGE, expand=True)
        summary = run.summary_file if run.state != RUNNING else None
        return _html(pages.run_page(run, summary or {}, flt, page))

    @app.get("/run/<run_id>/figures")
    async def figures(run_id: str) -> Any:
        run = find(run_id)
        summary = await run.summary()
        own = run.drawn
        if own is None and run.state != RUNNING and run.caught_up:
            library.ask_drawing(run)  # the env's own figures: drawn in the background
        return _html(pages.figures(run, summary, own))

    @app.get("/run/<run_id>/episode/<int:number>")
    async def episode(run_id: str, number: int) -> Any:
        """``number``: the record's line in episodes.jsonl counted from 1, as the page
        labels it (issue 40: the URL counted from 0, its label from 1)."""
        run = find(run_id)
        line = number - 1
        if line < 0:
            raise NotFound(f"run {run_id!r}: episode lines count from 1, not {number}")
        page = await find_episodes(
            run, EpisodeFilter(), line, 1, expand=True, max_scan=1, budget_s=None
        )
        if not page.episodes or page.episodes[0][0] != line:
            raise NotFound(f"run {run_id!r} has no episode record on line {line + 1}")
        record = page.episodes[0][1]
        own = await run.episode_parts(record)  # the env's own sections, this episode's
        return _html(pages.episode_page(run, line, record, own))

    @app.get("/compare")
    async def compare_page() -> Any:
        chosen, results = await _compared()
        return _html(comparison_page(chosen, results))

    # -- JSON ----------------------------------------------------------------------

    @app.get("/api/runs")
    async def api_runs() -> Any:
        return {"runs": [r.row() for r in library.ordered()]}

    @app.get("/api/runs/<run_id>")
    async def api_run(run_id: str) -> Any:
        return find(run_id).row()

    @app.get("/api/runs/<run_id>/summary")
    async def api_summary(run_id: str) -> Any:
        run = find(run_id)
        summary = await run.summary()
        return {"id": run.id, "state": run.state, "complete": run.caught_up, "summary": summary}

    @app.get("/api/runs/<run_id>/episodes")
    async def api_episodes(run_id: str) -> Any:
        run = find(run_id)
        flt = EpisodeFilter.from_args(request.args)
        offset = _int("offset", 0, 0, 1 << 62)
        limit = _int("limit", PAGE, 1, MAX_LIMIT)
        page = await find_episodes(run, flt, offset, limit, expand=False)
        return Response(orjson.dumps(page.as_json()), content_type="application/json")

    @app.get("/api/compare")
    async def api_compare() -> Any:
        chosen, results = await _compared()
        return {
            "a": chosen[0].id,
            "pairs": [{"b": r.id, **res} for r, res in zip(chosen[1:], results, strict=True)],
        }

    async def _compared() -> tuple[list[RunView], list[dict[str, Any]]]:
        ids = request.args.getlist("run")
        if len(ids) < 2:
            raise BadRequest("run: give two or more runs to compare, e.g. ?run=A&run=B")
        chosen = [find(i) for i in ids]
        paths = [r.file(EPISODES) for r in chosen]
        for run, path in zip(chosen, paths, strict=True):
            if path is None:
                raise NotFound(f"run {run.id!r} holds no episodes.jsonl yet")
        results = [await trio.to_thread.run_sync(_compare, paths[0], path) for path in paths[1:]]
        return chosen, results

    # -- live ------------------------------------------------------------------------

    @app.get("/api/events")
    async def events() -> Any:
        async def rows() -> list[dict[str, str]]:
            return [{"id": r.id, "html": pages.run_row(r)} for r in library.ordered()]

        return await _stream(lambda: library.version, "rows", rows)

    @app.get("/api/runs/<run_id>/events")
    async def run_events(run_id: str) -> Any:
        run = find(run_id)
        last_state = [run.state]

        async def live() -> dict[str, Any]:
            changed, last_state[0] = last_state[0] != run.state, run.state
            return {
                "state": run.state,
                "complete": run.caught_up,
                "changed": changed,
                "episodes": run.tally.episodes,
                "facts": pages.live_facts(run),
                "newest": pages.newest(run),
            }

        return await _stream(lambda: run.version, "live", live)

    async def _stream(version: Any, name: str, payload: Any) -> Any:
        async def body() -> AsyncIterator[bytes]:
            sent = None
            while True:
                changed = library.changed
                if version() != sent:
                    sent = version()
                    yield _event(name, await payload())
                with trio.move_on_after(KEEPALIVE_S) as waited:
                    await changed.wait()
                if waited.cancelled_caught:
                    yield b": keepalive\n\n"

        response = await make_response(
            body(),
            {"Content-Type": "text/event-stream", "Cache-Control": "no-store"},
        )
        response.timeout = None  # type: ignore[union-attr]  # a quart Response here
        return response

    return app


def _compare(a: Path | None, b: Path | None) -> dict[str, Any]:
    """``taketurns compare``'s result for two ``episodes.jsonl`` files (streamed)."""
    assert a is not None
    assert b is not None
    return compare(read_episodes(a), read_episodes(b))


def _html(text: str, status: int = 200) -> Response:
    return Response(text, status=status, content_type="text/html; charset=utf-8")


def _error(status: int, message: str) -> Any:
    if request.path.startswith("/api/"):
        return Response(
            orjson.dumps({"error": message}), status=status, content_type="application/json"
        )
    body = f'<nav class="crumbs"><a href="/">runs</a></nav><h1>{status}</h1><p>{esc(message)}</p>'
    return _html(pages.layout(str(status), body, page="error"), status)
