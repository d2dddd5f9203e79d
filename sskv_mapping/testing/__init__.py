"""Test your app against a state store: what the pytest plugin's fixtures hand out, usable without pytest too.

The plugin (``pytest_sskv_mapping``, registered by the package's ``pytest11`` entry point) gives every test
suite in an environment with ``sskv-mapping`` installed these fixtures (docs/testing.md):

* ``statestore``: an :class:`InProcessStore`, fresh per test: the real emulator in this process, no sockets, on a
  :class:`FakeClock` the test moves forward (``statestore.advance(seconds)``);
* ``statestore_server`` / ``statestore_url``: a :class:`StateStoreServer` (a private mosquitto and the emulator
  process), once per session (per pytest-xdist worker), and its ``mqtt://`` URL;
* ``statestore_namespace``: a namespace of the test's own;
* ``statestore_live``: a :class:`LiveStore`, the test's namespace on the server, with clients, faces and every
  framework adapter's settings.

Nothing here is imported until a fixture is used: the plugin module itself imports only pytest.

Must not import aiomqtt/paho, nor any framework.
"""

from ._clock import FakeClock
from ._inprocess import InProcessStore
from ._server import LiveStore, StateStoreServer, StateStoreStartError

__all__ = ["FakeClock", "InProcessStore", "LiveStore", "StateStoreServer", "StateStoreStartError"]
