"""Tests of ``sskv_mapping.integrations``: the framework adapters (the example apps are in ``integrations/``)."""
