"""The demo views. Run two instances against the same broker and they share all of it."""

from __future__ import annotations

import json
import os
import uuid

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.views.decorators.cache import cache_page
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from sskv_mapping.integrations.django import shared_dict

#: Which process answered (the tests start two and tell them apart by this).
INSTANCE = os.environ.get("DEMO_INSTANCE", str(os.getpid()))


@cache_page(60, cache="pages")
def report(request: HttpRequest) -> JsonResponse:
    """An "expensive" page: rendered once, then served from the state store by every instance for 60 s."""
    return JsonResponse({"render_id": uuid.uuid4().hex, "rendered_by": INSTANCE})


def visits(request: HttpRequest) -> JsonResponse:
    """A per-visitor count in the session; the session lives in the state store, so any instance continues it."""
    request.session["visits"] = request.session.get("visits", 0) + 1
    return JsonResponse({"visits": request.session["visits"], "served_by": INSTANCE})


@csrf_exempt  # a JSON API for the demo; a form would carry Django's CSRF token
@require_http_methods(["GET", "POST"])
def counter(request: HttpRequest) -> JsonResponse:
    """A site-wide hit counter: ``cache.incr`` is exact across threads and processes."""
    if request.method == "POST":
        cache.add("hits", 0, timeout=None)  # only the first instance to get here creates it
        hits = cache.incr("hits")
    else:
        hits = cache.get("hits", 0)
    return JsonResponse({"hits": hits, "served_by": INSTANCE})


@csrf_exempt  # Django 5.0+ decorators wrap async views
async def counter_async(request: HttpRequest) -> HttpResponse:
    """The same counter from an async view: the cache's ``a*`` methods are native (no thread hop)."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    await cache.aadd("hits", 0, timeout=None)
    return JsonResponse({"hits": await cache.aincr("hits"), "served_by": INSTANCE})


@csrf_exempt
@require_http_methods(["GET", "POST"])
def config(request: HttpRequest) -> JsonResponse:
    """Shared settings (feature flags): a change POSTed to one instance is seen by every instance."""
    shared = shared_dict(settings.SSKV_CONFIG_NAMESPACE)  # one StateStoreDict per process, on the cache's connection
    if request.method == "POST":
        shared.update(json.loads(request.body))
    return JsonResponse({"config": dict(shared), "served_by": INSTANCE})


def banner(request: HttpRequest) -> JsonResponse:
    """A django-constance setting, read from the local cache the store's notifications keep current."""
    from constance import config as live

    return JsonResponse({"banner": live.BANNER, "served_by": INSTANCE})
