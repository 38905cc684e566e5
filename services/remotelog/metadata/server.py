"""Assembly of the metadata manager service from its config: manager, gRPC server."""

from __future__ import annotations

from dataclasses import dataclass

from remotelog.api.metadata.v1 import metadata_pb2_grpc as pb_grpc
from remotelog.metadata.config import MetadataManagerConfig
from remotelog.metadata.manager import TopicBasedRemoteLogMetadataManager
from remotelog.metadata.servicer import MetadataServicer
from remotelog.rpc.server import RunningServer, start_server

SERVICE_NAME = "remotelog.api.metadata.v1.RemoteLogMetadataService"


@dataclass
class MetadataManagerService:
    """A running metadata manager: its server and the manager behind it."""

    server: RunningServer
    manager: TopicBasedRemoteLogMetadataManager

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace_s: float) -> None:
        await self.server.stop(grace_s)
        await self.manager.close()


async def start_metadata_manager(config: MetadataManagerConfig) -> MetadataManagerService:
    manager = TopicBasedRemoteLogMetadataManager(config)
    await manager.start()
    servicer = MetadataServicer(manager)
    try:
        server = await start_server(
            config,
            lambda s: pb_grpc.add_RemoteLogMetadataServiceServicer_to_server(servicer, s),  # type: ignore[no-untyped-call]
            [SERVICE_NAME],
        )
    except BaseException:
        await manager.close()
        raise
    return MetadataManagerService(server, manager)
