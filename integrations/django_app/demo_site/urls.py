from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("report/", views.report),
    path("visits/", views.visits),
    path("counter/", views.counter),
    path("counter/async/", views.counter_async),
    path("config/", views.config),
    path("banner/", views.banner),
]
