"""The wire's segment file kinds as the store's SegmentFile (the servicer and direct writers)."""

from __future__ import annotations

from remotelog.api.segmentstore.v1 import segment_store_pb2 as pb
from remotelog.segmentstore.layout import SegmentFile

SEGMENT_FILES = {
    pb.SEGMENT_FILE_LOG: SegmentFile.LOG,
    pb.SEGMENT_FILE_OFFSET_INDEX: SegmentFile.OFFSET_INDEX,
    pb.SEGMENT_FILE_TIME_INDEX: SegmentFile.TIME_INDEX,
    pb.SEGMENT_FILE_TRANSACTION_INDEX: SegmentFile.TRANSACTION_INDEX,
    pb.SEGMENT_FILE_PRODUCER_SNAPSHOT: SegmentFile.PRODUCER_SNAPSHOT,
    pb.SEGMENT_FILE_LEADER_EPOCH_CHECKPOINT: SegmentFile.LEADER_EPOCH_CHECKPOINT,
}
