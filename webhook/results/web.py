"""The results page: every stored run by namespace, pod and time, each as an interactive flame
graph, a differential flame graph between any two runs, and downloads as folded stacks,
speedscope JSON and pprof.

Read-only over the store (the chart mounts the volume read-only into this container). The flame
graph pages come from the one renderer (webhook.render), as the CLI's do: self-contained (no
library, no CDN), the profile embedded as JSON and drawn with textContent, the script and style
allowed by their hashes in the Content-Security-Policy. The list of runs runs no script at all.

`access` (the results service's webhook.results.auth.Authenticator) makes every page need the
reader's Kubernetes bearer token and shows only the namespaces a SubjectAccessReview lets them
read (403 for a page of another namespace, before looking for the run, so the answer says
nothing about what is stored there). Without it (`sidecar-debug results serve` over a local
directory) every run is shown.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode

from flask import Flask, Response, abort, g, render_template_string, request

from webhook import render
from webhook.results.auth import AuthError
from webhook.results.index import DEFAULT_PAGE, MAX_PAGE, Page, Query, QueryError, parse_moment
from webhook.results.store import (
    Run,
    Store,
    StoreError,
    check_namespace,
    check_pod,
    check_technique,
)
from webhook.stacks import Stack, folded, pprof, speedscope
from webhook.wire import constants

# The list of runs and the error pages run no script; flame graph pages send their own policy.
CSP = ("default-src 'none'; script-src 'none'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.2em 2em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .3em; } h1 a { color: inherit; text-decoration: none; }
table { border-collapse: collapse; margin: .6em 0 1.2em; }
th, td { padding: .25em .7em; border-bottom: 1px solid #ddd; text-align: left; }
th { background: #f4f4f4; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
h2 { font-size: 1.1em; margin: 1.2em 0 .2em; } .muted { color: #777; }
td.failed { color: #a00; }
.bar { display: flex; gap: .8em; align-items: center; flex-wrap: wrap; margin: .5em 0; }
"""

_LAYOUT = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }} - sidecar-debug results</title>
<style>{{ style }}</style>
</head><body>
<h1><a href="{{ home }}">sidecar-debug results</a>
{%- if subtitle %} &middot; {{ subtitle }}{% endif %}</h1>
{{ body|safe }}
</body></html>
"""

_INDEX = """
<form method="get" action="./" id="filters" class="bar">
<label>namespace <input name="namespace" value="{{ filters.namespace }}" size="14"></label>
<label>pod <input name="pod" value="{{ filters.pod }}" size="18"></label>
<label>technique <input name="technique" value="{{ filters.technique }}" size="10"></label>
<label>since <input name="since" value="{{ filters.since }}" size="18"
 placeholder="2026-12-01"></label>
<label>until <input name="until" value="{{ filters.until }}" size="18"></label>
<button type="submit">filter</button>{% if filtered %} <a href="./">all runs</a>{% endif %}
</form>
{% if not groups %}
{% if filtered %}<p id="empty">No run matches these filters.</p>{% else %}
<p id="empty">No runs stored in <code>{{ root }}</code> yet. Runs appear here when a schedule
(annotation <code>sidecar-debug.io/schedule</code>) or <code>sidecar-debug trap</code> stores
one.</p>{% endif %}
{% else %}
<form method="get" action="diff">
<p class="bar"><span id="count">{{ count }} runs</span>{% if count > shown %}, newest first:
{{ first }}&ndash;{{ first + shown - 1 }} here{% endif %}. Pick a <b>before</b> (A) and an
<b>after</b> (B) run, then
<button type="submit" id="compare">differential flame graph</button></p>
{% for (namespace, pod), runs in groups %}
<h2 class="pod">{{ namespace }} / {{ pod }}</h2>
<table class="runs"><tr><th>A</th><th>B</th><th>started (UTC)</th><th>technique</th>
<th>seconds</th><th>samples</th><th>hottest</th><th>downloads</th></tr>
{% for run in runs %}
{% if run.failed %}
<tr class="run failed" data-run="{{ run.id }}">
<td></td><td></td>
<td><a class="view" href="runs/{{ run.id }}/">
{{- run.started.strftime('%Y-%m-%d %H:%M:%S') }}</a></td>
<td>{{ run.technique }}</td><td class="num">{{ run.meta.get('duration', '') }}</td>
<td class="failed" colspan="3"><b>failed</b> ({{ run.reason }}): {{ run.message }}</td></tr>
{% else %}
<tr class="run" data-run="{{ run.id }}">
<td><input type="radio" name="a" value="{{ run.id }}" aria-label="before"></td>
<td><input type="radio" name="b" value="{{ run.id }}" aria-label="after"></td>
<td><a class="view" href="runs/{{ run.id }}/">
{{- run.started.strftime('%Y-%m-%d %H:%M:%S') }}</a></td>
<td>{{ run.technique }}</td><td class="num">{{ seconds(run) }}</td>
<td class="num">{{ run.samples }}</td>
<td>{{ hottest(run) }}</td>
<td><a href="runs/{{ run.id }}/stacks.folded">folded</a> &middot;
<a href="runs/{{ run.id }}/profile.speedscope.json">speedscope</a> &middot;
<a href="runs/{{ run.id }}/profile.pb.gz">pprof</a></td></tr>
{% endif %}
{% endfor %}</table>
{% endfor %}
</form>
{% if next_page %}<p class="bar"><a id="older" href="{{ next_page }}">older runs</a></p>
{% endif %}
{% endif %}
"""

_FAILED = """
<p id="failed"><b>This recording failed</b> ({{ run.reason }}): {{ run.message }}</p>
<table><tr><th>started (UTC)</th><td>{{ run.started.strftime('%Y-%m-%d %H:%M:%S') }}</td></tr>
<tr><th>technique</th><td>{{ run.technique }}</td></tr>
<tr><th>schedule</th><td>{{ run.meta.get('schedule', '') }}</td></tr>
<tr><th>due</th><td>{{ run.meta.get('due', '') }}</td></tr></table>
<p class="muted">The pod's Events say the same (<code>kubectl describe pod {{ run.pod }} -n
{{ run.namespace }}</code>); after 3 failures with one reason the schedule is suspended for
this pod until the pod, its profile or the schedule changes.</p>
"""


def _hottest(run: Run) -> str:
    hottest, samples = run.hottest, run.samples
    if hottest and samples:
        name, count = hottest[0]
        return f"{name} ({100 * count / samples:.0f} %)"
    return ""


def _seconds(run: Run) -> str:
    seconds = run.seconds
    return "" if seconds is None else f"{seconds:g}"


class Access(Protocol):
    """Who reads, and which namespaces they may read (webhook.results.auth.Authenticator)."""

    def reader(self, header: str | None) -> Any: ...

    def can_read(self, user: Any, namespace: str) -> bool: ...


OPEN_PATHS = ("/healthz", "/agent/")  # no reader token (agents bring their own)
# The list's query parameters (the page and /api/runs): filters, page size, page token.
FILTERS = ("namespace", "pod", "technique", "since", "until")
LIST_PARAMETERS = (*FILTERS, "limit", "page")


def list_query(args: Any, namespaces: list[str] | None) -> Query:
    """The list's filters and page from the request's query parameters; QueryError (a 400)
    with the reason for anything it cannot use."""
    unknown = sorted(set(args) - set(LIST_PARAMETERS))
    if unknown:
        raise QueryError(f"unknown parameter {unknown[0][:40]!r}: the list takes "
                         f"{', '.join(LIST_PARAMETERS)}")
    for name in LIST_PARAMETERS:
        if len(args.getlist(name)) > 1:
            raise QueryError(f"{name}: given more than once")
    try:
        pod = check_pod(args["pod"]) if args.get("pod") else None
        technique = check_technique(args["technique"]) if args.get("technique") else None
    except StoreError as error:
        raise QueryError(str(error)) from None
    limit_text = args.get("limit") or str(DEFAULT_PAGE)
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_PAGE:
        raise QueryError(f"limit: {limit_text[:20]!r} is not a number of runs from 1 to "
                         f"{MAX_PAGE}")
    since = parse_moment("since", args["since"]) if args.get("since") else None
    until = parse_moment("until", args["until"]) if args.get("until") else None
    if since and until and since >= until:
        raise QueryError("since: the time range is empty (since is not before until)")
    return Query(namespaces=namespaces, pod=pod, technique=technique, since=since,
                 until=until, limit=int(limit_text), cursor=args.get("page") or None)


def create_app(root: Path, access: Access | None = None, store: Store | None = None) -> Flask:
    """The page over the runs in `root` (`store`: the results service's own, whose index it
    keeps in step as it stores)."""
    app = Flask(__name__, static_folder=None)
    store = store or Store(root)

    @app.before_request
    def authenticate() -> None:
        if access is None or request.path.startswith(OPEN_PATHS):
            return
        try:
            g.reader = access.reader(request.headers.get("Authorization"))
        except AuthError as refused:
            abort(refused.status, description=refused.message)

    def visible(namespace: str) -> bool:
        if access is None:
            return True
        allowed: dict[str, bool] = g.setdefault("allowed", {})
        if namespace not in allowed:
            try:
                allowed[namespace] = access.can_read(g.reader, namespace)
            except AuthError as refused:
                abort(refused.status, description=refused.message)
        return allowed[namespace]

    def forbidden(namespace: str) -> None:
        abort(403, description=f"you may not read the runs of namespace {namespace}: that "
              f"needs `{constants.RESULTS_READ_VERB}` on {constants.RESULTS_READ_RESOURCE}."
              f"{constants.RBAC_GROUP} there (e.g. the view role, or the chart's "
              "results-reader ClusterRole bound in that namespace)")

    def readable_page() -> Page:
        """The page of runs the request asks for, of the namespaces the reader may read;
        400 with the reason for a bad filter or page token, 403 for a namespace filter the
        reader may not read."""
        wanted = request.args.get("namespace")
        try:
            if wanted:
                check_namespace(wanted)
        except StoreError as error:
            abort(400, description=str(error))
        if wanted and not visible(wanted):
            forbidden(wanted)
        try:
            namespaces: list[str] | None = [wanted] if wanted else None
            if not wanted and access is not None:
                every = store.index.namespaces()
                namespaces = [ns for ns in every if visible(ns)]
                if len(namespaces) == len(every):
                    namespaces = None  # all of them: no filter (the newest-first index alone)
            query = list_query(request.args, namespaces)
            return store.page(query)
        except QueryError as error:
            app.logger.info("list refused: %s", error)
            abort(400, description=str(error))

    def next_link(page: Page) -> str | None:
        if page.next is None:
            return None
        kept = {name: request.args[name] for name in (*FILTERS, "limit")
                if request.args.get(name)}
        return "?" + urlencode({**kept, "page": page.next})

    compiled: dict[str, Any] = {}  # templates compiled once (not on every request)

    def template(text: str) -> Any:
        if text not in compiled:
            compiled[text] = app.jinja_env.from_string(text)
        return compiled[text]

    def page(title: str, body: str, *, subtitle: str = "", depth: int = 0, **extra: Any) -> str:
        home = "../" * depth or "./"
        inner = template(body).render(**extra)
        return str(template(_LAYOUT).render(
            title=title, subtitle=subtitle, body=inner, style=_STYLE, home=home))

    def graph(profile: render.Profile, home: str) -> Response:
        """A flame graph page from the one renderer; its own policy (the hashes of its inline
        script and style) is the header's."""
        page = render.render(profile, home=home)
        response = Response(page.html, mimetype="text/html")
        response.headers["Content-Security-Policy"] = f"{page.csp}; frame-ancestors 'none'"
        return response

    def find(run_id: str) -> Run:
        namespace = run_id.split("/", 1)[0]
        try:
            check_namespace(namespace)
        except StoreError as error:
            abort(404, description=str(error))
        if not visible(namespace):
            forbidden(namespace)
        try:
            return store.get(run_id)
        except StoreError as error:
            abort(404, description=str(error))

    def recorded(run: Run) -> None:
        if run.failed:
            abort(404, description=f"run {run.id} failed ({run.reason}): it recorded no "
                  "stacks")

    def stacks_of(run: Run) -> dict[Stack, int]:
        recorded(run)
        try:
            return run.stacks()
        except StoreError as error:
            abort(500, description=str(error))

    @app.after_request
    def headers(response: Response) -> Response:
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    @app.errorhandler(400)
    @app.errorhandler(401)
    @app.errorhandler(403)
    @app.errorhandler(404)
    @app.errorhandler(413)
    @app.errorhandler(500)
    @app.errorhandler(503)
    def error(error: Any) -> Response:
        code = getattr(error, "code", 500) or 500
        text = getattr(error, "description", "") or "error"
        if request.path.startswith(("/agent/", "/api/")):
            response = Response(json.dumps({"error": text}), status=code,
                                mimetype="application/json")
        else:
            body = "<p id='error'>{{ text }}</p><p><a href='{{ home }}'>all runs</a></p>"
            response = Response(render_template_string(
                _LAYOUT, title=str(code), subtitle=str(code), style=_STYLE, home="/",
                body=render_template_string(body, text=text, home="/")), status=code,
                mimetype="text/html")
        if code == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="sidecar-debug results"'
        return response

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/")
    def index() -> str:
        """A page of runs (newest first, DEFAULT_PAGE of them), grouped by pod, filtered."""
        listed = readable_page()
        runs = listed.runs
        groups: dict[tuple[str, str], list[Run]] = {}
        for run in sorted(runs, key=lambda r: (r.namespace, r.pod)):
            groups.setdefault((run.namespace, run.pod), []).append(run)
        for members in groups.values():
            members.sort(key=lambda r: (r.started, r.name), reverse=True)
        filters = {name: request.args.get(name, "") for name in FILTERS}
        return page("runs", _INDEX, groups=list(groups.items()), count=listed.total,
                    shown=len(runs), first=listed.first, next_page=next_link(listed),
                    filters=filters, filtered=any(filters.values()),
                    root=str(root), hottest=_hottest, seconds=_seconds)

    @app.get("/api/runs")
    def api_runs() -> Response:
        """A page of runs as a JSON list, newest first; the next page's URL in the Link
        header (rel="next"), the number of runs matching the filters in X-Total-Count."""
        listed = readable_page()
        data = [{"id": run.id, "namespace": run.namespace, "pod": run.pod,
                 "technique": run.technique, "started": run.started.isoformat(),
                 "samples": run.samples, "outcome": "failed" if run.failed else "stored",
                 **({"reason": run.reason, "message": run.message} if run.failed else {})}
                for run in listed.runs]
        response = Response(json.dumps(data), mimetype="application/json")
        link = next_link(listed)
        if link:
            response.headers["Link"] = f'<{request.path}{link}>; rel="next"'
        response.headers["X-Total-Count"] = str(listed.total)
        return response

    @app.get("/runs/<namespace>/<pod>/<name>/")
    def view(namespace: str, pod: str, name: str) -> Response:
        run = find(f"{namespace}/{pod}/{name}")
        if run.failed:
            return Response(page(run.id, _FAILED, subtitle=f"{namespace} / {pod}", depth=4,
                                 run=run), mimetype="text/html")
        return graph(render.Profile(stacks_of(run), meta=run.meta, title=run.id,
                                    name=f"{pod}-{name}"), home="../../../../")

    @app.get("/runs/<namespace>/<pod>/<name>/stacks.folded")
    def download_folded(namespace: str, pod: str, name: str) -> Response:
        run = find(f"{namespace}/{pod}/{name}")
        recorded(run)
        return _download(run.folded_text().encode(), "text/plain; charset=utf-8",
                         f"{pod}-{name}.folded")

    @app.get("/runs/<namespace>/<pod>/<name>/profile.speedscope.json")
    def download_speedscope(namespace: str, pod: str, name: str) -> Response:
        run = find(f"{namespace}/{pod}/{name}")
        return _download(speedscope.encode(stacks_of(run), run.id), "application/json",
                         f"{pod}-{name}.speedscope.json")

    @app.get("/runs/<namespace>/<pod>/<name>/profile.pb.gz")
    def download_pprof(namespace: str, pod: str, name: str) -> Response:
        run = find(f"{namespace}/{pod}/{name}")
        frequency = run.meta.get("frequency")
        period = int(1e9 / frequency) if isinstance(frequency, int) and frequency > 0 else 0
        blob = pprof.encode(stacks_of(run), period_ns=period, comment=run.id,
                             time_ns=int(run.started.timestamp() * 1e9))
        return _download(blob, "application/octet-stream", f"{pod}-{name}.pb.gz")

    def pair() -> tuple[Run, Run]:
        a, b = request.args.get("a"), request.args.get("b")
        if not a or not b:
            abort(400, description="pick two runs: a (before) and b (after)")
        return find(a), find(b)

    @app.get("/diff")
    def diff_view() -> Response:
        a, b = pair()
        return graph(render.Profile(stacks_of(b), base=stacks_of(a), title=f"{a.id} -> {b.id}",
                                    name="diff"), home="./")

    @app.get("/diff.folded")
    def diff_download() -> Response:
        a, b = pair()
        text = folded.format_diff(folded.diff(stacks_of(a), stacks_of(b)))
        return _download(text.encode(), "text/plain; charset=utf-8", "diff.folded")

    return app


def _download(content: bytes, mimetype: str, filename: str) -> Response:
    response = Response(content, mimetype=mimetype)
    safe = "".join(ch if ch.isalnum() or ch in "-._" else "_" for ch in filename)
    response.headers["Content-Disposition"] = f'attachment; filename="{safe}"'
    return response
