"""A small Flask app whose page cache and settings live in the Azure IoT Operations state store, so that every
instance of the app (every process, every machine) shares them.

* ``GET /``: a page cached for 30 s by Flask-Caching, on the state store backend (any instance serves the render
  another instance cached);
* ``GET /settings``, ``PUT /settings/<key>`` (JSON body), ``DELETE /settings/<key>``: settings shared by every
  instance through a ``StateStoreDict`` (a write clears the cached pages);
* ``POST /visits``: a counter exact across instances (the backend's ``inc``).

Run it: ``SSKV_URL=mqtt://127.0.0.1:1883 flask --app flask_app.app run`` from the ``integrations`` folder
(``sskv emulator --with-broker`` gives you a broker and the emulator).
"""

from __future__ import annotations

import itertools
import os
from typing import Any, cast

from flask import Flask, abort, jsonify, request
from flask.typing import ResponseReturnValue
from flask_caching import Cache

from sskv_mapping import StateStoreDict
from sskv_mapping.integrations.flask_caching import StateStoreCache


def create_app(url: str | None = None, *, name: str = "flask-example", instance: str = "1") -> Flask:
    """The app; ``url`` defaults to ``$SSKV_URL`` (else ``mqtt://127.0.0.1:1883``), ``name`` prefixes the
    state store namespaces, ``instance`` names this instance in the pages it renders."""
    # --8<-- [start:config]
    app = Flask(__name__)
    app.config.update(
        CACHE_TYPE="sskv_mapping.integrations.flask_caching.StateStoreCache",
        CACHE_SSKV_URL=url or os.environ.get("SSKV_URL", "mqtt://127.0.0.1:1883"),
        CACHE_KEY_PREFIX=f"{name}-pages",
        CACHE_DEFAULT_TIMEOUT=300,
    )
    cache = Cache(app)
    with app.app_context():
        backend = cast(StateStoreCache, cache.cache)

    def settings() -> StateStoreDict[Any]:
        # this process's dict on the backend's connection: a worker forked after create_app (gunicorn --preload,
        # uWSGI) gets its own, on its own connection
        return backend.shared_dict(f"{name}-settings")

    # --8<-- [end:config]
    app.extensions["sskv_settings"] = settings
    renders = itertools.count(1)

    @app.get("/")
    @cache.cached(timeout=30)
    def index() -> ResponseReturnValue:
        greeting = settings().get("greeting", "Hello")
        return f"<h1>{greeting}!</h1><p>render {next(renders)} by instance {instance}</p>"

    @app.get("/settings")
    def all_settings() -> ResponseReturnValue:
        return jsonify(settings().copy())

    @app.put("/settings/<key>")
    def put_setting(key: str) -> ResponseReturnValue:
        settings()[key] = request.get_json()
        cache.clear()  # pages rendered with the old settings; clears this app's page namespace only
        return jsonify({key: settings()[key]})

    @app.delete("/settings/<key>")
    def delete_setting(key: str) -> ResponseReturnValue:
        if settings().pop(key, None) is None:
            abort(404)
        cache.clear()
        return "", 204

    @app.post("/visits")
    def visit() -> ResponseReturnValue:
        return jsonify({"visits": backend.inc("visits")})

    return app
