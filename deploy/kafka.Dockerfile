# Apache Kafka with the remotelog plugin as its RemoteStorageManager and
# RemoteLogMetadataManager (docs/kafka-plugin.md). The plugin is built from the
# same protos as the services; one jar serves every Kafka from 3.7 to 4.4.
# KAFKA_VERSION: the apache/kafka image, by default the version jvm/pom.xml pins;
# any of jvm/pom.xml's kafka.matrix.versions (apache/kafka images start at 3.7.0).
# Build from the repository root:
#   docker build -f deploy/kafka.Dockerfile --build-arg KAFKA_VERSION=3.9.1 -t remotelog-kafka .
ARG KAFKA_VERSION=4.4.0

FROM maven:3.9-eclipse-temurin-17 AS plugin
WORKDIR /src
COPY jvm/pom.xml jvm/pom.xml
COPY protos protos
COPY clients/kafka-plugin/pom.xml clients/kafka-plugin/pom.xml
COPY clients/kafka-plugin/src clients/kafka-plugin/src
RUN mvn -q -B -f clients/kafka-plugin/pom.xml package -DskipTests

FROM apache/kafka:${KAFKA_VERSION}
# Where remote.log.storage.manager.class.path and ...metadata.manager.class.path point.
COPY --from=plugin /src/clients/kafka-plugin/target/remotelog-kafka-plugin-0.1.0.jar /opt/remotelog/remotelog-kafka-plugin.jar
