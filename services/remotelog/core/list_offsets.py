"""ListOffsets' sentinel timestamps, with the values and names of Kafka's
ListOffsetsRequest (KIP-405 and KIP-1005 added the tiered ones); Spark's Kafka
source writes -2 and -1 for earliest and latest in its offsets JSON too."""

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6
