"""Settings of the demo site. Everything shared lives in the state store:

* ``CACHES["default"]``: the site cache (the backend's default codec: pickle signed with a key derived from
  ``SECRET_KEY``), which also holds the sessions and the hit counter;
* ``CACHES["pages"]``: whole cached pages (``@cache_page``). Pages are ``HttpResponse`` objects, which only
  pickle can store, so this alias uses pickle, signed with a key derived from ``SECRET_KEY``: a payload
  without a valid signature is refused before anything is unpickled;
* ``SSKV_CONFIG_NAMESPACE``: shared settings (feature flags) in a ``StateStoreDict``;
* ``CONSTANCE_*``: django-constance's live settings (``BANNER``) in the namespace ``<SSKV_NAMESPACE>-constance``.

The broker comes from ``SSKV_URL`` (default ``mqtt://127.0.0.1:1883``: ``sskv emulator --with-broker`` serves
there), the namespaces from ``SSKV_NAMESPACE``.
"""

from __future__ import annotations

import hashlib
import os

SSKV_URL = os.environ.get("SSKV_URL", "mqtt://127.0.0.1:1883")
SSKV_NAMESPACE = os.environ.get("SSKV_NAMESPACE", "django-demo")
SSKV_CONFIG_NAMESPACE = f"{SSKV_NAMESPACE}-config"

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "demo-only-do-not-use-in-production")
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

ROOT_URLCONF = "demo_site.urls"
WSGI_APPLICATION = "demo_site.wsgi.application"
INSTALLED_APPS: list[str] = ["constance"]
DATABASES: dict[str, dict[str, str]] = {}  # nothing here needs one: sessions live in the cache
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
]
USE_TZ = True

# --8<-- [start:caches]
CACHES = {
    "default": {
        "BACKEND": "sskv_mapping.integrations.django.StateStoreCache",
        "LOCATION": SSKV_URL,
        "TIMEOUT": 300,
        "KEY_PREFIX": "demo",
        "OPTIONS": {"namespace": SSKV_NAMESPACE},
    },
    "pages": {
        "BACKEND": "sskv_mapping.integrations.django.StateStoreCache",
        "LOCATION": SSKV_URL,  # the same broker: both aliases share one connection per process
        "TIMEOUT": 60,
        "OPTIONS": {
            "namespace": f"{SSKV_NAMESPACE}-pages",
            "codec": "pickle",
            "pickle_key": hashlib.sha256(b"sskv-pages:" + SECRET_KEY.encode()).digest(),
        },
    },
}

SESSION_ENGINE = "django.contrib.sessions.backends.cache"  # sessions in CACHES["default"]: any instance serves them
# --8<-- [end:caches]

# django-constance's live settings in the state store: a change made anywhere (the admin of one instance,
# `sskv set`) is seen by every instance within milliseconds
CONSTANCE_BACKEND = "sskv_mapping.integrations.constance.StateStoreBackend"
CONSTANCE_SSKV_LOCATION = SSKV_URL
CONSTANCE_SSKV_NAMESPACE = f"{SSKV_NAMESPACE}-constance"
CONSTANCE_CONFIG = {"BANNER": ("Welcome", "the banner /banner/ shows")}

# errors (with their traceback) to the console also when DEBUG is off
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django.request": {"handlers": ["console"], "level": "ERROR"}},
}
