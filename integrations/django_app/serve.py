#!/usr/bin/env python
"""Serve the demo site on loopback with Django's threaded WSGI server: ``python serve.py [PORT]``.

``PORT`` 0 takes any free port. The line ``serving on http://127.0.0.1:PORT/`` is printed once the socket is
listening (``manage.py runserver`` prints its banner before binding), which is what the end-to-end tests wait
for before they send requests. For a human, ``python manage.py runserver`` does the same job.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.core.wsgi import get_wsgi_application

    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    application = get_wsgi_application()
    httpd = ThreadedWSGIServer(("127.0.0.1", port), WSGIRequestHandler)
    httpd.set_app(application)
    print(f"serving on http://127.0.0.1:{httpd.server_port}/", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()


if __name__ == "__main__":
    main()
