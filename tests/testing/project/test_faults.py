# A user's tests of what their app does when the store's link drops or the broker refuses (statestore_faults).
import pytest

from sskv_mapping import PublishRefusedError, StateStoreDict, TransportError


def test_a_dropped_link_is_a_typed_error_then_recovers(statestore_faults, statestore_namespace):
    with StateStoreDict.connect(
        statestore_faults.url, namespace=statestore_namespace, local_cache_size=0, timeout=1.0
    ) as settings:
        settings["mode"] = "on"
        statestore_faults.disable()  # the link drops, and new connections are refused
        with pytest.raises(TransportError):
            settings["mode"]
        statestore_faults.enable()  # the network is back: the client reconnects by itself
        for _ in range(20):  # within a few calls' deadlines
            try:
                assert settings["mode"] == "on"
                break
            except TransportError:
                continue
        else:
            pytest.fail("the dict did not recover after the link came back")


def test_a_refused_publish_is_a_typed_error(statestore_faults, statestore_namespace):
    with StateStoreDict.connect(statestore_faults.url, namespace=statestore_namespace) as settings:
        settings["mode"] = "on"
        statestore_faults.reject_next("publish", 0x87)  # as fault:rejectpublish=135 would
        with pytest.raises(PublishRefusedError):
            settings["mode"] = "off"
        assert settings["mode"] == "on"  # the refused write never reached the store
        settings["mode"] = "off"
        assert settings["mode"] == "off"
