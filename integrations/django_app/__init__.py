"""The Django example project (a package only so that pytest names its tests ``django_app.tests...``, apart from
the other example apps' ``tests/test_app.py``)."""
