"""``project/`` is the throwaway project's test suite (run by test_plugin_in_a_project.py in a venv of its own,
with our wheel installed): not collected here."""

collect_ignore = ["project"]
