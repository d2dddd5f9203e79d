"""One module per framework adapter, each imported on its own (``sskv_mapping.integrations.django``...)."""
