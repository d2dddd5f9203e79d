"""Tests of ``sskv_mapping.client``: the request/response client, blocking and async."""
