"""Test support code shared by the whole suite and the example apps, imported as ``tests._support...``.
Not a test package: nothing here is collected."""
