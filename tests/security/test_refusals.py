"""Refusals that no reconnect heals are said once, not looped (issue 26): credentials refused on every reconnect,
with the SAT token file re-read for each attempt, end the client with a typed error a state listener sees."""

from __future__ import annotations

from pathlib import Path

import pytest

from sskv_mapping import CredentialsRefusedError
from sskv_mapping.client import AsyncStateStoreClient, ConnectionState
from sskv_mapping.client._keeper import CREDENTIAL_TRIES
from tests._support.waiting import eventually

from ._fake_mqtt import FakeMqttBroker


async def test_credentials_refused_on_every_reconnect_stop_the_client(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("sat-token-one\n")
    async with FakeMqttBroker() as fake:
        client = AsyncStateStoreClient(
            "127.0.0.1", fake.port, sat_token_file=str(token), timeout=2, backoff_initial=0.01, backoff_max=0.05
        )
        states: list[ConnectionState] = []
        client.add_state_listener(states.append)
        await client.connect()
        try:
            token.write_text("sat-token-two\n")  # rotated, and revoked: the broker now refuses
            fake.connack_reason = 0x87
            assert fake.drop_all() == 1
            await eventually(lambda: client.state is ConnectionState.FAILED, timeout=10)
            connects = await fake.wait_for_connects(1 + CREDENTIAL_TRIES)
            assert len(connects) == 1 + CREDENTIAL_TRIES  # a few tries, then no more: no reconnect loop
            assert [c.auth_data for c in connects] == [b"sat-token-one"] + [b"sat-token-two"] * CREDENTIAL_TRIES
            assert isinstance(client.failure, CredentialsRefusedError)
            with pytest.raises(CredentialsRefusedError, match=r"(?i)not authori"):
                await client.get("k")
            assert states[-2:] == [ConnectionState.RECONNECTING, ConnectionState.FAILED]
            assert client._keeper._supervisor is not None and client._keeper._supervisor.done()  # no more tries
        finally:
            await client.close()
